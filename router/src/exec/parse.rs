//! Parse, the first step of a read: what the path to shards needs from a read command. The
//! command's bytes stay as they arrived; the body is decoded only when a sharded placement needs
//! its filter ([`Read::filter`]) or several shards answer and the router must combine them
//! ([`Read::plan`]: what each shard runs and how the router merges), so a read served by one
//! shard is forwarded without being decoded or copied.
//!
//! Must not: choose shards, call them, or shape replies.

use bson::{Bson, Document, RawBsonRef};
use shoal_query::aggregate::{Pipeline, split};
use shoal_query::collation::Collation;
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::pipeline::ROUTER_STAGES;
use crate::routing::read_pref::ReadPreference;

/// Default first batch size, as MongoDB's.
const FIRST_BATCH_DEFAULT: usize = 101;

/// The read commands routed by filter.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReadKind {
    Find,
    Aggregate,
    Count,
    Distinct,
    /// Routed like a read (by its query) but a write: it creates a missing database, honours no
    /// read preference and runs on primaries.
    FindAndModify,
}

/// A parsed read on `cmd.db`.`coll`.
pub struct Read<'a> {
    pub cmd: &'a Command,
    pub coll: &'a str,
    pub kind: ReadKind,
    /// `db.coll`, as cursor replies name it.
    pub ns: String,
}

/// The read `kind` of `cmd` on `coll`. A bad `$readPreference` fails the command wherever the
/// data is (even nowhere), so it is checked here, before any routing.
pub fn read<'a>(cmd: &'a Command, coll: &'a str, kind: ReadKind) -> Result<Read<'a>, CommandError> {
    if kind != ReadKind::FindAndModify {
        ReadPreference::from_body(&cmd.body)?;
    }
    Ok(Read { cmd, coll, kind, ns: format!("{}.{coll}", cmd.db) })
}

/// What each shard runs of a read that several shards answer, and how the router combines it.
pub enum Plan {
    /// `find`: each shard's cursor, merged as the client asks.
    Find { body: Document, merge: Merge },
    /// `count`: the shards' counts summed, then the client's skip and limit applied.
    Count { body: Document, skip: i64, limit: i64 },
    /// `distinct`: the shards' values unioned under the command's collation.
    Distinct { body: Document, collation: Collation },
    /// `aggregate` with nothing but a skip or limit left for the router: streamed like a `find`.
    AggregateStreamed { body: Document, merge: Merge },
    /// `aggregate` with a router part: the shards' output gathered whole, then the rest run here.
    AggregateGathered { body: Document, rest: RouterPart },
    /// `findAndModify` whose query pins no shard: the write without shard key.
    FindAndModify,
}

/// How a merge cursor combines the shards' streams and hands out the result.
pub struct Merge {
    pub sort: SortSpec,
    /// Applied after the merge when it could drop sort fields.
    pub projection: Option<Projection>,
    pub skip: usize,
    pub limit: Option<usize>,
    /// The client's first batch size (0: an empty first batch).
    pub batch: usize,
    pub single_batch: bool,
}

/// The part of a split pipeline the router runs over the shards' merged output.
pub struct RouterPart {
    /// The order the shards' streams are merged in (empty: concatenated).
    pub sort: SortSpec,
    pub stages: Vec<Bson>,
    pub allow_disk_use: bool,
    pub lets: Option<Document>,
    /// The client's first batch size.
    pub batch: usize,
}

impl Read<'_> {
    /// Whether the read may create the database (a write does).
    pub fn creates(&self) -> bool {
        self.kind == ReadKind::FindAndModify
    }

    fn body(&self) -> Result<Document, CommandError> {
        Ok(Document::try_from(self.cmd.body.as_ref())?)
    }

    /// The filter the read targets shards by. Shard key ranges order strings in binary: under
    /// another collation an equality or range on a string key may match documents in any chunk,
    /// so the filter is then empty (every shard).
    pub fn filter(&self) -> Result<Document, CommandError> {
        let body = self.body()?;
        if !Collation::from_command(&body, &self.cmd.name)?.is_simple() {
            return Ok(Document::new());
        }
        let field = match self.kind {
            ReadKind::Find => "filter",
            ReadKind::Count | ReadKind::Distinct | ReadKind::FindAndModify => "query",
            ReadKind::Aggregate => {
                return Ok(match body.get_array("pipeline").ok().and_then(|p| p.first()) {
                    Some(Bson::Document(d)) => d.get_document("$match").cloned().unwrap_or_default(),
                    _ => Document::new(),
                });
            }
        };
        Ok(body.get_document(field).cloned().unwrap_or_default())
    }

    /// Whether an `aggregate` has a top-level stage only the router runs (`$lookup`, `$out`,
    /// `$merge` touch other collections), read from the raw body.
    pub fn has_router_stage(&self) -> bool {
        let Ok(Some(RawBsonRef::Array(stages))) = self.cmd.body.get("pipeline") else { return false };
        stages.into_iter().any(|s| {
            matches!(s, Ok(RawBsonRef::Document(d)) if ROUTER_STAGES.iter().any(|n| d.get(n).ok().flatten().is_some()))
        })
    }

    /// The plan for several shards (decodes the body).
    pub fn plan(&self) -> Result<Plan, CommandError> {
        match self.kind {
            ReadKind::Find => find(self.body()?),
            ReadKind::Aggregate => aggregate(self.body()?),
            ReadKind::Count => {
                let mut body = self.body()?;
                // Checked as the shards check them, before they are rewritten for several.
                let skip = shoal_query::args::non_negative(&body, "count", "skip")?.unwrap_or(0);
                let limit = shoal_query::args::count_limit(&body)?.map_or(0, |l| i64::try_from(l).unwrap_or(i64::MAX));
                // Each shard counts up to skip + limit; the skip applies to the sum.
                body.remove("skip");
                if limit > 0 {
                    body.insert("limit", limit.saturating_add(skip));
                }
                Ok(Plan::Count { body, skip, limit })
            }
            ReadKind::Distinct => {
                let body = self.body()?;
                let collation = Collation::from_command(&body, "distinct")?;
                Ok(Plan::Distinct { body, collation })
            }
            ReadKind::FindAndModify => Ok(Plan::FindAndModify),
        }
    }
}

/// `find` on several shards: each sends `limit + skip` (no skip, no batch size), the merge
/// applies skip and limit.
fn find(mut body: Document) -> Result<Plan, CommandError> {
    // Checked as the shards check them, before they are rewritten for several.
    for field in ["skip", "limit", "batchSize"] {
        shoal_query::args::non_negative(&body, "FindCommandRequest", field)?;
    }
    let single_batch = shoal_query::args::flag(&body, "FindCommandRequest", "singleBatch")?.unwrap_or(false);
    let sort = match body.get("sort") {
        Some(Bson::Document(s)) => SortSpec::parse(s)?,
        _ => SortSpec::parse(&Document::new())?,
    }
    .with_collation(Collation::from_command(&body, "find")?);
    let skip = usize::try_from(number(body.get("skip"))).unwrap_or(0);
    // Both are non-negative (checked above).
    let limit = usize::try_from(number(body.get("limit"))).ok().filter(|l| *l > 0);
    let batch = match number(body.get("batchSize")) {
        n if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        _ if body.contains_key("batchSize") => 0,
        _ => FIRST_BATCH_DEFAULT,
    };
    body.remove("skip");
    body.remove("batchSize");
    body.remove("singleBatch");
    if let Some(l) = limit {
        body.insert("limit", i64::try_from(l.saturating_add(skip)).unwrap_or(i64::MAX));
    }
    // The projection may drop sort fields: apply it after the merge.
    let projection = match (sort.is_empty(), body.get("projection")) {
        (false, Some(Bson::Document(p))) if !p.is_empty() => {
            let p = Projection::parse(p)?;
            body.remove("projection");
            Some(p)
        }
        _ => None,
    };
    Ok(Plan::Find { body, merge: Merge { sort, projection, skip, limit, batch, single_batch } })
}

/// `aggregate` on several shards, split by `shoal_query::aggregate::split`: the shards run the
/// per-document prefix and the first blocking stage's shard half; the router streams what is
/// left when it is only a skip or limit, else gathers and runs it.
fn aggregate(mut body: Document) -> Result<Plan, CommandError> {
    let stages = match body.get("pipeline") {
        Some(Bson::Array(a)) => a.clone(),
        _ => return Err(CommandError::type_mismatch("'pipeline' option must be specified as an array")),
    };
    shoal_query::aggregate::cursor_option(&body)?;
    let allow_disk_use = shoal_query::args::flag(&body, "aggregate", "allowDiskUse")?.unwrap_or(false);
    let lets = body.get_document("let").ok().cloned();
    // Validates the whole pipeline before any shard sees a piece of it.
    Pipeline::parse(&stages)?.with_let(lets.as_ref())?;
    let split = split::split(&stages)?;
    let batch = match body.get_document("cursor").ok().map(|c| number(c.get("batchSize"))) {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(_) if body.get_document("cursor").is_ok_and(|c| c.contains_key("batchSize")) => 0,
        _ => FIRST_BATCH_DEFAULT,
    };
    body.insert("pipeline", split.shard.clone());
    body.insert("cursor", bson::doc! {});
    let sort = SortSpec::parse(split.merge_sort.as_ref().unwrap_or(&Document::new()))?;
    if let Some((skip, limit)) = skip_limit_only(&split.router) {
        let merge = Merge { sort, projection: None, skip, limit, batch, single_batch: false };
        return Ok(Plan::AggregateStreamed { body, merge });
    }
    Ok(Plan::AggregateGathered { body, rest: RouterPart { sort, stages: split.router, allow_disk_use, lets, batch } })
}

/// A number as clients and shards send it (int32, int64 or double, truncated); 0 otherwise.
pub fn number(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) => *d as i64,
        _ => 0,
    }
}

/// `Some((skip, limit))` when `stages` are at most a `$skip` and a `$limit` (either order
/// collapses to one skip and one limit), which a merge cursor applies while streaming.
fn skip_limit_only(stages: &[Bson]) -> Option<(usize, Option<usize>)> {
    let mut skip = 0usize;
    let mut limit: Option<usize> = None;
    for stage in stages {
        let Bson::Document(d) = stage else { return None };
        let (Some((name, v)), 1) = (d.iter().next(), d.len()) else { return None };
        let n = usize::try_from(number(Some(v))).ok()?;
        match name.as_str() {
            // A skip after a limit eats into it.
            "$skip" => {
                skip = skip.saturating_add(n);
                limit = limit.map(|l| l.saturating_sub(n));
            }
            "$limit" => limit = Some(limit.map_or(n, |l| l.min(n))),
            _ => return None,
        }
    }
    Some((skip, limit))
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use super::*;

    fn stages(v: Bson) -> Vec<Bson> {
        match v {
            Bson::Array(a) => a,
            _ => Vec::new(),
        }
    }

    #[test]
    fn skip_and_limit_collapse_for_the_merge_cursor() {
        assert_eq!(skip_limit_only(&[]), Some((0, None)));
        assert_eq!(skip_limit_only(&stages(bson!([{"$skip": 2}, {"$limit": 3}]))), Some((2, Some(3))));
        // A skip after a limit eats into it.
        assert_eq!(skip_limit_only(&stages(bson!([{"$limit": 5}, {"$skip": 2}]))), Some((2, Some(3))));
        assert_eq!(skip_limit_only(&stages(bson!([{"$limit": 5}, {"$limit": 2.0}]))), Some((0, Some(2))));
        assert_eq!(skip_limit_only(&stages(bson!([{"$limit": 5}, {"$match": {}}]))), None);
        assert_eq!(skip_limit_only(&stages(bson!([{"$skip": -1}]))), None);
    }
}
