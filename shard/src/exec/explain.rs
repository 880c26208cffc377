//! `explain` on one shard: the plan the shard would choose for a `find`, `count`, `distinct` or
//! an `aggregate`'s leading `$match`/`$sort` (plus the statements of `update`, `delete` and
//! `findAndModify`), and for `executionStats`/`allPlansExecution` the plan run for real — scan,
//! sort, skip, limit and projection — with each stage's own counts and time
//! ([`stats::annotate`]).
//!
//! Must not: write (write commands are planned, never executed).

mod stats;

use std::ops::ControlFlow;
use std::time::Instant;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;

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
    allow_disk_use: bool,
    /// Writes and aggregations past their first stages are planned, not run.
    runnable: bool,
}

fn query_of(cmd: &str, inner: &Document) -> ExecResult<Query> {
    let allow_disk_use = inner.get_bool("allowDiskUse").unwrap_or(false);
    let mut q = Query { hint: inner.get("hint").cloned(), allow_disk_use, runnable: true, ..Default::default() };
    let Some(cmd) = crate::commands::explainable(cmd) else {
        let names: Vec<&str> = crate::commands::explainable_names().collect();
        return Err(ExecError::new(
            ErrorCode::CommandNotFound,
            format!("explain of '{cmd}' is not supported ({} are)", names.join(", ")),
        ));
    };
    // Each command's arguments are checked by the function its run path parses them with, so
    // explain refuses exactly what running refuses.
    match cmd {
        "find" => {
            let a = crate::exec::find::parse(inner)?;
            q.filter = a.filter_doc;
            q.sort = Some(a.sort_doc).filter(|s| !s.is_empty());
            q.projection = Some(a.projection_doc).filter(|p| !p.is_empty());
            q.skip = a.skip;
            q.limit = a.limit;
        }
        "count" => {
            let a = crate::exec::count::parse_count(inner)?;
            q.filter = a.query;
            q.skip = a.skip;
            q.limit = a.limit;
        }
        "distinct" => {
            q.filter = crate::exec::count::parse_distinct(inner)?.1;
        }
        "aggregate" => {
            args::check_known_fields(inner, "aggregate", crate::exec::aggregate::FIELDS)?;
            let stages = match inner.get("pipeline") {
                Some(Bson::Array(stages)) => stages.as_slice(),
                Some(other) => return Err(args::wrong_type("aggregate", "pipeline", other, "array")),
                None => {
                    return Err(ExecError::new(
                        ErrorCode::Location40414,
                        "BSON field 'aggregate.pipeline' is missing but a required field",
                    ));
                }
            };
            // explain needs no `cursor` (MongoDB's neither), but one that is given is checked.
            if inner.contains_key("cursor") {
                crate::exec::aggregate::options(inner)?;
            } else {
                let mut with_cursor = inner.clone();
                with_cursor.insert("cursor", Document::new());
                crate::exec::aggregate::options(&with_cursor)?;
            }
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
            let stmts = crate::exec::statements::body_statements(inner, cmd, field)?;
            crate::exec::statements::check_batch_len(stmts.len())?;
            let vars = shoal_query::vars::LetVars::from_command(inner, cmd)?;
            for stmt in &stmts {
                if cmd == "update" {
                    crate::exec::update::UpdateStatement::parse(stmt, &vars)?;
                } else {
                    crate::exec::delete::parse(stmt, &vars)?;
                }
            }
            if let Some(stmt) = stmts.first() {
                q.filter = stmt.get_document("q").cloned().unwrap_or_default();
                q.hint = stmt.get("hint").cloned();
            }
            q.runnable = false;
        }
        "findAndModify" => {
            let a = crate::exec::find_and_modify::parse(inner)?;
            q.sort = a.sort_doc().cloned();
            q.filter = a.filter_doc;
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
    let before = counters::read();
    let started = Instant::now();
    let mut run = stats::Run { skip: q.skip, limit: q.limit, ..Default::default() };
    let projection = q.projection.as_ref().map(Projection::parse).transpose()?;
    let sort = q.sort.as_ref().filter(|_| !chosen.sorted).map(SortSpec::parse).transpose()?;
    // Each returned document goes through the projection as it comes (the streaming case keeps
    // none of them: explain's memory stays that of the plan it runs).
    let project = |d: &Document, run: &mut stats::Run| -> ExecResult<()> {
        if let Some(p) = &projection {
            let projecting = Instant::now();
            p.apply(d)?;
            run.projecting += projecting.elapsed();
        }
        Ok(())
    };
    match sort {
        Some(spec) => {
            let scan = crate::exec::find::Scan { path: &chosen.path, filter: Some(&filter), owned: req.owned() };
            let spec = spec.with_collation(collation);
            let (docs, sorted) =
                crate::exec::find::sorted_matches(node, &coll, scan, &spec, q.skip, q.limit, q.allow_disk_use)?;
            run.matched = sorted.input;
            run.sorting = Some(sorted.sorting);
            run.returned = docs.len() as u64;
            for d in &docs {
                project(d, &mut run)?;
            }
        }
        None => {
            let stop_at = q.limit.map(|l| l + q.skip);
            for_each_match(&node.store, None, &coll, &chosen.path, Some(&filter), req.owned(), chosen.reverse, |m| {
                run.matched += 1;
                if run.matched > q.skip {
                    project(&m.doc, &mut run)?;
                }
                Ok(if Some(run.matched) == stop_at { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
            })?;
            run.stopped_early = stop_at.is_some_and(|s| run.matched == s);
            run.returned = run.matched.saturating_sub(q.skip).min(q.limit.unwrap_or(u64::MAX));
        }
    }
    (run.keys, run.docs) = counters::since(before);
    run.scanning = started.elapsed().saturating_sub(run.sorting.unwrap_or_default()).saturating_sub(run.projecting);
    let mut stages = winning;
    stats::annotate(&mut stages, &run);
    reply.insert(
        "executionStats",
        doc! {
            "executionSuccess": true,
            "nReturned": run.returned as i64,
            "executionTimeMillis": started.elapsed().as_millis() as i64,
            "totalKeysExamined": run.keys as i64,
            "totalDocsExamined": run.docs as i64,
            "executionStages": stages,
        },
    );
    Ok(reply)
}
