//! `count` and `distinct`.

use std::collections::HashSet;
use std::ops::ControlFlow;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;

use crate::error::{ExecError, ExecResult};
use crate::exec::scan::for_each_match;
use crate::exec::{Node, Request, args, plan};

/// A `count` command's arguments, checked as MongoDB checks them (run and `explain` share it).
pub(crate) struct CountArgs {
    pub(crate) query: Document,
    pub(crate) skip: u64,
    pub(crate) limit: Option<u64>,
    collation: shoal_query::collation::Collation,
    filter: Filter,
}

pub(crate) fn parse_count(body: &Document) -> ExecResult<CountArgs> {
    args::check_known_fields(body, "count", &["query", "limit", "skip", "hint", "collation", "fields", "let"])?;
    let query = args::opt_document(body, "count", "query")?.cloned().unwrap_or_default();
    let skip = args::opt_non_negative(body, "count", "skip")?.unwrap_or(0) as u64;
    let limit = shoal_query::args::count_limit(body)?;
    let collation = args::collation(body, "count")?;
    args::check_hint(body, "count")?;
    let vars = shoal_query::vars::LetVars::from_command(body, "count")?;
    let filter = Filter::parse(&query)?.with_vars(&vars).with_collation(collation)?;
    Ok(CountArgs { query, skip, limit, collation, filter })
}

pub fn count(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let body = &req.body;
    let coll_name = args::collection_name(body, "count")?;
    let ns = args::namespace(req.db, &coll_name)?;
    let CountArgs { query, skip, limit, collation, filter } = parse_count(body)?;
    if crate::ops::system_profile::is_profile(&coll_name) {
        let n = crate::ops::system_profile::count(node, req.db, &filter, skip, limit)?;
        return Ok(doc! { "n": i32::try_from(n).map(Bson::Int32).unwrap_or(Bson::Int64(n as i64)) });
    }
    let Some(coll) = node.store.collection(&ns.to_string()) else {
        return Ok(doc! { "n": 0_i32 });
    };
    let plan_doc = args::planning_filter(&query, collation);
    let chosen = plan::plan(&coll, &plan_doc, None, body.get("hint"))?;
    let path = chosen.path;
    let filter = if query.is_empty() || plan::path_implies_filter(&path, &plan_doc) { None } else { Some(&filter) };
    let mut seen = 0u64;
    let mut n = 0u64;
    for_each_match(&node.store, None, &coll, &path, filter, req.owned(), chosen.reverse, |_| {
        seen += 1;
        if seen > skip {
            n += 1;
        }
        Ok(if limit.is_some_and(|l| n >= l) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    })?;
    Ok(doc! { "n": i32::try_from(n).map(Bson::Int32).unwrap_or(Bson::Int64(n as i64)) })
}

/// A `distinct` command's arguments: its key, query, collation and filter, checked as MongoDB
/// checks them (run and `explain` share it).
pub(crate) fn parse_distinct(
    body: &Document,
) -> ExecResult<(String, Document, shoal_query::collation::Collation, Filter)> {
    args::check_known_fields(body, "distinct", &["key", "query", "collation", "hint"])?;
    let key = distinct_key(body)?;
    let query = args::opt_document(body, "distinct", "query")?.cloned().unwrap_or_default();
    let collation = args::collation(body, "distinct")?;
    args::check_hint(body, "distinct")?;
    let filter = Filter::parse(&query)?.with_collation(collation)?;
    Ok((key, query, collation, filter))
}

pub fn distinct(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let body = &req.body;
    let coll_name = args::collection_name(body, "distinct")?;
    let ns = args::namespace(req.db, &coll_name)?;
    let (key, query, collation, filter) = parse_distinct(body)?;
    let mut values = Vec::new();
    let mut seen = HashSet::new();
    let mut bytes = 0usize;
    if let Some(coll) = node.store.collection(&ns.to_string()) {
        let path = plan::plan(&coll, &args::planning_filter(&query, collation), None, body.get("hint"))?.path;
        let parts: Vec<&str> = key.split('.').collect();
        for_each_match(&node.store, None, &coll, &path, Some(&filter), req.owned(), false, |m| {
            let mut found = Vec::new();
            collect_path(&Bson::Document(m.doc), &parts, &mut found);
            for v in found {
                // Equal values (1, 1.0, NumberLong(1); "a" and "A" under a case-insensitive
                // collation) are one distinct value, as in MongoDB; the first one seen is kept.
                if seen.insert(shoal_query::keystring::encode(&collation.collate(&v))) {
                    bytes += 16 + bson_len(&v);
                    if bytes > shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES {
                        return Err(ExecError::new(ErrorCode::BSONObjectTooLarge, "distinct too big, 16mb cap"));
                    }
                    values.push(v);
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
    }
    values.sort_by(|a, b| collation.compare(a, b));
    Ok(doc! { "values": values })
}

fn bson_len(v: &Bson) -> usize {
    match v {
        Bson::String(s) => s.len(),
        Bson::Document(d) => d.iter().map(|(k, v)| k.len() + bson_len(v)).sum(),
        Bson::Array(a) => a.iter().map(bson_len).sum(),
        _ => 8,
    }
}

/// Values at a dotted path for `distinct`: arrays on the way are traversed, a terminal array
/// contributes its elements.
fn collect_path(v: &Bson, parts: &[&str], out: &mut Vec<Bson>) {
    match (parts.split_first(), v) {
        (None, Bson::Array(items)) => out.extend(items.iter().cloned()),
        (None, other) => out.push(other.clone()),
        (Some((first, rest)), Bson::Document(d)) => {
            if let Some(child) = d.get(*first) {
                collect_path(child, rest, out);
            }
        }
        (Some((first, rest)), Bson::Array(items)) => {
            if let Ok(i) = first.parse::<usize>()
                && let Some(child) = items.get(i)
            {
                collect_path(child, rest, out);
            }
            for item in items {
                if let Bson::Document(_) = item {
                    collect_path(item, parts, out);
                }
            }
        }
        _ => {}
    }
}

/// `distinct`'s required `key`, a non-empty field path.
fn distinct_key(body: &Document) -> ExecResult<String> {
    match body.get("key") {
        Some(Bson::String(k)) if !k.is_empty() => Ok(k.clone()),
        Some(Bson::String(_)) => Err(ExecError::bad_value("FieldPath cannot be constructed with empty string")),
        Some(other) => Err(args::wrong_type("distinct", "key", other, "string")),
        None => {
            Err(ExecError::new(ErrorCode::Location40414, "BSON field 'distinct.key' is missing but a required field"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_paths_unwind_arrays() {
        let d = Bson::Document(doc! {"a": [{"b": 1}, {"b": [2, 3]}], "c": [4, [5]]});
        let mut out = Vec::new();
        collect_path(&d, &["a", "b"], &mut out);
        assert_eq!(out, vec![Bson::Int32(1), Bson::Int32(2), Bson::Int32(3)]);
        let mut out = Vec::new();
        collect_path(&d, &["c"], &mut out);
        assert_eq!(out, vec![Bson::Int32(4), Bson::Array(vec![Bson::Int32(5)])]);
    }
}
