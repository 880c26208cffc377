//! `$lookup` (the equality form `{from, localField, foreignField, as}`): the pure half. The stage
//! needs another collection, which only the router can reach across shards, so the pipeline
//! engine does not run it; the router asks this module which values to look up, queries the
//! foreign collection with [`Lookup::foreign_filter`] and attaches the matches with
//! [`Lookup::attach`].
//!
//! Semantics are MongoDB's: a local value that is an array matches each of its elements (and a
//! path through an array of documents collects every element's value); a missing or null local
//! value matches foreign documents whose `foreignField` is null or missing; a foreign array field
//! matches when any element equals a local value (the foreign side is matched by the query
//! language's `$in`, so equality is `order::values_equal` with array traversal, as in MongoDB).
//!
//! Must not: do I/O or hold foreign documents beyond the call.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::order::compare_values;

use super::Pipeline;

#[derive(Debug, Clone)]
pub struct Lookup {
    /// The foreign collection, in the aggregated collection's database.
    pub from: String,
    /// `(localField, foreignField)`; `None` (the pipeline-only form): every foreign document is a
    /// candidate.
    equality: Option<(Vec<String>, String)>,
    as_field: Vec<String>,
    /// `let`: names and expressions over the local document, seen by `pipeline` as `$$name`.
    lets: Vec<(String, Bson)>,
    /// `pipeline` (validated), run over each local document's candidates.
    pipeline: Option<Vec<Bson>>,
}

/// A `$lookup`'s sub-pipeline, parsed once for all local documents.
pub struct SubPipeline {
    pipeline: Pipeline,
    /// The command's `let` values, beneath the lookup's own.
    base_vars: Vec<(String, Bson)>,
}

impl Lookup {
    pub fn parse(arg: &Bson) -> Result<Lookup> {
        let Bson::Document(spec) = arg else {
            // MongoDB: Location40319.
            return Err(QueryError::failed_to_parse("the $lookup specification must be an object"));
        };
        let (mut from, mut local, mut foreign, mut as_field) = (None, None, None, None);
        let (mut lets, mut pipeline) = (Vec::new(), None);
        for (k, v) in spec {
            let slot = match (k.as_str(), v) {
                ("from", _) => &mut from,
                ("localField", _) => &mut local,
                ("foreignField", _) => &mut foreign,
                ("as", _) => &mut as_field,
                ("let", Bson::Document(d)) => {
                    for (name, e) in d {
                        check_var_name(name)?;
                        super::expr::Expr::parse(e)?;
                        lets.push((name.clone(), e.clone()));
                    }
                    continue;
                }
                ("pipeline", Bson::Array(stages)) => {
                    let parsed = Pipeline::parse(stages)?;
                    if let Some(bad) =
                        parsed.stage_names().into_iter().find(|n| matches!(*n, "$out" | "$merge" | "$lookup"))
                    {
                        // MongoDB: Location51047 for $out/$merge; nested $lookup is Shoal's limit.
                        return Err(QueryError::new(
                            ErrorCode::NotImplemented,
                            format!("{bad} is not supported inside a $lookup pipeline"),
                        ));
                    }
                    pipeline = Some(stages.clone());
                    continue;
                }
                ("let" | "pipeline", other) => {
                    return Err(QueryError::failed_to_parse(format!(
                        "$lookup argument '{k}' must be {}, is type {}",
                        if k == "let" { "an object" } else { "an array" },
                        crate::display::type_name(other)
                    )));
                }
                // MongoDB: Location9.
                (other, _) => {
                    return Err(QueryError::failed_to_parse(format!("unknown argument to $lookup: {other}")));
                }
            };
            match v {
                Bson::String(s) => *slot = Some(s.clone()),
                Bson::Document(_) if k == "from" => {
                    return Err(QueryError::new(
                        ErrorCode::NotImplemented,
                        "$lookup from another database ({from: {db, coll}}) is not supported",
                    ));
                }
                // MongoDB: Location4570.
                other => {
                    return Err(QueryError::failed_to_parse(format!(
                        "$lookup argument '{k}: {other}' must be a string, is type {}",
                        crate::display::type_name(other)
                    )));
                }
            }
        }
        // MongoDB: Location4572 (as missing) and Location4571 (one of the fields missing).
        let missing = |what: &str| QueryError::failed_to_parse(format!("$lookup requires '{what}' to be specified"));
        let from = from.ok_or_else(|| missing("from"))?;
        let as_field = as_field.ok_or_else(|| missing("as"))?;
        let equality = match (local, foreign) {
            (Some(l), Some(f)) => Some((super::expr::parse_field_path(&l)?, f)),
            (None, None) if pipeline.is_some() => None,
            _ => {
                return Err(QueryError::failed_to_parse(
                    "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
                ));
            }
        };
        if !lets.is_empty() && pipeline.is_none() {
            return Err(QueryError::failed_to_parse("$lookup 'let' requires a 'pipeline'"));
        }
        Ok(Lookup { from, equality, as_field: super::expr::parse_field_path(&as_field)?, lets, pipeline })
    }

    /// The sub-pipeline, if any, with the command's `let` beneath the lookup's own variables.
    pub fn sub_pipeline(&self, command_lets: Option<&Document>) -> Result<Option<SubPipeline>> {
        let Some(stages) = &self.pipeline else { return Ok(None) };
        let pipeline = Pipeline::parse(stages)?.with_let(command_lets)?;
        let base_vars = pipeline.vars.clone();
        Ok(Some(SubPipeline { pipeline, base_vars }))
    }

    /// The filter on the foreign collection that finds every candidate of `values`.
    pub fn candidates_filter(&self, values: &[Bson]) -> Document {
        match &self.equality {
            Some(_) => self.foreign_filter(values),
            None => Document::new(),
        }
    }

    /// The values of `localField` that `doc` matches foreign documents on (never empty: a
    /// missing value is null).
    pub fn local_values(&self, doc: &Document) -> Vec<Bson> {
        let mut out = Vec::new();
        let Some((local, _)) = &self.equality else { return vec![Bson::Null] };
        collect(&Bson::Document(doc.clone()), local, &mut out);
        if out.is_empty() {
            out.push(Bson::Null);
        }
        out
    }

    /// The filter on the foreign collection that finds every match of `values`.
    fn foreign_filter(&self, values: &[Bson]) -> Document {
        match &self.equality {
            Some((_, foreign)) => doc! { foreign.as_str(): { "$in": values.to_vec() } },
            None => Document::new(),
        }
    }

    /// `doc` with `as` set to the foreign documents (of `candidates`) it matches, in their order,
    /// through `sub` (from [`Lookup::sub_pipeline`]) when there is a pipeline. A result past
    /// MongoDB's 16 MiB document limit is refused.
    pub fn attach(
        &self,
        mut doc: Document,
        candidates: &[Document],
        sub: Option<&mut SubPipeline>,
    ) -> Result<Document> {
        let filter = Filter::parse(&self.foreign_filter(&self.local_values(&doc)))?;
        let matches = candidates.iter().filter(|f| filter.matches(f)).cloned();
        let joined: Vec<Bson> = match sub {
            None => matches.map(Bson::Document).collect(),
            Some(sub) => {
                let mut vars = sub.base_vars.clone();
                for (name, e) in &self.lets {
                    let value = super::expr::Expr::parse(e)?.eval(&doc)?.unwrap_or(Bson::Undefined);
                    vars.retain(|(n, _)| n != name);
                    vars.push((name.clone(), value));
                }
                sub.pipeline.set_vars(&crate::vars::LetVars::from_pairs(vars));
                sub.pipeline.run(matches)?.into_iter().map(Bson::Document).collect()
            }
        };
        super::stages::set_nested(&mut doc, &self.as_field, Bson::Array(joined));
        if super::doc_size(&doc) > DOCUMENT_BYTES_MAX {
            return Err(QueryError::new(
                ErrorCode::BSONObjectTooLarge,
                format!(
                    "$lookup: the '{}' array makes a document larger than {DOCUMENT_BYTES_MAX} bytes",
                    self.as_field.join(".")
                ),
            ));
        }
        Ok(doc)
    }
}

/// MongoDB's largest document.
const DOCUMENT_BYTES_MAX: usize = 16 * 1024 * 1024;

fn check_var_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let valid =
        chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(QueryError::failed_to_parse(format!(
            "'{name}' starts with an invalid character for a user variable name"
        )));
    }
    Ok(())
}

/// The distinct values of `values`, in first-seen order.
pub fn distinct(values: impl IntoIterator<Item = Bson>) -> Vec<Bson> {
    let mut seen: Vec<Bson> = Vec::new();
    let mut sorted: Vec<Bson> = Vec::new();
    for v in values {
        if let Err(at) = sorted.binary_search_by(|s| compare_values(s, &v)) {
            sorted.insert(at, v.clone());
            seen.push(v);
        }
    }
    seen
}

pub(super) fn collect(v: &Bson, path: &[String], out: &mut Vec<Bson>) {
    let Some((first, rest)) = path.split_first() else {
        match v {
            Bson::Array(items) => out.extend(items.iter().cloned()),
            other => out.push(other.clone()),
        }
        return;
    };
    match v {
        Bson::Document(d) => {
            if let Some(next) = d.get(first) {
                collect(next, rest, out);
            }
        }
        Bson::Array(items) => {
            for item in items.iter().filter(|i| matches!(i, Bson::Document(_))) {
                collect(item, path, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use super::*;

    impl Lookup {
        fn attach_plain(&self, doc: Document, candidates: &[Document]) -> Result<Document> {
            self.attach(doc, candidates, None)
        }
    }

    #[test]
    fn pipeline_form_sees_let_variables() {
        let l = Lookup::parse(&bson!({
            "from": "f", "localField": "a", "foreignField": "x", "let": {"mult": "$m"},
            "pipeline": [{"$project": {"_id": 0, "y": {"$multiply": ["$x", "$$mult"]}}}, {"$sort": {"y": 1}}],
            "as": "out",
        }))
        .unwrap();
        let foreign = vec![doc! {"x": 1}, doc! {"x": 2}];
        let mut sub = l.sub_pipeline(None).unwrap().unwrap();
        let d = l.attach(doc! {"a": 1, "m": 10}, &foreign, Some(&mut sub)).unwrap();
        assert_eq!(d.get_array("out").unwrap(), &vec![Bson::Document(doc! {"y": 10})]);
        let d = l.attach(doc! {"a": [1, 2], "m": 3}, &foreign, Some(&mut sub)).unwrap();
        assert_eq!(d.get_array("out").unwrap(), &vec![Bson::Document(doc! {"y": 3}), Bson::Document(doc! {"y": 6})]);
        // Without localField/foreignField every foreign document is a candidate.
        let all = Lookup::parse(&bson!({"from": "f", "pipeline": [{"$count": "n"}], "as": "c"})).unwrap();
        assert_eq!(all.candidates_filter(&[Bson::Int32(1)]), Document::new());
        let mut sub = all.sub_pipeline(None).unwrap().unwrap();
        let d = all.attach(doc! {}, &foreign, Some(&mut sub)).unwrap();
        assert_eq!(d.get_array("c").unwrap(), &vec![Bson::Document(doc! {"n": 2})]);
    }

    fn lookup(local: &str, foreign: &str) -> Lookup {
        Lookup::parse(&bson!({"from": "f", "localField": local, "foreignField": foreign, "as": "out"})).unwrap()
    }

    #[test]
    fn parse_errors() {
        let err = |spec: Bson| Lookup::parse(&spec).unwrap_err().code;
        assert_eq!(err(bson!(1)), ErrorCode::FailedToParse);
        assert_eq!(err(bson!({"from": "f", "localField": "a", "foreignField": "b"})), ErrorCode::FailedToParse);
        assert_eq!(err(bson!({"from": "f", "localField": "a", "as": "x"})), ErrorCode::FailedToParse);
        assert_eq!(
            err(bson!({"from": 1, "localField": "a", "foreignField": "b", "as": "x"})),
            ErrorCode::FailedToParse
        );
        assert_eq!(err(bson!({"from": "f", "pipeline": [{"$out": "x"}], "as": "x"})), ErrorCode::NotImplemented);
        assert_eq!(err(bson!({"from": "f", "pipeline": 1, "as": "x"})), ErrorCode::FailedToParse);
        assert_eq!(err(bson!({"from": "f", "pipeline": [], "let": {"Bad": 1}, "as": "x"})), ErrorCode::FailedToParse);
        assert_eq!(
            err(bson!({"from": "f", "localField": "a", "foreignField": "b", "let": {"v": 1}, "as": "x"})),
            ErrorCode::FailedToParse
        );
        assert_eq!(
            err(bson!({"from": "f", "localField": "a", "foreignField": "b", "as": "x", "y": 1})),
            ErrorCode::FailedToParse
        );
    }

    #[test]
    fn local_values_follow_mongodb() {
        let l = lookup("a.b", "x");
        assert_eq!(l.local_values(&doc! {"a": {"b": 1}}), vec![Bson::Int32(1)]);
        assert_eq!(l.local_values(&doc! {"a": {"b": [1, 2]}}), vec![Bson::Int32(1), Bson::Int32(2)]);
        assert_eq!(l.local_values(&doc! {"a": [{"b": 1}, {"c": 2}, {"b": 3}]}), vec![Bson::Int32(1), Bson::Int32(3)]);
        assert_eq!(l.local_values(&doc! {"z": 1}), vec![Bson::Null]);
        assert_eq!(
            distinct([Bson::Int32(1), Bson::Double(1.0), Bson::Null, Bson::Null]),
            vec![Bson::Int32(1), Bson::Null]
        );
    }

    #[test]
    fn attach_matches_equal_values_nulls_and_arrays() {
        let foreign = vec![
            doc! {"_id": 1, "x": 1},
            doc! {"_id": 2, "x": [1, 5]},
            doc! {"_id": 3, "x": Bson::Null},
            doc! {"_id": 4},
            doc! {"_id": 5, "x": 2},
        ];
        let ids = |d: Document| -> Vec<i32> {
            d.get_array("out").unwrap().iter().map(|f| f.as_document().unwrap().get_i32("_id").unwrap()).collect()
        };
        let l = lookup("a", "x");
        assert_eq!(ids(l.attach_plain(doc! {"a": 1}, &foreign).unwrap()), [1, 2]);
        assert_eq!(ids(l.attach_plain(doc! {"a": [2, 5]}, &foreign).unwrap()), [2, 5]);
        assert_eq!(ids(l.attach_plain(doc! {"b": 1}, &foreign).unwrap()), [3, 4]);
        assert_eq!(ids(l.attach_plain(doc! {"a": Bson::Null}, &foreign).unwrap()), [3, 4]);
        assert_eq!(ids(l.attach_plain(doc! {"a": 9}, &foreign).unwrap()), Vec::<i32>::new());
        let nested = lookup("a", "x").attach_plain(doc! {"a": 2}, &foreign).unwrap();
        assert_eq!(nested.get_array("out").unwrap().len(), 1);
    }
}
