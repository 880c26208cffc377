//! Splitting a pipeline for a collection on several shards: the part each shard runs over its own
//! documents, and the part the router runs over the shards' merged output.
//!
//! ```text
//!   [$match $project … ]  [first blocking stage]              [rest]
//!   ($redact included)
//!    per-document prefix   $group    -> shard: partial group   router: merge group, rest
//!    (all on the shards)   $sort     -> shard: $sort (+limit)  router: merge-sort, rest
//!                          $limit    -> shard: $limit          router: $limit, rest
//!                          $skip+$limit -> shard: $limit s+l   router: $skip, $limit, rest
//!                          $count / $sortByCount / $bucket: their `$group` desugaring, as above
//!                          anything else ($sample $facet $skip $lookup $unionWith $graphLookup
//!                          $setWindowFields $bucketAuto $densify $fill …) -> router: from there on
//! ```
//!
//! Invariants: the shard part followed by the router part gives what the whole pipeline gives on
//! the union of the shards' documents (up to the order MongoDB leaves unspecified); the input was
//! already validated by [`super::Pipeline::parse`], so splitting never meets a malformed stage
//! it has to report (it leaves what it does not understand to the router). Pure: no I/O.

use bson::{Bson, Document, doc};

use super::composite;
use crate::error::Result;

/// The shard half of a split `$group`: documents in, partial accumulator states out.
pub const PARTIAL_GROUP: &str = "$_shoalPartialGroup";
/// The router half of a split `$group`: partial states in, final values out.
pub const MERGE_GROUP: &str = "$_shoalMergeGroup";

/// Stages that transform or drop each document alone, so they may run on the shards.
const PER_DOCUMENT_STAGES: &[&str] =
    &["$match", "$project", "$addFields", "$set", "$unset", "$unwind", "$replaceRoot", "$replaceWith", "$redact"];

#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// What every shard runs.
    pub shard: Vec<Bson>,
    /// When set, each shard's output is sorted by this spec and the router merges the streams in
    /// this order (instead of concatenating them) before running [`Split::router`].
    pub merge_sort: Option<Document>,
    /// What the router runs over the merged shard output (possibly nothing).
    pub router: Vec<Bson>,
}

fn stage_name(stage: &Bson) -> Option<&str> {
    match stage {
        Bson::Document(d) if d.len() == 1 => d.keys().next().map(String::as_str),
        _ => None,
    }
}

fn stage_arg(stage: &Bson) -> Option<&Bson> {
    match stage {
        Bson::Document(d) => d.values().next(),
        _ => None,
    }
}

fn non_negative(v: Option<&Bson>) -> Option<u64> {
    match v? {
        Bson::Int32(n) => u64::try_from(*n).ok(),
        Bson::Int64(n) => u64::try_from(*n).ok(),
        Bson::Double(f) if *f >= 0.0 && f.fract() == 0.0 && *f < 9.2e18 => Some(*f as u64),
        _ => None,
    }
}

/// `$count`, `$sortByCount` and `$bucket` as the `$group` (and what follows it) they mean, so the
/// group can be split; `None` for any other stage.
fn desugar(stage: &Bson) -> Result<Option<Vec<Bson>>> {
    let (Some(name), Some(arg)) = (stage_name(stage), stage_arg(stage)) else { return Ok(None) };
    Ok(match name {
        // `_id` as the count's name would collide with the group key: leave it whole.
        "$count" => match arg {
            Bson::String(field) if field != "_id" => Some(vec![
                Bson::Document(doc! { "$group": { "_id": Bson::Null, field.as_str(): { "$sum": 1 } } }),
                Bson::Document(doc! { "$project": { "_id": 0, field.as_str(): 1 } }),
            ]),
            _ => None,
        },
        "$sortByCount" => Some(vec![
            Bson::Document(doc! { "$group": { "_id": arg.clone(), "count": { "$sum": 1 } } }),
            Bson::Document(doc! { "$sort": { "count": -1 } }),
        ]),
        "$bucket" => {
            let (group, sort) = composite::bucket_as_group(arg)?;
            Some(vec![Bson::Document(doc! { "$group": group }), Bson::Document(doc! { "$sort": sort })])
        }
        _ => None,
    })
}

/// Splits `stages` (already validated) into the shards' part and the router's.
pub fn split(stages: &[Bson]) -> Result<Split> {
    let at = stages
        .iter()
        .position(|s| !stage_name(s).is_some_and(|n| PER_DOCUMENT_STAGES.contains(&n)))
        .unwrap_or(stages.len());
    let mut shard: Vec<Bson> = stages[..at].to_vec();
    let mut rest: Vec<Bson> = stages[at..].to_vec();
    if let Some(expanded) = rest.first().map(desugar).transpose()?.flatten() {
        rest.splice(0..1, expanded);
    }
    let Some(first) = rest.first() else {
        return Ok(Split { shard, merge_sort: None, router: Vec::new() });
    };
    let next = |i: usize| rest.get(i).and_then(stage_name);
    let mut merge_sort = None;
    let router: Vec<Bson> = match stage_name(first) {
        Some("$group") => {
            let arg = stage_arg(first).cloned().unwrap_or(Bson::Null);
            shard.push(Bson::Document(doc! { PARTIAL_GROUP: arg.clone() }));
            std::iter::once(Bson::Document(doc! { MERGE_GROUP: arg })).chain(rest[1..].iter().cloned()).collect()
        }
        Some("$sort") => {
            shard.push(first.clone());
            merge_sort = match stage_arg(first) {
                Some(Bson::Document(spec)) => Some(spec.clone()),
                _ => None,
            };
            // A top-k on each shard is enough for the router's top-k of the merge.
            if let Some(keep) = top_k(&rest[1..]) {
                shard.push(Bson::Document(doc! { "$limit": keep }));
            }
            rest[1..].to_vec()
        }
        Some("$limit") => {
            shard.push(first.clone());
            rest
        }
        Some("$skip") if next(1) == Some("$limit") => {
            if let Some(keep) = top_k(&rest) {
                shard.push(Bson::Document(doc! { "$limit": keep }));
            }
            rest
        }
        _ => rest,
    };
    Ok(Split { shard, merge_sort, router })
}

/// How many documents of a stream the stages' leading `$limit` (or `$skip` then `$limit`) can
/// need, as an `i64` for a `$limit` stage.
fn top_k(stages: &[Bson]) -> Option<i64> {
    let n = |i: usize, name: &str| {
        stages.get(i).filter(|s| stage_name(s) == Some(name)).and_then(|s| non_negative(stage_arg(s)))
    };
    let keep = match (n(0, "$limit"), n(0, "$skip"), n(1, "$limit")) {
        (Some(l), _, _) => l,
        (None, Some(s), Some(l)) => s.saturating_add(l),
        _ => return None,
    };
    Some(i64::try_from(keep).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
