//! The Grafana dashboard (`deploy/grafana/shoal.json`) against the code: every metric name a
//! panel's query or a template variable reads is one a server registers (the names scanned from the
//! registration calls in `router/src`, `shard/src`, `configsvr/src` and `telemetry/src`, each
//! with the `shoal_` prefix, histograms as their `_bucket`/`_sum`/`_count` series, and the
//! process collector's `process_*`), and the JSON is a dashboard Grafana imports as meant: unique
//! panel ids on a grid of 24 columns without overlaps, every panel and query on the
//! `${DS_PROMETHEUS}` data-source variable, every panel with queries, and only defined variables
//! in them. tests/tests/metrics.rs checks the same names against what a real Prometheus scraped.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The registration methods of `shoal_telemetry::Metrics` whose first argument is a name.
const PLAIN: [&str; 6] = ["counter", "counter_vec", "gauge", "gauge_vec", "pulled", "pulled_vec"];
const HISTOGRAMS: [&str; 2] = ["latency", "latency_vec"];
/// What the prometheus crate's process collector exports (telemetry registers it in every registry).
const PROCESS: [&str; 8] = [
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_threads",
];
/// Variables Grafana defines itself.
const BUILTIN_VARIABLES: [&str; 4] = ["__rate_interval", "__interval", "__range", "__range_s"];
const DATASOURCE: &str = "${DS_PROMETHEUS}";
const ROWS: [&str; 6] = ["Overview", "Router", "Shards", "Config servers", "Balancer", "Processes"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("deploy/ is in the workspace").to_owned()
}

fn dashboard() -> Value {
    let path = workspace().join("deploy/grafana/shoal.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The string literal opening `text` (after blanks), if it is one.
fn leading_literal(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('"')?;
    rest.split_once('"').map(|(literal, _)| literal)
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Every series name the servers' code registers, scanned from their sources (tests left out).
fn registered() -> BTreeSet<String> {
    let root = workspace();
    let mut files = Vec::new();
    for dir in ["router/src", "shard/src", "configsvr/src", "telemetry/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut names = BTreeSet::new();
    for file in files {
        if file.file_name().is_some_and(|n| n.to_string_lossy().ends_with("_tests.rs")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("source file");
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (methods, histogram) in [(&PLAIN[..], false), (&HISTOGRAMS[..], true)] {
            for method in methods {
                for (at, _) in text.match_indices(&format!(".{method}(")) {
                    let Some(name) = leading_literal(&text[at + method.len() + 2..]).filter(|n| is_name(n)) else {
                        continue;
                    };
                    if histogram {
                        names.extend(["_bucket", "_sum", "_count"].map(|s| format!("shoal_{name}{s}")));
                    } else {
                        names.insert(format!("shoal_{name}"));
                    }
                }
            }
        }
        // A metric built outside the registry: `format!("{}name", shoal_telemetry::PREFIX)`.
        for (at, _) in text.match_indices("\"{}") {
            let rest = &text[at + 3..];
            if let Some((name, after)) = rest.split_once('"')
                && is_name(name)
                && after.trim_start().strip_prefix(',').is_some_and(|a| {
                    let a = a.trim_start();
                    a.starts_with("shoal_telemetry::PREFIX") || a.starts_with("PREFIX")
                })
            {
                names.insert(format!("shoal_{name}"));
            }
        }
        if text.contains("ProcessCollector") {
            names.extend(PROCESS.map(str::to_owned));
        }
    }
    names
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// The metric names an expression reads: identifiers starting `shoal_` or `process_`.
fn names_in(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("shoal_") || w.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// Every query of the dashboard: (where, expression), panels' targets and template variables.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default().to_owned();
            out.push((format!("panel {:?}", panel["title"].as_str().unwrap_or_default()), expr));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().or_else(|| variable["query"].as_str());
            out.push((format!("variable {}", variable["name"]), query.expect("a variable's query").to_owned()));
        }
    }
    out
}

/// The `$name` / `${name}` variables an expression uses.
fn variables_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in expr.split('$').skip(1) {
        let part = part.strip_prefix('{').unwrap_or(part);
        let name: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        out.push(name);
    }
    out
}

#[test]
fn every_metric_the_dashboard_reads_is_registered_by_a_server() {
    let registered = registered();
    // The scan found the registrations at all (one of each kind, and the process collector).
    for name in ["shoal_opcounters_total", "shoal_repl_lag_seconds", "shoal_raft_term", "process_open_fds"] {
        assert!(registered.contains(name), "the source scan misses {name}: {registered:?}");
    }
    assert!(registered.contains("shoal_command_duration_seconds_bucket"), "{registered:?}");
    assert!(registered.contains("shoal_storage_journal_syncs_total"), "{registered:?}");

    let mut unknown: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut used = BTreeSet::new();
    for (place, expr) in queries(&dashboard()) {
        for name in names_in(&expr) {
            if !registered.contains(&name) {
                unknown.entry(name.clone()).or_default().push(place.clone());
            }
            used.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "the dashboard reads metrics no server registers (or a histogram without _bucket/_sum/_count): {unknown:#?}"
    );
    assert!(used.len() >= 50, "the dashboard reads only {} metrics: {used:?}", used.len());
}

#[test]
fn the_dashboard_is_well_formed_for_grafana() {
    let dashboard = dashboard();
    assert_eq!(dashboard["schemaVersion"], 39);
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let variables = dashboard["templating"]["list"].as_array().expect("templating");
    let by_name: BTreeMap<&str, &Value> = variables.iter().map(|v| (v["name"].as_str().expect("name"), v)).collect();
    let source = by_name.get("DS_PROMETHEUS").expect("a data-source variable");
    assert_eq!((source["type"].as_str(), source["query"].as_str()), (Some("datasource"), Some("prometheus")));
    for name in ["cluster", "shard"] {
        let variable = by_name.get(name).unwrap_or_else(|| panic!("no {name} variable"));
        assert_eq!(variable["type"], "query", "{name}");
        assert_eq!(variable["datasource"]["uid"], DATASOURCE, "{name}");
    }
    assert!(by_name["cluster"]["query"]["query"].as_str().expect("query").ends_with(", cluster)"));
    assert!(by_name["shard"]["query"]["query"].as_str().expect("query").ends_with(", shard)"));

    let panels = panels(&dashboard);
    let mut ids = BTreeSet::new();
    let mut rows = Vec::new();
    let mut cells: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for panel in &panels {
        let id = panel["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} repeats");
        let title = panel["title"].as_str().expect("a title");
        let grid = &panel["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| grid[k].as_u64().unwrap_or_else(|| panic!("{title}: {k}")));
        assert!(w >= 1 && h >= 1 && x + w <= 24, "{title}: {grid}");
        for cell in (x..x + w).flat_map(|cx| (y..y + h).map(move |cy| (cx, cy))) {
            if let Some(other) = cells.insert(cell, id) {
                panic!("panels {other} and {id} ({title}) overlap at {cell:?}");
            }
        }
        if panel["type"] == "row" {
            rows.push(title);
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], DATASOURCE, "{title}");
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.unwrap_or_else(|| panic!("{title} has no targets"));
        let mut refs = BTreeSet::new();
        for target in targets {
            assert_eq!(target["datasource"]["uid"], DATASOURCE, "{title}");
            assert!(refs.insert(target["refId"].as_str().expect("refId")), "{title}: a refId repeats");
            let expr = target["expr"].as_str().filter(|e| !e.trim().is_empty());
            let expr = expr.unwrap_or_else(|| panic!("{title}: a target without expr"));
            for variable in variables_in(expr) {
                assert!(
                    by_name.contains_key(variable.as_str()) || BUILTIN_VARIABLES.contains(&variable.as_str()),
                    "{title}: ${variable} is not a variable of the dashboard: {expr}"
                );
            }
            assert!(expr.contains("$cluster"), "{title}: every query is of the chosen cluster: {expr}");
        }
    }
    assert_eq!(rows, ROWS);
}
