//! Each stage of an explained plan with what it did when run: MongoDB's `nReturned`,
//! `executionTimeMillisEstimate` (a stage's own time plus its input's), `works`, `advanced`,
//! `needTime`, `isEOF`, and per kind `keysExamined`, `docsExamined`, `usedDisk`.
//!
//! Shoal runs a plan as one loop (scan, fetch and filter fused; then sort, skip, limit and
//! projection), so the leaf and its FETCH share the scan's time, and `works` counts one unit per
//! key or document a stage took in, plus the one that reports end of input.
//!
//! Must not: run anything; it only writes down what [`super::explain`] measured.

use std::time::Duration;

use bson::{Bson, Document};

/// What one explained run did.
#[derive(Default, Debug)]
pub struct Run {
    pub keys: u64,
    pub docs: u64,
    /// Documents the scan (and filter) produced.
    pub matched: u64,
    /// Documents the top stage returned.
    pub returned: u64,
    pub skip: u64,
    pub limit: Option<u64>,
    /// The scan stopped at `skip + limit` instead of reaching the end of its range.
    pub stopped_early: bool,
    pub scanning: Duration,
    /// Time in an in-memory sort, when the plan has one.
    pub sorting: Option<Duration>,
    pub projecting: Duration,
}

impl Run {
    /// Documents the SORT stage returns: its top `skip + limit`, or everything.
    fn sorted(&self) -> u64 {
        self.limit.map_or(self.matched, |l| self.matched.min(l + self.skip))
    }
}

/// Adds each stage's execution fields to `stage` and its `inputStage` chain, leaf first.
pub fn annotate(stage: &mut Document, run: &Run) -> (u64, Duration) {
    let (input, below) = match stage.get_mut("inputStage") {
        Some(Bson::Document(child)) => annotate(child, run),
        _ => (0, Duration::ZERO),
    };
    let name = stage.get_str("stage").unwrap_or_default().to_string();
    let leaf_eof = !run.stopped_early;
    let (returned, took_in, own, eof) = match name.as_str() {
        "IXSCAN" => {
            stage.insert("keysExamined", run.keys as i64);
            stage.insert("dupsTested", 0_i64);
            stage.insert("dupsDropped", 0_i64);
            // Under a FETCH every key in bounds is fetched; a covered scan applies the filter.
            let fetched = if run.docs > 0 { run.docs } else { run.matched };
            (fetched, run.keys, run.scanning, leaf_eof)
        }
        "COLLSCAN" | "CLUSTERED_IXSCAN" => {
            stage.insert("docsExamined", run.docs as i64);
            (run.matched, run.docs, run.scanning, leaf_eof)
        }
        "IDHACK" => {
            stage.insert("keysExamined", run.keys as i64);
            stage.insert("docsExamined", run.docs as i64);
            (run.matched, run.docs, run.scanning, true)
        }
        "FETCH" => {
            stage.insert("docsExamined", run.docs as i64);
            stage.insert("alreadyHasObj", 0_i64);
            (run.matched, input, Duration::ZERO, leaf_eof)
        }
        "SORT" => {
            stage.insert("usedDisk", false);
            stage.insert("spills", 0_i64);
            (run.sorted(), input, run.sorting.unwrap_or_default(), true)
        }
        "SKIP" => (input.saturating_sub(run.skip), input, Duration::ZERO, true),
        "LIMIT" => (input.min(run.limit.unwrap_or(u64::MAX)), input, Duration::ZERO, true),
        _ if name.starts_with("PROJECTION") => (input, input, run.projecting, true),
        _ => (input, input, Duration::ZERO, true),
    };
    let time = below + own;
    let works = took_in + 1;
    stage.insert("nReturned", returned as i64);
    stage.insert("executionTimeMillisEstimate", time.as_millis() as i64);
    stage.insert("works", works as i64);
    stage.insert("advanced", returned as i64);
    stage.insert("needTime", works.saturating_sub(returned + 1) as i64);
    stage.insert("needYield", 0_i64);
    stage.insert("saveState", 0_i64);
    stage.insert("restoreState", 0_i64);
    stage.insert("isEOF", i32::from(eof));
    // MongoDB lists a stage's own fields first and its input last.
    if let Some(input) = stage.remove("inputStage") {
        stage.insert("inputStage", input);
    }
    (returned, time)
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn int(d: &Document, f: &str) -> i64 {
        d.get_i64(f).unwrap_or_else(|_| panic!("{f} in {d}"))
    }

    #[test]
    fn a_sorted_limited_index_fetch_counts_every_stage() {
        let mut plan = doc! { "stage": "PROJECTION_SIMPLE", "inputStage": { "stage": "LIMIT", "limitAmount": 2_i64,
        "inputStage": { "stage": "SKIP", "inputStage": { "stage": "SORT", "inputStage": { "stage": "FETCH",
        "inputStage": { "stage": "IXSCAN" } } } } } };
        let run = Run {
            keys: 10,
            docs: 10,
            matched: 6,
            returned: 2,
            skip: 1,
            limit: Some(2),
            scanning: Duration::from_millis(7),
            sorting: Some(Duration::from_millis(3)),
            projecting: Duration::from_millis(1),
            ..Default::default()
        };
        annotate(&mut plan, &run);
        let limit = plan.get_document("inputStage").unwrap();
        let skip = limit.get_document("inputStage").unwrap();
        let sort = skip.get_document("inputStage").unwrap();
        let fetch = sort.get_document("inputStage").unwrap();
        let ixscan = fetch.get_document("inputStage").unwrap();
        assert_eq!((int(ixscan, "keysExamined"), int(ixscan, "nReturned"), int(ixscan, "works")), (10, 10, 11));
        assert_eq!((int(fetch, "docsExamined"), int(fetch, "nReturned"), int(fetch, "needTime")), (10, 6, 4));
        assert_eq!((int(sort, "nReturned"), int(skip, "nReturned"), int(limit, "nReturned")), (3, 2, 2));
        assert_eq!(int(&plan, "nReturned"), 2);
        // Times add up the chain: 7 ms scanning, 3 sorting, 1 projecting.
        assert_eq!(int(ixscan, "executionTimeMillisEstimate"), 7);
        assert_eq!(int(fetch, "executionTimeMillisEstimate"), 7);
        assert_eq!(int(sort, "executionTimeMillisEstimate"), 10);
        assert_eq!(int(&plan, "executionTimeMillisEstimate"), 11);
        assert!(!sort.get_bool("usedDisk").unwrap());
        assert_eq!(plan.get_i32("isEOF").unwrap(), 1);
        assert_eq!(plan.keys().last().map(String::as_str), Some("inputStage"), "the input comes last");
    }

    #[test]
    fn a_scan_stopped_by_its_limit_is_not_at_its_end() {
        let mut plan = doc! { "stage": "LIMIT", "inputStage": { "stage": "COLLSCAN" } };
        let run = Run { docs: 5, matched: 5, returned: 5, limit: Some(5), stopped_early: true, ..Default::default() };
        annotate(&mut plan, &run);
        let scan = plan.get_document("inputStage").unwrap();
        assert_eq!((int(scan, "docsExamined"), int(scan, "nReturned")), (5, 5));
        assert_eq!((scan.get_i32("isEOF").unwrap(), plan.get_i32("isEOF").unwrap()), (0, 1));
    }
}
