//! `delete`: each statement `{q, limit: 0|1}` removes the matching documents (all, or the first)
//! with their oplog entries.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;
use shoal_query::vars::LetVars;

use crate::error::{ExecError, ExecResult};
use crate::exec::retry::{self, Outcome, Retryable};
use crate::exec::statements::statements;
use crate::exec::update::{Query, collect_matches};
use crate::exec::{Node, Request, StatementError, WriteOutcome, args, record};

pub(crate) struct DeleteStatement {
    filter_doc: Document,
    filter: Filter,
    collation: shoal_query::collation::Collation,
    single: bool,
    hint: Option<Bson>,
}

/// One delete statement, checked as MongoDB checks it (run and `explain` share it).
pub(crate) fn parse(stmt: &Document, vars: &LetVars) -> ExecResult<DeleteStatement> {
    let filter_doc = match stmt.get("q") {
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => return Err(args::wrong_type("delete.deletes", "q", other, "object")),
        None => {
            return Err(ExecError::new(
                ErrorCode::Location40414,
                "BSON field 'delete.deletes.q' is missing but a required field",
            ));
        }
    };
    let single = match stmt.get("limit") {
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => match args::as_f64(v) {
            Some(0.0) => false,
            Some(1.0) => true,
            _ => {
                return Err(ExecError::new(
                    ErrorCode::FailedToParse,
                    "The limit field in delete objects must be 0 or 1. Got ".to_owned() + &v.to_string(),
                ));
            }
        },
        Some(other) => return Err(args::wrong_type("delete.deletes", "limit", other, "long")),
        None => {
            return Err(ExecError::new(
                ErrorCode::Location40414,
                "BSON field 'delete.deletes.limit' is missing but a required field",
            ));
        }
    };
    let collation = args::collation(stmt, "delete.deletes")?;
    args::check_hint(stmt, "delete.deletes")?;
    let filter = Filter::parse(&filter_doc)?.with_vars(vars).with_collation(collation)?;
    Ok(DeleteStatement { filter_doc, filter, collation, single, hint: stmt.get("hint").cloned() })
}

fn query<'a>(s: &'a DeleteStatement, plan_doc: &'a Document) -> Query<'a> {
    Query { filter_doc: plan_doc, filter: &s.filter, hint: s.hint.as_ref() }
}

pub fn run(node: &Node, req: &Request<'_>) -> ExecResult<(WriteOutcome, u64)> {
    args::check_known_fields(
        &req.body,
        "delete",
        &["deletes", "ordered", "let", "stmtIds", "isTimeseriesNamespace", "collectionUUID"],
    )?;
    let coll_name = args::collection_name(&req.body, "delete")?;
    let ns = args::namespace(req.db, &coll_name)?.to_string();
    let ordered = args::opt_bool(&req.body, "delete", "ordered")?.unwrap_or(true);
    let vars = LetVars::from_command(&req.body, "delete")?;
    let stmts = statements(req, "deletes")?;
    let retry = Retryable::parse(&req.body, stmts.len())?;
    if let Some(answer) = retry::answer_probe(&node.store, &req.body, retry.as_ref()) {
        return Ok((answer?.to_write_outcome(), 0));
    }
    let (outcome, seq) = node.store.write(|txn| {
        let began = match retry::begin(retry.as_ref(), txn)? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let mut out = WriteOutcome::default();
        for (i, stmt) in stmts.iter().enumerate() {
            if let Some(r) = &began {
                if let Some(Outcome::Deleted { n }) = r.executed(txn, i)? {
                    out.n += n;
                    continue;
                }
                txn.hold_together(true);
            }
            let result = (|| -> Result<i64, StatementError> {
                let s = parse(stmt, &vars)?;
                if retry.is_some() && !s.single {
                    return Err(ExecError::new(
                        ErrorCode::InvalidOptions,
                        "Cannot use (or request) retryable writes with limit=0",
                    )
                    .into());
                }
                let Some(coll) = txn.collection(&ns) else {
                    return Ok(0);
                };
                let plan_doc = args::planning_filter(&s.filter_doc, s.collation);
                let matches = collect_matches(node, txn, &coll, query(&s, &plan_doc), s.single, None, req.owned())?;
                for m in &matches {
                    let id = m.doc.get("_id").cloned().unwrap_or(Bson::Null);
                    txn.delete(&coll, &id).map_err(StatementError::Storage)?;
                }
                Ok(matches.len() as i64)
            })();
            let result = match (result, &began) {
                (Ok(n), Some(r)) => {
                    r.record(txn, i, &ns, &Outcome::Deleted { n }).map_err(StatementError::Storage).map(|()| n)
                }
                (other, _) => other,
            };
            txn.hold_together(false);
            txn.end_statement()?;
            let result = result.map(|n| out.n += n);
            if record(&mut out, i, result, ordered)?.is_break() {
                break;
            }
        }
        Ok(Ok(out))
    })?;
    Ok((outcome?, seq))
}
