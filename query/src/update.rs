//! Update documents: operator style (`{$set: {...}, $inc: {...}}`) and replacement style, applied
//! to one document at a time, plus building the document an upsert inserts.
//!
//! Owns: parsing and validating an update once ([`UpdateSpec::parse`]) and applying it
//! ([`UpdateSpec::apply`]) with MongoDB's semantics and error codes.
//!
//! Invariants:
//! - A parsed operator update touches pairwise non-conflicting paths (no path is a prefix of, or
//!   equal to, another), so the order in which field updates run only decides the position of
//!   newly created fields. They run in MongoDB 5.0's order: by path, numeric components
//!   numerically, the others lexicographically.
//! - `apply` is atomic: it works on a copy and writes back only when every operator succeeded.
//! - `_id` never changes once a document has one, and it stays the first field.
//!
//! Positional paths: `$`, `$[]` and `$[<identifier>]` (with `arrayFilters`) are expanded against
//! the document into concrete paths before the operators run (`positional`).
//!
//! The positional `$` needs the query that matched the document ([`UpdateSpec::apply_matched`]).
//!
//! Pipeline-style updates run the document through `$addFields`/`$set`, `$project`, `$unset`,
//! `$replaceRoot`/`$replaceWith` stages (the aggregation module's); `_id` may not change.
//!
//! Not yet: arithmetic on Decimal128 (bson 3 has no decimal arithmetic).

mod apply;
mod arith;
mod arrays;
mod parse;
mod positional;

pub use positional::ArrayFilters;

use bson::{Bson, DateTime, Document};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::sort::SortSpec;

/// What an update needs from its caller; the crate reads no clock of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateContext {
    /// The value `$currentDate` writes.
    pub now: DateTime,
    /// True when the document is being inserted by an upsert; only then does `$setOnInsert` apply.
    pub is_upsert_insert: bool,
}

#[derive(Debug)]
pub enum UpdateSpec {
    /// `{$set: ..., $inc: ...}`; field updates sorted into application order, with the
    /// statement's `arrayFilters` for `$[<identifier>]` paths.
    Operators(Vec<FieldUpdate>, ArrayFilters),
    /// A whole new document; `_id` may be absent (the old one is kept) but not different.
    Replacement(Document),
    /// An aggregation pipeline of `$addFields`/`$set`, `$project`, `$unset`, `$replaceRoot` and
    /// `$replaceWith` stages run on the document; `_id` may not change.
    Pipeline(crate::aggregate::Pipeline),
}

/// The stages MongoDB allows in an update pipeline.
const PIPELINE_UPDATE_STAGES: &[&str] = &["$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith"];

/// One operator on one path, e.g. the `a.b` of `{$inc: {"a.b": 1}}`.
#[derive(Debug)]
pub struct FieldUpdate {
    pub(crate) path: FieldPath,
    pub(crate) op: Op,
}

impl FieldUpdate {
    /// The dotted path this update writes.
    pub fn path(&self) -> &str {
        &self.path.dotted
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldPath {
    pub(crate) dotted: String,
    pub(crate) parts: Vec<String>,
}

impl FieldPath {
    fn last(&self) -> &str {
        self.parts.last().map(String::as_str).unwrap_or("")
    }
}

#[derive(Debug)]
pub(crate) enum Op {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    CurrentDate {
        timestamp: bool,
    },
    /// The source side of a `$rename`; the value moves to `to`.
    RenameFrom {
        to: FieldPath,
    },
    /// The target side of a `$rename`.
    RenameTo {
        from: FieldPath,
    },
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    Pop {
        first: bool,
    },
    Pull(PullCond),
    PullAll(Vec<Bson>),
}

#[derive(Debug)]
pub(crate) struct PushSpec {
    pub(crate) each: Vec<Bson>,
    pub(crate) slice: Option<i64>,
    pub(crate) sort: Option<PushSort>,
    pub(crate) position: Option<i64>,
}

#[derive(Debug)]
pub(crate) enum PushSort {
    /// `$sort: 1` or `-1`: compare whole elements.
    Whole { descending: bool },
    /// `$sort: {field: 1}`: compare embedded documents by a sort pattern.
    Pattern(SortSpec),
}

/// How `$pull` decides which elements go, after MongoDB's `PullNode` matchers.
pub(crate) enum PullCond {
    /// A non-document value: remove elements equal to it.
    Equal(Bson),
    /// `{$pull: {a: {b: 1}}}`: remove embedded documents matching the query `{b: 1}`.
    Object(Filter),
    /// `{$pull: {a: {$gte: 5}}}` or a regex: match each element as the value of a field `v`.
    Wrapped(Filter),
}

impl std::fmt::Debug for PullCond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PullCond::Equal(v) => write!(f, "Equal({v:?})"),
            PullCond::Object(_) => f.write_str("Object(..)"),
            PullCond::Wrapped(_) => f.write_str("Wrapped(..)"),
        }
    }
}

impl UpdateSpec {
    /// Parses an update document. A first field starting with `$` makes it operator style;
    /// anything else (including `{}`) is a replacement.
    pub fn parse(u: &Document) -> Result<UpdateSpec> {
        Self::parse_with_filters(u, &[])
    }

    /// [`UpdateSpec::parse`] with the statement's `arrayFilters`, checked against the paths that
    /// use them (each identifier used has one filter, each filter is used).
    pub fn parse_with_filters(u: &Document, array_filters: &[Document]) -> Result<UpdateSpec> {
        match u.keys().next() {
            Some(k) if k.starts_with('$') => {
                let ops = parse::operators(u)?;
                let filters = ArrayFilters::parse(array_filters, &ops)?;
                Ok(UpdateSpec::Operators(ops, filters))
            }
            _ => {
                if !array_filters.is_empty() {
                    return Err(QueryError::failed_to_parse(
                        "arrayFilters may not be specified for replacement-style updates",
                    ));
                }
                if let Some(k) = u.keys().find(|k| k.starts_with('$')) {
                    return Err(QueryError::new(
                        ErrorCode::DollarPrefixedFieldName,
                        format!("The dollar ($) prefixed field '{k}' in '{k}' is not valid for storage."),
                    ));
                }
                Ok(UpdateSpec::Replacement(u.clone()))
            }
        }
    }

    /// Parses the `u` of an update statement, which may also be an aggregation pipeline.
    pub fn parse_value(u: &Bson) -> Result<UpdateSpec> {
        match u {
            Bson::Document(d) => Self::parse(d),
            Bson::Array(stages) => Self::parse_pipeline(stages),
            other => Err(QueryError::failed_to_parse(format!(
                "Update argument must be either an object or an array, not {}",
                crate::display::type_name(other)
            ))),
        }
    }

    /// An update given as an aggregation pipeline.
    pub fn parse_pipeline(stages: &[Bson]) -> Result<UpdateSpec> {
        let pipeline = crate::aggregate::Pipeline::parse(stages)?;
        if let Some(other) = pipeline.stage_names().into_iter().find(|n| !PIPELINE_UPDATE_STAGES.contains(n)) {
            return Err(QueryError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "{other} is not allowed to be used within an update (Shoal's update pipelines take {})",
                    PIPELINE_UPDATE_STAGES.join(", ")
                ),
            ));
        }
        Ok(UpdateSpec::Pipeline(pipeline))
    }

    /// The update with the command's `let` variables visible to a pipeline update (operator
    /// and replacement updates have no expressions that could see them).
    pub fn with_vars(self, vars: &crate::vars::LetVars) -> UpdateSpec {
        match self {
            UpdateSpec::Pipeline(p) => UpdateSpec::Pipeline(p.with_vars(vars)),
            other => other,
        }
    }

    pub fn is_replacement(&self) -> bool {
        matches!(self, UpdateSpec::Replacement(_))
    }

    /// The dotted paths an operator update writes (both sides of a `$rename`); callers use them
    /// to tell whether indexed or shard-key fields may change. Empty for a replacement.
    pub fn modified_paths(&self) -> Vec<&str> {
        match self {
            UpdateSpec::Operators(ops, _) => ops.iter().map(FieldUpdate::path).collect(),
            UpdateSpec::Replacement(_) | UpdateSpec::Pipeline(_) => Vec::new(),
        }
    }

    /// Applies the update to `doc`. Returns whether the document changed; on error `doc` is left
    /// as it was.
    pub fn apply(&self, doc: &mut Document, ctx: &UpdateContext) -> Result<bool> {
        self.apply_matched(doc, ctx, None)
    }

    /// [`UpdateSpec::apply`] to a document `query` matched, which the positional `$` refers to.
    pub fn apply_matched(&self, doc: &mut Document, ctx: &UpdateContext, query: Option<&Filter>) -> Result<bool> {
        match self {
            UpdateSpec::Operators(ops, filters) => {
                let mut work = doc.clone();
                let changed = apply::apply_all(ops, filters, query, &mut work, ctx)?;
                if changed {
                    *doc = work;
                }
                Ok(changed)
            }
            UpdateSpec::Replacement(replacement) => {
                let new = replace(doc, replacement)?;
                let changed = !apply::identical_docs(doc, &new);
                if changed {
                    *doc = new;
                }
                Ok(changed)
            }
            UpdateSpec::Pipeline(pipeline) => {
                let new = run_pipeline(pipeline, doc)?;
                let changed = !apply::identical_docs(doc, &new);
                if changed {
                    *doc = new;
                }
                Ok(changed)
            }
        }
    }
}

/// `doc` through an update pipeline: one document out, with the same `_id`, first.
fn run_pipeline(pipeline: &crate::aggregate::Pipeline, doc: &Document) -> Result<Document> {
    let mut out = pipeline.run(std::iter::once(doc.clone()))?;
    let Some(mut new) = out.pop() else {
        return Err(QueryError::new(ErrorCode::InternalError, "an update pipeline produced no document"));
    };
    match (doc.get("_id"), new.get("_id")) {
        (Some(before), Some(after)) if !crate::order::values_equal(before, after) => {
            return Err(QueryError::new(
                ErrorCode::ImmutableField,
                "Performing an update on the path '_id' would modify the immutable field '_id'",
            ));
        }
        (Some(before), None) => {
            new.insert("_id", before.clone());
        }
        _ => {}
    }
    apply::check_id_value(&new)?;
    apply::move_id_first(&mut new);
    Ok(new)
}

/// Builds the document an upsert inserts: the equality fields of the query (dotted paths
/// allowed) seed it, then the update applies as an insert. A replacement keeps only the seed's
/// `_id`. If neither provides an `_id`, the result has none and the caller must generate one.
pub fn upsert_document(query_equalities: &Document, spec: &UpdateSpec, ctx: &UpdateContext) -> Result<Document> {
    let mut seed = Document::new();
    for (path, value) in query_equalities {
        apply::set_seed(&mut seed, path, value)?;
    }
    let insert_ctx = UpdateContext { is_upsert_insert: true, ..*ctx };
    let mut doc = match spec {
        UpdateSpec::Operators(ops, filters) => {
            apply::apply_all(ops, filters, None, &mut seed, &insert_ctx)?;
            seed
        }
        UpdateSpec::Replacement(replacement) => {
            let mut id_only = Document::new();
            if let Some(id) = seed.get("_id") {
                id_only.insert("_id", id.clone());
            }
            replace(&id_only, replacement)?
        }
        UpdateSpec::Pipeline(pipeline) => run_pipeline(pipeline, &seed)?,
    };
    apply::check_id_value(&doc)?;
    apply::move_id_first(&mut doc);
    Ok(doc)
}

/// The document a replacement produces from `old`: the replacement, with `old`'s `_id` first.
fn replace(old: &Document, replacement: &Document) -> Result<Document> {
    let mut new = Document::new();
    match (old.get("_id"), replacement.get("_id")) {
        (Some(old_id), Some(new_id)) => {
            if !crate::order::values_equal(old_id, new_id) {
                return Err(QueryError::new(
                    ErrorCode::ImmutableField,
                    format!(
                        "After applying the update, the (immutable) field '_id' was found to have \
                         been altered to {}",
                        crate::display::element("_id", new_id)
                    ),
                ));
            }
            new.insert("_id", new_id.clone());
        }
        (Some(old_id), None) => {
            new.insert("_id", old_id.clone());
        }
        (None, Some(new_id)) => {
            new.insert("_id", new_id.clone());
        }
        (None, None) => {}
    }
    for (k, v) in replacement {
        if k != "_id" {
            new.insert(k.clone(), v.clone());
        }
    }
    apply::check_id_value(&new)?;
    Ok(new)
}

#[cfg(test)]
mod tests;
