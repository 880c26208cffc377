//! Aggregation pipelines: parsing the stages once, then streaming documents through them.
//!
//! ```text
//!   storage --(leading $match pushed down)--> input docs
//!      -> $match -> $project/$addFields/$unset -> $unwind -> $skip/$limit    (streaming)
//!      -> $sort / $group / $count                              (blocking, memory-bounded)
//!      -> output docs
//! ```
//!
//! Owns: the stage list ([`Pipeline`]), the expression language (`expr`, `operators`),
//! `$group` with its accumulators (`group`) and the simpler stages (`stages`); each other stage
//! has its own module (`window` for `$setWindowFields`, `bucket_auto`, `redact`, `densify`,
//! `fill`), and the stages that read other collections have their pure halves here
//! (`lookup`, `union_with`, `graph_lookup`) while the router runs them.
//!
//! Invariants:
//! - Parsing validates everything that does not depend on documents; `run` only fails on
//!   per-document errors (type errors in expressions) and on the memory bound.
//! - Stages stream: a `$limit` stops pulling from the input. `$sort`, `$group` and `$count` hold
//!   their input, and they refuse to hold more than the memory limit (an estimate of BSON bytes;
//!   292) unless disk use is allowed. Shoal has no external sort yet, so `allow_disk_use` raises
//!   the limit by [`ALLOW_DISK_USE_MEMORY_FACTOR`] and fails past that (146), never truncating.
//! - `$sort` directly followed by `$limit` (or `$skip` then `$limit`) keeps only the top k.

mod bucket_auto;
mod composite;
mod convert;
mod densify;
pub(crate) mod expr;
mod fill;
pub mod graph_lookup;
mod group;
pub mod lookup;
pub(crate) mod operators;
mod ops;
pub mod output;
mod redact;
mod scoped;
pub mod split;
mod stages;
pub mod union_with;
mod window;
pub(crate) mod zone;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::projection::Projection;
use crate::sort::{SortSpec, sort_documents};

use group::{Group, GroupMode};
use stages::Unwind;

/// What `$sort` and `$group` may hold without `allowDiskUse`, as in MongoDB (100 MiB).
pub const BLOCKING_STAGE_MEMORY_BYTES_MAX: usize = 100 * 1024 * 1024;

/// With `allowDiskUse`, how many times the memory limit a stage may hold: Shoal does not spill
/// to disk yet, so past this a stage fails clearly (146) instead of growing without bound.
pub const ALLOW_DISK_USE_MEMORY_FACTOR: usize = 10;

/// What a blocking stage may hold, and which error passing it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    max_bytes: usize,
    disk_use: bool,
}

impl Budget {
    /// Fails once `bytes` held by `stage` pass the budget.
    pub(crate) fn check(&self, bytes: usize, stage: &str) -> Result<()> {
        if bytes <= self.max_bytes {
            return Ok(());
        }
        if self.disk_use {
            return Err(QueryError::new(
                ErrorCode::ExceededMemoryLimit,
                format!(
                    "{stage} exceeded {} bytes with allowDiskUse:true; Shoal does not spill to disk yet",
                    self.max_bytes
                ),
            ));
        }
        let message = if stage == "$sort" {
            format!(
                "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting. Pass \
                 allowDiskUse:true to opt in.",
                self.max_bytes
            )
        } else {
            format!(
                "Exceeded memory limit for {stage}, but didn't allow external sort. Pass allowDiskUse:true to opt in."
            )
        };
        Err(QueryError::new(ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed, message))
    }
}

/// Environment variable that overrides [`BLOCKING_STAGE_MEMORY_BYTES_MAX`] for a whole process
/// (router or shard), read once: lets tests reach the bound with little data.
pub const MEMORY_LIMIT_ENV: &str = "SHOAL_AGGREGATE_MEMORY_LIMIT_BYTES";

/// The per-stage memory bound in force: [`MEMORY_LIMIT_ENV`] if set to a number, else
/// [`BLOCKING_STAGE_MEMORY_BYTES_MAX`].
pub fn memory_limit_bytes() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(MEMORY_LIMIT_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(BLOCKING_STAGE_MEMORY_BYTES_MAX)
    })
}

pub struct Pipeline {
    stages: Vec<Stage>,
    allow_disk_use: bool,
    memory_limit_bytes: usize,
    /// The command's `let` variables, evaluated once; every stage's expressions see them.
    vars: Vec<(String, Bson)>,
}

enum Stage {
    Match {
        spec: Document,
        filter: Filter,
    },
    /// `$project`, `$addFields`/`$set` or `$unset`, under the name the user wrote.
    Reshape {
        name: &'static str,
        projection: Projection,
    },
    Sort(SortSpec),
    Limit(u64),
    Skip(u64),
    Count(String),
    Unwind(Unwind),
    Group(Group),
    /// `$replaceRoot: {newRoot}` / `$replaceWith`: the document becomes the expression's value.
    ReplaceRoot {
        name: &'static str,
        new_root: expr::Expr,
    },
    Facet(Vec<(String, Pipeline)>),
    Sample(u64),
    /// Parsed to validate it; the router runs it (it reads another collection).
    Lookup(lookup::Lookup),
    /// `$out` / `$merge`, parsed to validate; the router performs the writes.
    Output(output::Output),
    Window(window::SetWindowFields),
    BucketAuto(bucket_auto::BucketAuto),
    Redact(redact::Redact),
    Densify(densify::Densify),
    /// `$documents`: these documents replace the input (it is only valid first).
    Documents(Vec<Document>),
    /// Parsed to validate; the router runs it (it reads another collection).
    UnionWith(union_with::UnionWith),
    /// Parsed to validate; the router runs it (it reads another collection).
    GraphLookup(graph_lookup::GraphLookup),
}

impl Stage {
    fn name(&self) -> &'static str {
        match self {
            Stage::Match { .. } => "$match",
            Stage::Reshape { name, .. } => name,
            Stage::Sort(_) => "$sort",
            Stage::Limit(_) => "$limit",
            Stage::Skip(_) => "$skip",
            Stage::Count(_) => "$count",
            Stage::Unwind(_) => "$unwind",
            Stage::Group(_) => "$group",
            Stage::ReplaceRoot { name, .. } => name,
            Stage::Facet(_) => "$facet",
            Stage::Sample(_) => "$sample",
            Stage::Lookup(_) => "$lookup",
            Stage::Output(output::Output::Out { .. }) => "$out",
            Stage::Output(output::Output::Merge(_)) => "$merge",
            Stage::Window(_) => "$setWindowFields",
            Stage::BucketAuto(_) => "$bucketAuto",
            Stage::Redact(_) => "$redact",
            Stage::Densify(_) => "$densify",
            Stage::Documents(_) => "$documents",
            Stage::UnionWith(_) => "$unionWith",
            Stage::GraphLookup(_) => "$graphLookup",
        }
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.stages.iter().map(Stage::name)).finish()
    }
}

type DocStream<'a> = Box<dyn Iterator<Item = Result<Document>> + 'a>;

impl Pipeline {
    pub fn parse(stages: &[Bson]) -> Result<Pipeline> {
        let stages: Vec<Stage> =
            stages.iter().map(parse_stage).collect::<Result<Vec<_>>>()?.into_iter().flatten().collect();
        if let Some(early) = stages.iter().rev().skip(1).find(|s| matches!(s, Stage::Output(_))) {
            return Err(QueryError::new(
                ErrorCode::Location40601,
                format!("{} can only be the final stage in the pipeline", early.name()),
            ));
        }
        if stages.iter().skip(1).any(|s| matches!(s, Stage::Documents(_))) {
            return Err(QueryError::new(
                ErrorCode::Location40602,
                "$documents is only valid as the first stage in a pipeline",
            ));
        }
        Ok(Pipeline { stages, allow_disk_use: false, memory_limit_bytes: memory_limit_bytes(), vars: Vec::new() })
    }

    /// The command's `let`: each value is an expression evaluated once (it sees no document), and
    /// every stage (`$facet` sub-pipelines included) sees the results as `$$name`.
    pub fn with_let(self, lets: Option<&Document>) -> Result<Pipeline> {
        let vars = crate::vars::LetVars::parse(lets)?;
        Ok(self.with_vars(&vars))
    }

    /// [`Pipeline::with_let`] with variables already evaluated (a command's `let` shared by its
    /// filter and its pipeline, as for pipeline updates).
    pub fn with_vars(mut self, vars: &crate::vars::LetVars) -> Pipeline {
        if !vars.is_empty() {
            self.set_vars(vars);
        }
        self
    }

    fn set_vars(&mut self, vars: &crate::vars::LetVars) {
        for stage in &mut self.stages {
            match stage {
                Stage::Facet(facets) => facets.iter_mut().for_each(|(_, p)| p.set_vars(vars)),
                Stage::Match { filter, .. } => *filter = std::mem::replace(filter, Filter::match_all()).with_vars(vars),
                _ => {}
            }
        }
        self.vars = vars.as_slice().to_vec();
    }

    /// `allowDiskUse: true`: raises the memory bound of blocking stages by
    /// [`ALLOW_DISK_USE_MEMORY_FACTOR`] (no spilling yet).
    pub fn with_allow_disk_use(mut self, allow: bool) -> Pipeline {
        self.allow_disk_use = allow;
        self
    }

    /// Overrides [`BLOCKING_STAGE_MEMORY_BYTES_MAX`] (tests, per-deployment settings).
    pub fn with_memory_limit_bytes(mut self, bytes: usize) -> Pipeline {
        self.memory_limit_bytes = bytes;
        self
    }

    pub fn len(&self) -> usize {
        self.stages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stage names in order, e.g. for `explain` and logs.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(Stage::name).collect()
    }

    /// The filter of a first `$match` stage, which a caller may evaluate in storage (with
    /// indexes) and then call [`Pipeline::run_after_leading_match`].
    pub fn leading_match(&self) -> Option<&Document> {
        match self.stages.first() {
            Some(Stage::Match { spec, .. }) => Some(spec),
            _ => None,
        }
    }

    /// The `$sort` that comes first or right after the leading `$match`, as a sort document, and
    /// the position of the stage after it: a shard whose access path yields that order skips it.
    pub fn leading_sort(&self) -> Option<(Document, usize)> {
        let at = usize::from(self.leading_match().is_some());
        match self.stages.get(at) {
            Some(Stage::Sort(spec)) => {
                let doc = spec
                    .keys()
                    .iter()
                    .map(|k| (k.path.clone(), Bson::Int32(if k.descending { -1 } else { 1 })))
                    .collect();
                Some((doc, at + 1))
            }
            _ => None,
        }
    }

    /// Lazily runs the stages from position `start` on, for input that already passed the ones
    /// before (see [`Pipeline::leading_sort`]).
    pub fn stream_from_stage<'a>(
        &'a self,
        start: usize,
        input: impl Iterator<Item = Document> + 'a,
    ) -> impl Iterator<Item = Result<Document>> + 'a {
        self.stream_from(start, Box::new(input.map(Ok)))
    }

    /// Runs every stage over `input`.
    pub fn run(&self, input: impl Iterator<Item = Document>) -> Result<Vec<Document>> {
        self.stream(input).collect()
    }

    /// Runs the stages after the leading `$match`, for input that already satisfies it.
    pub fn run_after_leading_match(&self, input: impl Iterator<Item = Document>) -> Result<Vec<Document>> {
        let start = usize::from(self.leading_match().is_some());
        self.stream_from(start, Box::new(input.map(Ok))).collect()
    }

    /// Lazily runs every stage; cursors pull batches from this. The first error ends the stream.
    pub fn stream<'a>(
        &'a self,
        input: impl Iterator<Item = Document> + 'a,
    ) -> impl Iterator<Item = Result<Document>> + 'a {
        self.stream_from(0, Box::new(input.map(Ok)))
    }

    fn stream_from<'a>(&'a self, start: usize, input: DocStream<'a>) -> DocStream<'a> {
        let mut s = input;
        for i in start..self.stages.len() {
            s = match &self.stages[i] {
                // `$expr` errors fail the pipeline rather than drop the document.
                Stage::Match { filter, .. } => Box::new(s.filter_map(move |r| match r {
                    Ok(d) => match filter.try_matches(&d) {
                        Ok(true) => Some(Ok(d)),
                        Ok(false) => None,
                        Err(e) => Some(Err(e)),
                    },
                    Err(e) => Some(Err(e)),
                })),
                Stage::Reshape { projection, .. } => Box::new(
                    s.map(move |r| r.and_then(|d| projection.apply_in(&d, Some(&expr::Scope::Many(&self.vars))))),
                ),
                Stage::ReplaceRoot { name, new_root } => Box::new(s.map(move |r| {
                    r.and_then(|d| match new_root.eval_in(&d, Some(&expr::Scope::Many(&self.vars)))? {
                        Some(Bson::Document(root)) => Ok(root),
                        other => Err(QueryError::new(
                            ErrorCode::Location40228,
                            format!(
                                "'newRoot' expression must evaluate to an object, but resulting value was: {}. Type \
                                 of resulting value: '{}'. Input document: {} ({name})",
                                other.as_ref().map_or("MISSING".to_owned(), |v| v.to_string()),
                                other.as_ref().map_or("missing", crate::display::type_name),
                                crate::display::document(&d)
                            ),
                        )),
                    })
                })),
                Stage::Limit(n) => Box::new(s.take(usize::try_from(*n).unwrap_or(usize::MAX))),
                Stage::Skip(n) => {
                    let mut left = *n;
                    // Errors pass through: skipping must not swallow them.
                    Box::new(s.filter(move |r| {
                        if r.is_err() || left == 0 {
                            return true;
                        }
                        left -= 1;
                        false
                    }))
                }
                Stage::Unwind(u) => Box::new(s.flat_map(move |r| match r {
                    Ok(d) => u.apply(d).into_iter().map(Ok).collect::<Vec<_>>(),
                    Err(e) => vec![Err(e)],
                })),
                Stage::Sort(spec) => {
                    let keep = self.top_k_after(i);
                    blocking(s, move |up| self.sort(spec, up, keep))
                }
                Stage::Group(g) => {
                    blocking(s, move |up| g.run(up, self.memory_budget(), Some(&expr::Scope::Many(&self.vars))))
                }
                Stage::Count(field) => blocking(s, move |up| stages::count(field, up)),
                Stage::Facet(facets) => blocking(s, move |up| composite::run_facet(facets, up, self.memory_budget())),
                Stage::Sample(size) => blocking(s, move |up| composite::run_sample(*size, up, self.memory_budget())),
                Stage::Window(w) => {
                    blocking(s, move |up| w.run(up, self.memory_budget(), Some(&expr::Scope::Many(&self.vars))))
                }
                Stage::BucketAuto(b) => {
                    blocking(s, move |up| b.run(up, self.memory_budget(), Some(&expr::Scope::Many(&self.vars))))
                }
                Stage::Densify(d) => blocking(s, move |up| d.run(up, self.memory_budget())),
                Stage::Redact(r) => Box::new(s.filter_map(move |r_doc| match r_doc {
                    Ok(d) => r.apply(d, Some(&expr::Scope::Many(&self.vars))).transpose(),
                    Err(e) => Some(Err(e)),
                })),
                // The input (empty for `aggregate: 1`) is replaced, as MongoDB's desugaring does.
                Stage::Documents(docs) => {
                    drop(s);
                    Box::new(docs.iter().cloned().map(Ok))
                }
                Stage::Lookup(_) | Stage::Output(_) | Stage::UnionWith(_) | Stage::GraphLookup(_) => {
                    let name = match &self.stages[i] {
                        Stage::Lookup(l) => format!("$lookup from '{}'", l.from),
                        Stage::GraphLookup(g) => format!("$graphLookup from '{}'", g.from),
                        Stage::UnionWith(u) => format!("$unionWith of '{}'", u.coll.as_deref().unwrap_or("$documents")),
                        other => other.name().to_owned(),
                    };
                    Box::new(std::iter::once(Err(QueryError::new(
                        ErrorCode::NotImplemented,
                        format!("{name} runs only at the router, not inside $facet or on a shard"),
                    ))))
                }
            };
        }
        s
    }

    /// How many documents a `$sort` at `i` must keep, when a `$limit` (maybe after a `$skip`)
    /// follows it.
    fn top_k_after(&self, i: usize) -> Option<usize> {
        let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        match (self.stages.get(i + 1), self.stages.get(i + 2)) {
            (Some(Stage::Limit(l)), _) => Some(as_usize(*l)),
            (Some(Stage::Skip(s)), Some(Stage::Limit(l))) => Some(as_usize(*s).saturating_add(as_usize(*l))),
            _ => None,
        }
    }

    fn memory_budget(&self) -> Budget {
        let max_bytes = if self.allow_disk_use {
            self.memory_limit_bytes.saturating_mul(ALLOW_DISK_USE_MEMORY_FACTOR)
        } else {
            self.memory_limit_bytes
        };
        Budget { max_bytes, disk_use: self.allow_disk_use }
    }

    fn sort(&self, spec: &SortSpec, up: DocStream<'_>, keep: Option<usize>) -> Result<Vec<Document>> {
        let budget = self.memory_budget();
        let mut docs = Vec::new();
        let mut bytes = 0usize;
        for r in up {
            let d = r?;
            bytes = bytes.saturating_add(doc_size(&d));
            docs.push(d);
            if let Some(k) = keep
                && docs.len() >= k.saturating_mul(2).max(1)
            {
                sort_documents(&mut docs, spec);
                docs.truncate(k);
                bytes = docs.iter().map(doc_size).sum();
            }
            budget.check(bytes, "$sort")?;
        }
        sort_documents(&mut docs, spec);
        if let Some(k) = keep {
            docs.truncate(k);
        }
        Ok(docs)
    }
}

/// A stage that must see all of its input before producing output; runs on the first pull.
fn blocking<'a>(
    upstream: DocStream<'a>,
    op: impl FnOnce(DocStream<'a>) -> Result<Vec<Document>> + 'a,
) -> DocStream<'a> {
    let mut pending = Some((upstream, op));
    let mut output: Option<std::vec::IntoIter<Document>> = None;
    Box::new(std::iter::from_fn(move || {
        if let Some((up, op)) = pending.take() {
            match op(up) {
                Ok(docs) => output = Some(docs.into_iter()),
                Err(e) => return Some(Err(e)),
            }
        }
        output.as_mut()?.next().map(Ok)
    }))
}

/// One stage as written; `$sortByCount` expands to two.
fn parse_stage(stage: &Bson) -> Result<Vec<Stage>> {
    let Bson::Document(d) = stage else {
        return Err(QueryError::type_mismatch("Each element of the 'pipeline' array must be an object"));
    };
    let mut it = d.iter();
    let (Some((name, arg)), None) = (it.next(), it.next()) else {
        // MongoDB: Location40323.
        return Err(QueryError::failed_to_parse(
            "A pipeline stage specification object must contain exactly one field.",
        ));
    };
    let object = |what: &str| -> Result<&Document> {
        match arg {
            Bson::Document(spec) => Ok(spec),
            other => Err(QueryError::failed_to_parse(format!(
                "{what} specification must be an object, got {}",
                crate::display::type_name(other)
            ))),
        }
    };
    Ok(vec![match name.as_str() {
        "$match" => {
            let spec = object("$match")?;
            Stage::Match { filter: Filter::parse(spec)?, spec: spec.clone() }
        }
        "$project" => Stage::Reshape { name: "$project", projection: Projection::parse_project(object("$project")?)? },
        "$addFields" => {
            Stage::Reshape { name: "$addFields", projection: Projection::parse_add_fields(object("$addFields")?)? }
        }
        "$set" => Stage::Reshape { name: "$set", projection: Projection::parse_add_fields(object("$set")?)? },
        "$unset" => Stage::Reshape { name: "$unset", projection: stages::parse_unset(arg)? },
        "$sort" => {
            let Bson::Document(spec) = arg else {
                // MongoDB: Location15973.
                return Err(QueryError::failed_to_parse("the $sort key specification must be an object"));
            };
            if spec.is_empty() {
                // MongoDB: Location15976.
                return Err(QueryError::bad_value("$sort stage must have at least one sort key"));
            }
            Stage::Sort(SortSpec::parse(spec)?)
        }
        "$limit" => Stage::Limit(stages::parse_limit(arg)?),
        "$skip" => Stage::Skip(stages::parse_skip(arg)?),
        "$count" => Stage::Count(stages::parse_count(arg)?),
        "$unwind" => Stage::Unwind(Unwind::parse(arg)?),
        "$group" => Stage::Group(Group::parse(arg)?),
        split::PARTIAL_GROUP => Stage::Group(Group::parse_as(arg, GroupMode::Partial)?),
        split::MERGE_GROUP => Stage::Group(Group::parse_as(arg, GroupMode::Merge)?),
        "$replaceRoot" => {
            let spec = object("$replaceRoot")?;
            let (Some(new_root), 1) = (spec.get("newRoot"), spec.len()) else {
                // MongoDB: Location40231 / 40415.
                return Err(QueryError::failed_to_parse("$replaceRoot takes exactly one field, 'newRoot'"));
            };
            Stage::ReplaceRoot { name: "$replaceRoot", new_root: expr::Expr::parse(new_root)? }
        }
        "$replaceWith" => Stage::ReplaceRoot { name: "$replaceWith", new_root: expr::Expr::parse(arg)? },
        "$facet" => Stage::Facet(composite::parse_facet(object("$facet")?)?),
        "$sample" => Stage::Sample(composite::parse_sample(arg)?),
        "$lookup" => Stage::Lookup(lookup::Lookup::parse(arg)?),
        "$setWindowFields" => Stage::Window(window::SetWindowFields::parse(arg)?),
        "$bucketAuto" => Stage::BucketAuto(bucket_auto::BucketAuto::parse(arg)?),
        "$redact" => Stage::Redact(redact::Redact::parse(arg)?),
        "$densify" => Stage::Densify(densify::Densify::parse(arg)?),
        "$fill" => {
            let mut out = Vec::new();
            for s in fill::desugar(arg)? {
                out.extend(parse_stage(&s)?);
            }
            return Ok(out);
        }
        "$documents" => Stage::Documents(stages::parse_documents(arg)?),
        "$unionWith" => Stage::UnionWith(union_with::UnionWith::parse(arg)?),
        "$graphLookup" => Stage::GraphLookup(graph_lookup::GraphLookup::parse(arg)?),
        "$changeStreamSplitLargeEvent" | "$changeStream" => {
            return Err(QueryError::new(
                ErrorCode::NotImplemented,
                format!("{name} is not supported: Shoal has no change streams yet"),
            ));
        }
        "$listLocalSessions" | "$listSessions" => {
            return Err(QueryError::new(
                ErrorCode::NotImplemented,
                format!("{name} is not supported yet: Shoal keeps no server sessions to list"),
            ));
        }
        "$out" => Stage::Output(output::Output::parse_out(arg)?),
        "$merge" => Stage::Output(output::Output::parse_merge(arg)?),
        "$bucket" => {
            let (group, sort) = composite::bucket_as_group(arg)?;
            return Ok(vec![Stage::Group(Group::parse(&group)?), Stage::Sort(SortSpec::parse(&sort)?)]);
        }
        "$sortByCount" => {
            // `{$group: {_id: <expr>, count: {$sum: 1}}}, {$sort: {count: -1}}`, as MongoDB expands it.
            let is_expression = matches!(arg, Bson::String(s) if s.starts_with('$'))
                || matches!(arg, Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')));
            if !is_expression {
                // MongoDB: Location40148.
                return Err(QueryError::bad_value(
                    "the sortByCount field must be defined as a $-prefixed path or an expression",
                ));
            }
            let group = Group::parse(&Bson::Document(bson::doc! { "_id": arg.clone(), "count": { "$sum": 1 } }))?;
            return Ok(vec![Stage::Group(group), Stage::Sort(SortSpec::parse(&bson::doc! { "count": -1 })?)]);
        }
        other => {
            return Err(QueryError::new(
                ErrorCode::Location40324,
                format!("Unrecognized pipeline stage name: '{other}'"),
            ));
        }
    }])
}

/// Estimated BSON size of a document, for memory bounds; exact for most types.
pub fn doc_size(d: &Document) -> usize {
    5 + d.iter().map(|(k, v)| 2 + k.len() + value_size(v)).sum::<usize>()
}

pub(crate) fn value_size(v: &Bson) -> usize {
    match v {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Decimal128(_) => 16,
        Bson::ObjectId(_) => 12,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => 5 + s.len(),
        Bson::Document(d) => doc_size(d),
        // Array keys are decimal indexes; four bytes each is a fair average.
        Bson::Array(a) => 5 + a.iter().map(|e| 6 + value_size(e)).sum::<usize>(),
        Bson::Binary(b) => 5 + b.bytes.len(),
        Bson::RegularExpression(re) => 2 + re.pattern.as_str().len() + re.options.as_str().len(),
        Bson::JavaScriptCodeWithScope(c) => 9 + c.code.len() + doc_size(&c.scope),
        Bson::DbPointer(_) => 32,
    }
}

/// The `cursor` option of an `aggregate` command as MongoDB requires it, for the shard and the
/// router alike: a document, absent only with `explain`; its `batchSize` (if any) a
/// non-negative integer, returned.
pub fn cursor_option(body: &Document) -> Result<Option<i64>> {
    match body.get("cursor") {
        Some(Bson::Document(c)) => crate::args::non_negative(c, "aggregate.cursor", "batchSize"),
        Some(other) => Err(QueryError::type_mismatch(format!(
            "BSON field 'aggregate.cursor' is the wrong type '{}', expected type 'object'",
            crate::display::type_name(other)
        ))),
        None if body.contains_key("explain") => Ok(None),
        None => Err(QueryError::failed_to_parse(
            "The 'cursor' option is required, except for aggregate with the explain argument",
        )),
    }
}

#[cfg(test)]
mod tests;
