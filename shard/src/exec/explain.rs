//! `explain` on one shard: the plan the shard would choose for a `find`, `count`, `distinct` or
//! an `aggregate`'s leading `$match`/`$sort` (plus the statements of `update`, `delete` and
//! `findAndModify`), and for `executionStats`/`allPlansExecution` the plan run for real: the
//! documents it returns and the index keys and documents it examined.
//!
//! Must not: write (write commands are planned, never executed).

use std::ops::ControlFlow;
use std::time::Instant;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;

use crate::error::{ExecError, ExecResult};
use crate::exec::plan::explain::{Shape, rejected_plans, winning_plan};
use crate::exec::scan::{counters, for_each_match};
use crate::exec::{Node, Request, args, plan};

const VERBOSITIES: &[&str] = &["queryPlanner", "executionStats", "allPlansExecution"];

/// What an explained command reads.
#[derive(Default)]
struct Query {
    filter: Document,
    sort: Option<Document>,
    projection: Option<Document>,
    skip: u64,
    limit: Option<u64>,
    hint: Option<Bson>,
    /// Writes and aggregations past their first stages are planned, not run.
    runnable: bool,
}

fn opt_u64(d: &Document, field: &str) -> Option<u64> {
    d.get(field).and_then(args::as_f64).filter(|n| *n > 0.0).map(|n| n as u64)
}

fn query_of(cmd: &str, inner: &Document) -> ExecResult<Query> {
    let doc_of = |field: &str| inner.get_document(field).ok().cloned();
    let mut q = Query { hint: inner.get("hint").cloned(), runnable: true, ..Default::default() };
    let Some(cmd) = crate::commands::explainable(cmd) else {
        let names: Vec<&str> = crate::commands::explainable_names().collect();
        return Err(ExecError::new(
            ErrorCode::CommandNotFound,
            format!("explain of '{cmd}' is not supported ({} are)", names.join(", ")),
        ));
    };
    match cmd {
        "find" => {
            q.filter = doc_of("filter").unwrap_or_default();
            q.sort = doc_of("sort");
            q.projection = doc_of("projection");
            q.skip = opt_u64(inner, "skip").unwrap_or(0);
            q.limit = opt_u64(inner, "limit");
        }
        "count" | "distinct" => {
            if cmd == "distinct" {
                crate::exec::count::distinct_key(inner)?;
            }
            q.filter = doc_of("query").unwrap_or_default();
            q.skip = opt_u64(inner, "skip").unwrap_or(0);
            q.limit = opt_u64(inner, "limit");
        }
        "aggregate" => {
            let stages = match inner.get("pipeline") {
                Some(Bson::Array(stages)) => stages.as_slice(),
                Some(other) => return Err(args::wrong_type("aggregate", "pipeline", other, "array")),
                None => &[],
            };
            // The whole pipeline is checked as running it would (unknown stages, accumulators).
            shoal_query::aggregate::Pipeline::parse(stages)?;
            let mut rest = stages.iter();
            if let Some(Bson::Document(first)) = stages.first()
                && let Ok(m) = first.get_document("$match")
            {
                q.filter = m.clone();
                rest.next();
            }
            if let Some(Bson::Document(next)) = rest.clone().next()
                && let Ok(s) = next.get_document("$sort")
            {
                q.sort = Some(s.clone());
            }
        }
        "update" | "delete" => {
            let field = if cmd == "update" { "updates" } else { "deletes" };
            if cmd == "update" {
                let vars = shoal_query::vars::LetVars::from_command(inner, cmd)?;
                for stmt in inner.get_array(field).map(|a| a.as_slice()).unwrap_or_default() {
                    let Bson::Document(stmt) = stmt else {
                        return Err(args::wrong_type("update", field, stmt, "object"));
                    };
                    crate::exec::update::UpdateStatement::parse(stmt, &vars)?;
                }
            }
            if let Some(Bson::Document(stmt)) = inner.get_array(field).ok().and_then(|a| a.first()) {
                q.filter = stmt.get_document("q").cloned().unwrap_or_default();
                q.hint = stmt.get("hint").cloned();
            }
            q.runnable = false;
        }
        "findAndModify" => {
            let flag = |f: &str| args::opt_bool(inner, "findAndModify", f).map(|b| b.unwrap_or(false));
            crate::exec::find_and_modify::update_of(inner, flag("remove")?, flag("upsert")?, flag("new")?)?;
            q.filter = doc_of("query").unwrap_or_default();
            q.sort = doc_of("sort");
            q.runnable = false;
        }
        _ => {}
    }
    Ok(q)
}

pub fn explain(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let Some(Bson::Document(inner)) = req.body.get("explain") else {
        return Err(ExecError::new(ErrorCode::TypeMismatch, "explain takes the command to explain as a document"));
    };
    let verbosity = match req.body.get("verbosity") {
        None => "allPlansExecution",
        Some(Bson::String(v)) if VERBOSITIES.contains(&v.as_str()) => v.as_str(),
        Some(other) => {
            return Err(ExecError::bad_value(format!("verbosity string must be one of {VERBOSITIES:?}, not {other}")));
        }
    };
    let (cmd, coll_name) = match inner.iter().next() {
        Some((cmd, Bson::String(c))) => (cmd.clone(), c.clone()),
        _ => return Err(ExecError::new(ErrorCode::InvalidNamespace, "explain: the command names no collection")),
    };
    let ns = args::namespace(req.db, &coll_name)?;
    let q = query_of(&cmd, inner)?;
    // Explained as it would run: with the command's `let` variables and collation.
    let collation = args::collation(inner, &cmd)?;
    let vars = shoal_query::vars::LetVars::from_command(inner, &cmd)?;
    let filter = Filter::parse(&q.filter)?.with_vars(&vars).with_collation(collation)?;
    let plan_doc = args::planning_filter(&q.filter, collation).into_owned();
    let Some(coll) = node.store.collection(&ns.to_string()) else {
        let eof = doc! { "stage": "EOF" };
        let mut reply = doc! { "queryPlanner": { "namespace": ns.to_string(), "parsedQuery": q.filter.clone(), "winningPlan": eof.clone(), "rejectedPlans": [] } };
        if verbosity != "queryPlanner" {
            reply.insert("executionStats", doc! { "executionSuccess": true, "nReturned": 0, "executionTimeMillis": 0, "totalKeysExamined": 0, "totalDocsExamined": 0, "executionStages": eof });
        }
        return Ok(reply);
    };
    let mut chosen = plan::plan(&coll, &plan_doc, q.sort.as_ref(), q.hint.as_ref())?;
    chosen.sorted &= collation.is_simple() || q.sort.is_none();
    if let (plan::AccessPath::Index(scan), Some(projection)) = (&mut chosen.path, q.projection.as_ref()) {
        scan.covered = plan::covered::covers(
            scan,
            &q.filter,
            projection,
            q.sort.as_ref().unwrap_or(&Document::new()),
            req.owned(),
        );
    }
    let shape = Shape {
        filter: Some(&q.filter),
        sort: q.sort.as_ref(),
        projection: q.projection.as_ref(),
        skip: q.skip,
        limit: q.limit,
    };
    let winning = winning_plan(&chosen, &shape);
    let mut reply = doc! {
        "queryPlanner": {
            "namespace": ns.to_string(),
            "indexFilterSet": false,
            "parsedQuery": q.filter.clone(),
            "winningPlan": winning.clone(),
            "rejectedPlans": rejected_plans(&chosen.rejected),
        },
    };
    if verbosity == "queryPlanner" || !q.runnable {
        return Ok(reply);
    }
    counters::take();
    let started = Instant::now();
    let stop_at = if chosen.sorted { q.limit.map(|l| l + q.skip) } else { None };
    let mut matched = 0u64;
    for_each_match(&node.store, None, &coll, &chosen.path, Some(&filter), req.owned(), chosen.reverse, |_| {
        matched += 1;
        Ok(if Some(matched) == stop_at { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    })?;
    let (keys, docs) = counters::take();
    let returned = matched.saturating_sub(q.skip).min(q.limit.unwrap_or(u64::MAX));
    reply.insert(
        "executionStats",
        doc! {
            "executionSuccess": true,
            "nReturned": returned as i64,
            "executionTimeMillis": started.elapsed().as_millis() as i64,
            "totalKeysExamined": keys as i64,
            "totalDocsExamined": docs as i64,
            "executionStages": winning,
        },
    );
    Ok(reply)
}
