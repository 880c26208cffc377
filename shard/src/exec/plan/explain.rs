//! A chosen [`Plan`] as explain's stage tree, in MongoDB's vocabulary: `COLLSCAN`, `IDHACK`
//! (an `_id` point), `CLUSTERED_IXSCAN` (an `_id` range: documents are clustered by `_id`),
//! `IXSCAN` under `FETCH`, then `SORT` (in memory, when no index gave the order), `SKIP`,
//! `LIMIT` and `PROJECTION_SIMPLE` as the query asks.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::ops::Bound;

use bson::{Bson, Document, doc};

use super::{AccessPath, IndexScan, Plan};
use crate::store::indexes::IndexSpec;

/// The query around the access path.
#[derive(Default)]
pub struct Shape<'a> {
    pub filter: Option<&'a Document>,
    pub sort: Option<&'a Document>,
    pub projection: Option<&'a Document>,
    pub skip: u64,
    pub limit: Option<u64>,
}

/// The plan in one line, as MongoDB's `planSummary` (currentOp, the profiler, slow-query lines):
/// `IDHACK`, `COLLSCAN`, `CLUSTERED_IXSCAN`, `IXSCAN { a: 1, b: -1 }`.
pub fn summary(plan: &Plan) -> Cow<'static, str> {
    match &plan.path {
        AccessPath::Point(_) => Cow::Borrowed("IDHACK"),
        AccessPath::Range { lower: Bound::Unbounded, upper: Bound::Unbounded } => Cow::Borrowed("COLLSCAN"),
        AccessPath::Range { .. } => Cow::Borrowed("CLUSTERED_IXSCAN"),
        AccessPath::Index(scan) => {
            let mut out = String::from("IXSCAN { ");
            for (i, (field, value)) in scan.spec.key.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let value = match value {
                    Bson::String(s) => format!("\"{s}\""),
                    Bson::Double(f) if f.fract() == 0.0 => format!("{}", *f as i64),
                    other => other.to_string(),
                };
                let _ = write!(out, "{field}: {value}");
            }
            out.push_str(" }");
            Cow::Owned(out)
        }
    }
}

fn direction(reverse: bool) -> &'static str {
    if reverse { "backward" } else { "forward" }
}

fn ixscan(scan: &IndexScan, reverse: bool) -> Document {
    let spec = &scan.spec;
    doc! {
        "stage": "IXSCAN",
        "keyPattern": spec.key.clone(),
        "indexName": &spec.name,
        "isMultiKey": spec.multikey,
        "isUnique": spec.unique,
        "isSparse": spec.sparse,
        "isPartial": spec.partial.is_some(),
        "indexVersion": 2,
        "direction": direction(reverse),
        "indexBounds": scan.shown.clone(),
    }
}

fn with_filter(mut stage: Document, filter: Option<&Document>) -> Document {
    if let Some(f) = filter.filter(|f| !f.is_empty()) {
        stage.insert("filter", f.clone());
    }
    stage
}

pub fn winning_plan(plan: &Plan, shape: &Shape<'_>) -> Document {
    let mut stage = match &plan.path {
        AccessPath::Point(_) => doc! { "stage": "IDHACK" },
        AccessPath::Range { lower, upper } => {
            let full = matches!((lower, upper), (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded));
            let name = if full { "COLLSCAN" } else { "CLUSTERED_IXSCAN" };
            with_filter(doc! { "stage": name, "direction": direction(plan.reverse) }, shape.filter)
        }
        // A covered scan's filter is applied to the rebuilt documents, on the way up.
        AccessPath::Index(scan) if scan.covered => ixscan(scan, plan.reverse),
        AccessPath::Index(scan) => {
            with_filter(doc! { "stage": "FETCH", "inputStage": ixscan(scan, plan.reverse) }, shape.filter)
        }
    };
    if let Some(sort) = shape.sort.filter(|s| !s.is_empty() && !plan.sorted) {
        let mut s =
            doc! { "stage": "SORT", "sortPattern": sort.clone(), "memLimit": 104_857_600_i64, "type": "simple" };
        if let Some(l) = shape.limit {
            s.insert("limitAmount", (l + shape.skip) as i64);
        }
        s.insert("inputStage", stage);
        stage = s;
    }
    if shape.skip > 0 {
        stage = doc! { "stage": "SKIP", "skipAmount": shape.skip as i64, "inputStage": stage };
    }
    if let Some(l) = shape.limit {
        stage = doc! { "stage": "LIMIT", "limitAmount": l as i64, "inputStage": stage };
    }
    if let Some(p) = shape.projection.filter(|p| !p.is_empty()) {
        let covered = matches!(&plan.path, AccessPath::Index(s) if s.covered);
        let name = if covered { "PROJECTION_COVERED" } else { "PROJECTION_SIMPLE" };
        stage = doc! { "stage": name, "transformBy": p.clone(), "inputStage": stage };
    }
    stage
}

/// The indexes that could have served the query, as plans (explain's `rejectedPlans`).
pub fn rejected_plans(rejected: &[std::sync::Arc<IndexSpec>]) -> Vec<Bson> {
    rejected
        .iter()
        .map(|spec| {
            Bson::Document(doc! { "stage": "FETCH", "inputStage": {
                "stage": "IXSCAN", "keyPattern": spec.key.clone(), "indexName": &spec.name,
            } })
        })
        .collect()
}
