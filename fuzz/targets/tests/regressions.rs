//! Every input in `fuzz/corpus/<target>/` (the seeds each campaign starts from) and every crash a
//! campaign ever found (`fuzz/regressions/<target>/`, one file each, named for what it broke) runs
//! through its target on every test run: a fixed crash stays fixed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test: a panic is the failure report")]

use std::path::Path;

#[test]
fn every_corpus_and_regression_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut ran = 0;
    for (name, target) in shoal_fuzz_targets::TARGETS {
        for kind in ["corpus", "regressions"] {
            let dir = root.join(kind).join(name);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name} panics on {}", path.display());
                ran += 1;
            }
        }
    }
    assert!(ran >= shoal_fuzz_targets::TARGETS.len(), "the corpus is missing: only {ran} inputs ran");
}
