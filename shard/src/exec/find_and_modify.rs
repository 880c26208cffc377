//! `findAndModify`: update, replace or remove one document (the first in `sort` order) and return
//! it as it was before or after, atomically with respect to other writers (it runs as the single
//! writer).

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;
use shoal_query::update::UpdateSpec;

use crate::error::{ExecError, ExecResult};
use crate::exec::retry::{self, Outcome, Retryable};
use crate::exec::update::{Query, UpdateStatement, apply, collect_matches};
use crate::exec::{Node, Request, StatementError, args};

const CMD: &str = "findAndModify";

/// A `findAndModify` command's arguments, checked as MongoDB checks them (run and `explain`
/// share it).
pub(crate) struct FindAndModifyArgs {
    pub(crate) filter_doc: Document,
    pub(crate) sort: Option<SortSpec>,
    sort_doc: Option<Document>,
    fields: Option<Projection>,
    remove: bool,
    return_new: bool,
    upsert: bool,
    collation: shoal_query::collation::Collation,
    update: Option<UpdateSpec>,
    filter: Filter,
}

impl FindAndModifyArgs {
    /// The sort as the client gave it (for explain's plan).
    pub(crate) fn sort_doc(&self) -> Option<&Document> {
        self.sort_doc.as_ref()
    }
}

pub(crate) fn parse(body: &Document) -> ExecResult<FindAndModifyArgs> {
    args::check_known_fields(
        body,
        CMD,
        &[
            "query",
            "fields",
            "sort",
            "batchSize",
            "singleBatch",
            "hint",
            "collation",
            "arrayFilters",
            "remove",
            "update",
            "new",
            "upsert",
            "bypassDocumentValidation",
            "let",
            "stmtId",
            "sampleId",
        ],
    )?;
    let filter_doc = args::opt_document(body, CMD, "query")?.cloned().unwrap_or_default();
    let sort = args::opt_document(body, CMD, "sort")?.filter(|s| !s.is_empty()).map(SortSpec::parse).transpose()?;
    let fields =
        args::opt_document(body, CMD, "fields")?.filter(|f| !f.is_empty()).map(Projection::parse).transpose()?;
    let remove = args::opt_bool(body, CMD, "remove")?.unwrap_or(false);
    let return_new = args::opt_bool(body, CMD, "new")?.unwrap_or(false);
    let upsert = args::opt_bool(body, CMD, "upsert")?.unwrap_or(false);
    let collation = args::collation(body, CMD)?;
    args::check_hint(body, CMD)?;
    let update = update_of(body, remove, upsert, return_new)?;
    let vars = shoal_query::vars::LetVars::from_command(body, CMD)?;
    let filter = Filter::parse(&filter_doc)?.with_vars(&vars).with_collation(collation)?;
    let sort = sort.map(|s| s.with_collation(collation));
    let update = update.map(|u| u.with_vars(&vars));
    let sort_doc = args::opt_document(body, CMD, "sort")?.filter(|s| !s.is_empty()).cloned();
    Ok(FindAndModifyArgs { filter_doc, sort, sort_doc, fields, remove, return_new, upsert, collation, update, filter })
}

pub fn run(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let body = &req.body;
    let coll_name = args::collection_name(body, CMD)?;
    let ns = args::namespace(req.db, &coll_name)?;
    let FindAndModifyArgs { filter_doc, sort, fields, remove, return_new, upsert, collation, update, filter, .. } =
        parse(body)?;
    let project = |d: Option<Document>| -> ExecResult<Bson> {
        match (d, &fields) {
            (None, _) => Ok(Bson::Null),
            (Some(d), Some(p)) => Ok(Bson::Document(p.apply(&d)?)),
            (Some(d), None) => Ok(Bson::Document(d)),
        }
    };
    let retry = Retryable::parse(body, 1)?;
    if let Some(answer) = retry::answer_probe(&node.store, body, retry.as_ref()) {
        return match answer? {
            Outcome::Reply(reply) => Ok((reply, 0)),
            _ => Err(ExecError::new(ErrorCode::InternalError, "the statement's record is not findAndModify's")),
        };
    }
    let ns_name = ns.to_string();
    let (reply, seq) = node.store.write(|txn| {
        let began = match retry::begin(retry.as_ref(), txn)? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(r) = &began {
            if let Some(Outcome::Reply(reply)) = r.executed(txn, 0)? {
                return Ok(Ok(reply));
            }
            txn.hold_together(true);
        }
        let result: Result<Document, StatementError> = (|| {
            if remove {
                let Some(coll) = txn.collection(&ns.to_string()) else {
                    return Ok(doc! { "lastErrorObject": { "n": 0 }, "value": Bson::Null });
                };
                let plan_doc = args::planning_filter(&filter_doc, collation);
                let matches = collect_matches(node, txn, &coll, Query { filter_doc: &plan_doc, filter: &filter, hint: body.get("hint") }, true, sort.as_ref(), req.owned())?;
                let Some(m) = matches.into_iter().next() else {
                    return Ok(doc! { "lastErrorObject": { "n": 0 }, "value": Bson::Null });
                };
                txn.delete(&coll, m.doc.get("_id").unwrap_or(&Bson::Null)).map_err(StatementError::Storage)?;
                return Ok(doc! { "lastErrorObject": { "n": 1 }, "value": project(Some(m.doc))? });
            }
            let Some(spec) = update else { return Err(ExecError::new(ErrorCode::InternalError, "update expected").into()) };
            let stmt = UpdateStatement { filter_doc: filter_doc.clone(), filter: filter.clone(), collation, spec, multi: false, upsert, hint: None, sort: None };
            let applied = apply(node, txn, &ns, &stmt, sort.as_ref(), !return_new, req.owned())?;
            let mut last_error = doc! { "n": (applied.matched + applied.upserted_id.is_some() as i64) as i32, "updatedExisting": applied.matched > 0 };
            if let Some(id) = &applied.upserted_id {
                last_error.insert("upserted", id.clone());
            }
            let value = match applied.last {
                Some((old, new)) => project(if return_new { Some(new) } else { old })?,
                None => Bson::Null,
            };
            Ok(doc! { "lastErrorObject": last_error, "value": value })
        })();
        let result = match (result, &began) {
            (Ok(reply), Some(r)) => r
                .record(txn, 0, &ns_name, &Outcome::Reply(reply.clone()))
                .map_err(StatementError::Storage)
                .map(|()| reply),
            (other, _) => other,
        };
        txn.hold_together(false);
        match result {
            Ok(d) => Ok(Ok(d)),
            Err(StatementError::Exec(e, _)) => Ok(Err(e)),
            Err(StatementError::Storage(e)) => Err(e),
        }
    })?;
    Ok((reply?, seq))
}

/// The `update` (a document or a pipeline) of a findAndModify, checked against `remove`,
/// `upsert` and `new` as MongoDB checks them; `None` for a remove. Run and explain share it.
pub(crate) fn update_of(
    body: &Document,
    remove: bool,
    upsert: bool,
    return_new: bool,
) -> ExecResult<Option<UpdateSpec>> {
    let array_filters = crate::exec::update::array_filters(body, CMD)?;
    let update = match body.get("update") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(u)) => Some(UpdateSpec::parse_with_filters(u, &array_filters)?),
        Some(Bson::Array(stages)) => Some(crate::exec::update::pipeline_update(stages, &array_filters)?),
        Some(other) => return Err(args::wrong_type(CMD, "update", other, "object")),
    };
    match (&update, remove) {
        (Some(_), true) => {
            return Err(ExecError::new(ErrorCode::FailedToParse, "Cannot specify both an update and remove=true"));
        }
        (None, false) => {
            return Err(ExecError::new(ErrorCode::FailedToParse, "Either an update or remove=true must be specified"));
        }
        (None, true) if upsert => {
            return Err(ExecError::new(ErrorCode::FailedToParse, "Cannot specify both upsert=true and remove=true"));
        }
        (None, true) if return_new => {
            return Err(ExecError::new(
                ErrorCode::FailedToParse,
                "Cannot specify both new=true and remove=true; 'remove' always returns the deleted document",
            ));
        }
        _ => {}
    }
    Ok(update)
}
