//! `update`: each statement `{q, u, multi, upsert}` finds its documents, applies the update
//! (operator-style or replacement) and stores the changed ones with their oplog entries; with
//! `upsert` and no match it inserts the document built from the query's equalities.

use std::ops::ControlFlow;

use bson::{Bson, Document, RawDocumentBuf};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;
use shoal_query::update::{UpdateContext, UpdateSpec};
use shoal_query::vars::LetVars;

use crate::error::{ExecError, ExecResult};
use crate::exec::insert::{insert_prepared, with_id_first};
use crate::exec::retry::{self, Outcome, Retryable};
use crate::exec::scan::{Matched, for_each_match};
use crate::exec::statements::statements;
use crate::exec::stored_doc::{check_size, validate_document};
use crate::exec::{Node, Request, StatementError, WriteOutcome, args, plan, record};
use crate::sharding::Ownership;
use crate::store::WriteTxn;

pub struct UpdateStatement {
    pub filter_doc: Document,
    pub filter: Filter,
    pub collation: shoal_query::collation::Collation,
    pub spec: UpdateSpec,
    pub multi: bool,
    pub upsert: bool,
    pub hint: Option<Bson>,
    /// MongoDB 8.0's `sort` of `updateOne`/`replaceOne`: which matching document the single
    /// update takes (refused with `multi`).
    pub sort: Option<shoal_query::sort::SortSpec>,
}

impl UpdateStatement {
    /// One statement of `updates`, seeing the command's `let` variables.
    pub fn parse(stmt: &Document, vars: &LetVars) -> ExecResult<Self> {
        let filter_doc = match stmt.get("q") {
            Some(Bson::Document(d)) => d.clone(),
            Some(other) => return Err(args::wrong_type("q", "q", other, "object")),
            None => {
                return Err(ExecError::new(
                    ErrorCode::Location40414,
                    "BSON field 'update.updates.q' is missing but a required field",
                ));
            }
        };
        let array_filters = array_filters(stmt, "update.updates")?;
        let spec = match stmt.get("u") {
            Some(Bson::Document(d)) => UpdateSpec::parse_with_filters(d, &array_filters)?,
            Some(Bson::Array(stages)) => pipeline_update(stages, &array_filters)?,
            Some(other) => return Err(args::wrong_type("update.updates", "u", other, "object")),
            None => {
                return Err(ExecError::new(
                    ErrorCode::Location40414,
                    "BSON field 'update.updates.u' is missing but a required field",
                ));
            }
        };
        let multi = args::opt_bool(stmt, "update.updates", "multi")?.unwrap_or(false);
        let upsert = args::opt_bool(stmt, "update.updates", "upsert")?.unwrap_or(false);
        let collation = args::collation(stmt, "update.updates")?;
        args::check_hint(stmt, "update.updates")?;
        if multi && spec.is_replacement() {
            return Err(ExecError::new(
                ErrorCode::FailedToParse,
                "multi update is not supported for replacement-style update",
            ));
        }
        let sort = match stmt.get("sort") {
            None | Some(Bson::Null) => None,
            Some(Bson::Document(d)) if d.is_empty() => None,
            Some(Bson::Document(d)) => Some(shoal_query::sort::SortSpec::parse(d)?.with_collation(collation)),
            Some(other) => return Err(args::wrong_type("update.updates", "sort", other, "object")),
        };
        if multi && sort.is_some() {
            return Err(ExecError::new(ErrorCode::InvalidOptions, "Cannot specify sort with multi=true"));
        }
        let filter = Filter::parse(&filter_doc)?.with_vars(vars).with_collation(collation)?;
        let hint = stmt.get("hint").cloned();
        Ok(Self { filter_doc, filter, collation, spec: spec.with_vars(vars), multi, upsert, hint, sort })
    }
}

/// An update given as a pipeline (no `arrayFilters` with it, as MongoDB requires).
pub fn pipeline_update(stages: &[Bson], array_filters: &[Document]) -> ExecResult<UpdateSpec> {
    if !array_filters.is_empty() {
        return Err(ExecError::new(
            ErrorCode::FailedToParse,
            "arrayFilters may not be specified for pipeline-style updates",
        ));
    }
    Ok(UpdateSpec::parse_pipeline(stages)?)
}

/// A statement's (or findAndModify's) `arrayFilters`: an array of documents, absent = none.
pub fn array_filters(body: &Document, cmd: &str) -> ExecResult<Vec<Document>> {
    match body.get("arrayFilters") {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(items)) => items
            .iter()
            .map(|f| match f {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(args::wrong_type(cmd, "arrayFilters", other, "object")),
            })
            .collect(),
        Some(other) => Err(args::wrong_type(cmd, "arrayFilters", other, "array")),
    }
}

pub fn run(node: &Node, req: &Request<'_>) -> ExecResult<(WriteOutcome, u64)> {
    args::check_known_fields(
        &req.body,
        "update",
        &[
            "updates",
            "ordered",
            "bypassDocumentValidation",
            "let",
            "stmtIds",
            "isTimeseriesNamespace",
            "collectionUUID",
        ],
    )?;
    let coll_name = args::collection_name(&req.body, "update")?;
    let ns = args::namespace(req.db, &coll_name)?;
    let ordered = args::opt_bool(&req.body, "update", "ordered")?.unwrap_or(true);
    let vars = LetVars::from_command(&req.body, "update")?;
    let stmts = statements(req, "updates")?;
    let retry = Retryable::parse(&req.body, stmts.len())?;
    if let Some(answer) = retry::answer_probe(&node.store, &req.body, retry.as_ref()) {
        return Ok((answer?.to_write_outcome(), 0));
    }
    let ns_name = ns.to_string();
    let (outcome, seq) = node.store.write(|txn| {
        let began = match retry::begin(retry.as_ref(), txn)? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let mut out = WriteOutcome::default();
        for (i, stmt) in stmts.iter().enumerate() {
            if let Some(r) = &began {
                if let Some(Outcome::Updated { matched, modified, upserted }) = r.executed(txn, i)? {
                    out.n += matched + i64::from(upserted.is_some());
                    out.n_modified += modified;
                    out.upserted.extend(upserted.map(|id| (i as i32, id)));
                    continue;
                }
                txn.hold_together(true);
            }
            let result = UpdateStatement::parse(stmt, &vars)
                .and_then(|s| refuse_multi(s, retry.is_some()))
                .map_err(|e| StatementError::Exec(e, None))
                .and_then(|s| apply_statement(node, txn, &ns, &s, req.owned()));
            let result = match (result, &began) {
                (Ok(applied), Some(r)) => {
                    let outcome = Outcome::Updated {
                        matched: applied.matched,
                        modified: applied.modified,
                        upserted: applied.upserted_id.clone(),
                    };
                    r.record(txn, i, &ns_name, &outcome).map_err(StatementError::Storage).map(|()| applied)
                }
                (other, _) => other,
            };
            txn.hold_together(false);
            txn.end_statement()?;
            let result = result.map(|applied| {
                out.n += applied.matched;
                out.n_modified += applied.modified;
                if let Some(id) = applied.upserted_id {
                    out.n += 1;
                    out.upserted.push((i as i32, id));
                }
            });
            if record(&mut out, i, result, ordered)?.is_break() {
                break;
            }
        }
        Ok(Ok(out))
    })?;
    Ok((outcome?, seq))
}

/// A statement that may change many documents cannot be retried safely (MongoDB refuses it too).
pub fn refuse_multi(stmt: UpdateStatement, retryable: bool) -> ExecResult<UpdateStatement> {
    if retryable && stmt.multi {
        return Err(ExecError::new(
            ErrorCode::InvalidOptions,
            "Cannot use (or request) retryable writes with multi=true",
        ));
    }
    Ok(stmt)
}

/// Outcome of one update statement, also used by findAndModify.
pub struct Applied {
    pub matched: i64,
    pub modified: i64,
    /// (old, new) of the last document updated or inserted; old only when asked for.
    pub last: Option<(Option<Document>, Document)>,
    pub upserted_id: Option<Bson>,
}

fn apply_statement(
    node: &Node,
    txn: &mut WriteTxn<'_>,
    ns: &shoal_proto::Namespace,
    stmt: &UpdateStatement,
    owned: Option<&Ownership>,
) -> Result<Applied, StatementError> {
    apply(node, txn, ns, stmt, stmt.sort.as_ref(), false, owned)
}

/// Runs one update statement. `sort` picks which document a single update takes (findAndModify);
/// `keep_pre_image` keeps the matched document as it was in [`Applied::last`] (findAndModify with
/// `new: false`), which costs a copy of it, so plain updates do not ask for it. `owned` (a
/// versioned request on a sharded collection): orphans are not matched, the shard key may not
/// change, and an upserted document must carry the whole shard key.
pub fn apply(
    node: &Node,
    txn: &mut WriteTxn<'_>,
    ns: &shoal_proto::Namespace,
    stmt: &UpdateStatement,
    sort: Option<&shoal_query::sort::SortSpec>,
    keep_pre_image: bool,
    owned: Option<&Ownership>,
) -> Result<Applied, StatementError> {
    let ctx = UpdateContext { now: txn.now(), is_upsert_insert: false };
    let mut applied = Applied { matched: 0, modified: 0, last: None, upserted_id: None };
    if let Some(coll) = txn.collection(&ns.to_string()) {
        let plan_doc = args::planning_filter(&stmt.filter_doc, stmt.collation);
        let query = Query { filter_doc: &plan_doc, filter: &stmt.filter, hint: stmt.hint.as_ref() };
        let matches = collect_matches(node, txn, &coll, query, !stmt.multi, sort, owned)
            .map_err(|e| StatementError::Exec(e, None))?;
        for old in matches {
            let id = old.doc.get("_id").cloned().unwrap_or(Bson::Null);
            let pre_image = keep_pre_image.then(|| old.doc.clone());
            let key_before = owned.map(|o| (o, o.key_values(&old.doc)));
            let mut new = old.doc;
            let changed = stmt
                .spec
                .apply_matched(&mut new, &ctx, Some(&stmt.filter))
                .map_err(|e| StatementError::Exec(e.into(), None))?;
            applied.matched += 1;
            if changed {
                if new.get("_id") != Some(&id) {
                    return Err(StatementError::Exec(
                        ExecError::new(
                            ErrorCode::ImmutableField,
                            "Performing an update on the path '_id' would modify the immutable field '_id'",
                        ),
                        None,
                    ));
                }
                if let Some((o, before)) = &key_before {
                    o.check_key_unchanged(before, &new)?;
                }
                validate_document(&new)?;
                let raw = RawDocumentBuf::try_from(&new).map_err(|e| StatementError::Exec(e.into(), None))?;
                if raw.as_bytes().len() > shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES {
                    return Err(StatementError::Exec(
                        ExecError::new(
                            ErrorCode::Location17419,
                            format!(
                                "Resulting document after update is larger than {}",
                                shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES
                            ),
                        ),
                        None,
                    ));
                }
                txn.update(&coll, &id, &raw).map_err(StatementError::Storage)?;
                applied.modified += 1;
            }
            applied.last = Some((pre_image, new));
        }
    }
    if applied.matched == 0 && stmt.upsert {
        let seed = shoal_query::filter::equality_fields(&stmt.filter_doc)?;
        let upsert_ctx = UpdateContext { now: txn.now(), is_upsert_insert: true };
        let built = shoal_query::update::upsert_document(&seed, &stmt.spec, &upsert_ctx)
            .map_err(|e| StatementError::Exec(e.into(), None))?;
        let (id, doc) = with_id_first(&built);
        if let Some(o) = owned {
            o.check_full_key(&doc)?;
        }
        validate_document(&doc)?;
        let bytes = RawDocumentBuf::try_from(&doc).map_err(|e| StatementError::Exec(e.into(), None))?.into_bytes();
        check_size(bytes.len())?;
        let (coll, _) = txn.ensure_collection(ns, Document::new()).map_err(StatementError::Storage)?;
        insert_prepared(txn, &coll, &id, bytes.into())?;
        applied.upserted_id = Some(id);
        applied.last = Some((None, doc));
    }
    Ok(applied)
}

/// A write statement's query. `filter_doc` is what the access path is planned from
/// (`args::planning_filter`: nothing under a non-simple collation).
pub struct Query<'a> {
    pub filter_doc: &'a Document,
    pub filter: &'a Filter,
    pub hint: Option<&'a Bson>,
}

/// The documents the query selects (and this shard owns, with `owned`), in `sort` order when
/// given; only the first when `single`. All are collected before any is written, so a write
/// that moves a document within the index being scanned cannot make the scan meet it again.
pub fn collect_matches(
    node: &Node,
    txn: &WriteTxn<'_>,
    coll: &crate::store::local_catalog::CollectionInfo,
    query: Query<'_>,
    single: bool,
    sort: Option<&shoal_query::sort::SortSpec>,
    owned: Option<&Ownership>,
) -> ExecResult<Vec<Matched>> {
    let chosen = plan::plan(coll, query.filter_doc, None, query.hint)?;
    let mut out: Vec<Matched> = Vec::new();
    let stop_after_first = single && sort.is_none();
    for_each_match(&node.store, Some(txn), coll, &chosen.path, Some(query.filter), owned, chosen.reverse, |m| {
        match (single, sort, out.first()) {
            // A single write with a sort keeps only the best so far: memory stays one document.
            (true, Some(spec), Some(best)) => {
                if spec.compare(&m.doc, &best.doc) == std::cmp::Ordering::Less {
                    out[0] = m;
                }
            }
            _ => out.push(m),
        }
        Ok(if stop_after_first { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    })?;
    if let Some(spec) = sort {
        out.sort_by(|a, b| spec.compare(&a.doc, &b.doc));
    }
    if single {
        out.truncate(1);
    }
    Ok(out)
}
