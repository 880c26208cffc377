//! `$redact: <expression>`: the expression decides, level by level, whether a document (and each
//! sub-document, also inside arrays) is kept whole (`$$KEEP`), dropped (`$$PRUNE`) or kept with
//! its fields redacted in turn (`$$DESCEND`).
//!
//! As in MongoDB the three variables are the strings `"keep"`, `"prune"` and `"descend"`, defined
//! only inside this stage: the spec is rewritten to those literals before it is parsed. Partial:
//! field paths and `$$ROOT`/`$$CURRENT` both see the level being decided (MongoDB keeps `$$ROOT`
//! the top document).
//!
//! Must not: hold more than one document; it runs per document, so the split lets shards run it.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use super::expr::{Expr, Scope};
use crate::error::{QueryError, Result};

pub(crate) struct Redact {
    expr: Expr,
}

/// The value of `$$DESCEND`, `$$PRUNE` and `$$KEEP` in MongoDB.
fn rewrite(v: &Bson) -> Bson {
    match v {
        Bson::String(s) => match s.as_str() {
            "$$DESCEND" => Bson::Document(doc! { "$literal": "descend" }),
            "$$PRUNE" => Bson::Document(doc! { "$literal": "prune" }),
            "$$KEEP" => Bson::Document(doc! { "$literal": "keep" }),
            _ => v.clone(),
        },
        Bson::Document(d) if d.contains_key("$literal") => v.clone(),
        Bson::Document(d) => Bson::Document(d.iter().map(|(k, v)| (k.clone(), rewrite(v))).collect()),
        Bson::Array(a) => Bson::Array(a.iter().map(rewrite).collect()),
        other => other.clone(),
    }
}

enum Decision {
    Keep,
    Prune,
    Descend,
}

impl Redact {
    pub(crate) fn parse(arg: &Bson) -> Result<Redact> {
        Ok(Redact { expr: Expr::parse(&rewrite(arg))? })
    }

    /// The redacted document, `None` when pruned.
    pub(crate) fn apply(&self, doc: Document, scope: Option<&Scope<'_>>) -> Result<Option<Document>> {
        match self.decide(&doc, scope)? {
            Decision::Keep => Ok(Some(doc)),
            Decision::Prune => Ok(None),
            Decision::Descend => {
                let mut out = Document::new();
                for (k, v) in doc {
                    if let Some(v) = self.value(v, scope)? {
                        out.insert(k, v);
                    }
                }
                Ok(Some(out))
            }
        }
    }

    fn value(&self, v: Bson, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
        Ok(match v {
            Bson::Document(d) => self.apply(d, scope)?.map(Bson::Document),
            Bson::Array(items) => {
                let mut kept = Vec::with_capacity(items.len());
                for item in items {
                    kept.extend(self.value(item, scope)?);
                }
                Some(Bson::Array(kept))
            }
            other => Some(other),
        })
    }

    fn decide(&self, doc: &Document, scope: Option<&Scope<'_>>) -> Result<Decision> {
        match self.expr.eval_in(doc, scope)? {
            Some(Bson::String(s)) if s == "keep" => Ok(Decision::Keep),
            Some(Bson::String(s)) if s == "prune" => Ok(Decision::Prune),
            Some(Bson::String(s)) if s == "descend" => Ok(Decision::Descend),
            other => Err(QueryError::new(
                ErrorCode::Location17053,
                format!(
                    "$redact's expression should not return anything aside from the variables $$KEEP, $$DESCEND, \
                     and $$PRUNE, but returned {}",
                    other.map_or("MISSING".to_owned(), |v| crate::display::value(&v))
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{Bson, bson, doc};

    use crate::aggregate::Pipeline;
    use shoal_proto::ErrorCode;

    fn redact(expr: Bson, d: bson::Document) -> crate::error::Result<Vec<bson::Document>> {
        Pipeline::parse(&[bson!({ "$redact": expr })])?.run(std::iter::once(d))
    }

    #[test]
    fn descends_into_documents_and_arrays_pruning_by_level() {
        let d = doc! { "level": 1, "a": { "level": 5, "x": 1 }, "b": [ { "level": 2 }, { "level": 9 }, 3 ] };
        let expr = bson!({ "$cond": [ { "$lte": [ "$level", 3 ] }, "$$DESCEND", "$$PRUNE" ] });
        assert_eq!(redact(expr, d).unwrap(), vec![doc! { "level": 1, "b": [ { "level": 2 }, 3 ] }]);
    }

    #[test]
    fn keep_and_prune_at_the_top() {
        let d = doc! { "a": 1 };
        assert_eq!(redact(bson!("$$KEEP"), d.clone()).unwrap(), vec![d.clone()]);
        assert!(redact(bson!("$$PRUNE"), d).unwrap().is_empty());
    }

    #[test]
    fn anything_else_is_an_error() {
        assert_eq!(redact(bson!("$a"), doc! { "a": 1 }).unwrap_err().code, ErrorCode::Location17053);
        assert_eq!(redact(bson!({ "$literal": "$$KEEP" }), doc! {}).unwrap_err().code, ErrorCode::Location17053);
    }
}
