//! A runner of MongoDB's unified test format (the driver specification tests vendored under
//! `tests/spec/<area>/`), driving a Shoal router through the official Rust driver.
//!
//! ```text
//!   tests/tests/spec_crud.rs ──run_areas──> for each file: schemaVersion, runOnRequirements
//!        └─ for each test: skip list? ──runner::run_test── initialData, createEntities,
//!             operations (operations, bulk), expectError (errors), expectEvents, outcome
//!                                           └── matching: the format's matching rules
//! ```
//!
//! Modules: [`requirements`] (schema version and `runOnRequirements`), [`entities`] (clients with
//! command monitoring, databases, collections), [`operations`] (the CRUD, index and collection
//! operations), [`bulk`] (collection-level `bulkWrite`, which the Rust driver lacks), [`errors`]
//! (`expectError`), [`matching`] (Evaluating Matches), [`runner`] (one test), [`skips`] (the
//! checked-in list of skipped tests and the summary).

pub mod bulk;
pub mod entities;
pub mod errors;
pub mod matching;
pub mod operations;
pub mod requirements;
pub mod runner;
pub mod skips;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::{Bson, Document};

use crate::unified::requirements::Server;
use crate::unified::skips::{Outcome, Record, Skips};

/// One test taking longer than this fails (the rest still run).
pub const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `tests/spec`, where the vendored files and `skips.txt` are.
pub fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("spec")
}

/// Reads a JSON test file as BSON (its extended JSON decoded).
pub fn load(path: &Path) -> Result<Document, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    match Bson::try_from(json) {
        Ok(Bson::Document(d)) => Ok(d),
        Ok(_) => Err(format!("{}: not a document", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The JSON files of `area`, sorted; `filter` (a substring of `area/file`) narrows them.
pub fn files(area: &str, filter: Option<&str>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(spec_dir().join(area))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.retain(|p| filter.is_none_or(|f| format!("{area}/{}", file_name(p)).contains(f)));
    files.sort();
    files
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Runs every test of every file of `areas` against the router at `router`, one at a time.
pub async fn run_areas(areas: &[&str], router: &str, skips: &Skips, filter: Option<&str>) -> Vec<Record> {
    let internal = entities::internal_client(router).await.expect("the runner's client");
    let build = internal.database("admin").run_command(bson::doc! { "buildInfo": 1 }).await.expect("buildInfo");
    let server = Server {
        version: requirements::parse_version(build.get_str("version").unwrap_or("0")),
        auth: crate::security::enabled(),
    };
    let mut records = Vec::new();
    for area in areas {
        for path in files(area, filter) {
            let file = format!("{area}/{}", file_name(&path));
            records.extend(run_file(&internal, router, &server, skips, &file, &path).await);
        }
    }
    records
}

async fn run_file(
    internal: &mongodb::Client,
    router: &str,
    server: &Server,
    skips: &Skips,
    file: &str,
    path: &Path,
) -> Vec<Record> {
    let record = |test: &str, outcome| Record { file: file.to_owned(), test: test.to_owned(), outcome };
    let doc = match load(path) {
        Ok(d) => d,
        Err(e) => return vec![record("*", Outcome::Fail(e))],
    };
    if let Err(e) = requirements::check_schema(doc.get_str("schemaVersion").unwrap_or("?")) {
        return vec![record("*", Outcome::Fail(e))];
    }
    let file_gate = requirements::unmet(doc.get("runOnRequirements"), server);
    let ctx = runner::Ctx { internal, router: router.to_owned(), file: &doc };
    let mut out = Vec::new();
    for test in doc.get_array("tests").map(Vec::as_slice).unwrap_or_default() {
        let Some(test) = test.as_document() else { continue };
        let desc = test.get_str("description").unwrap_or("?");
        let gate = file_gate
            .clone()
            .or_else(|| requirements::unmet(test.get("runOnRequirements"), server))
            .or_else(|| test.get_str("skipReason").ok().map(|r| format!("skipReason: {r}")));
        if let Some(g) = gate {
            out.push(record(desc, Outcome::Gated(g)));
            continue;
        }
        let result = match tokio::time::timeout(TEST_TIMEOUT, runner::run_test(&ctx, test)).await {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {TEST_TIMEOUT:?}")),
        };
        let outcome = match (result, skips.reason(file, desc)) {
            (Ok(()), None) => Outcome::Pass,
            (Err(e), None) => Outcome::Fail(e),
            (Err(e), Some(r)) => Outcome::Skip { reason: r.to_owned(), error: e },
            (Ok(()), Some(r)) => Outcome::Fail(format!("listed as skipped ({r}) but passes: remove it from skips.txt")),
        };
        out.push(record(desc, outcome));
    }
    out
}
