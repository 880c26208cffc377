//! The checked-in list of tests the suite skips (`tests/spec/skips.txt`), each with its reason,
//! the outcome of each test and the summary table.
//!
//! A line of `skips.txt` is `<area>/<file> :: <test description> :: <reason>`, or
//! `<area>/<file> :: * :: <reason>` for every test of a file; `#` starts a comment. A listed test
//! still runs: if it passes, that is a failure (the list only shrinks).

use std::collections::{BTreeMap, HashMap};

pub struct Skips {
    entries: HashMap<(String, String), String>,
}

impl Skips {
    pub fn parse(text: &str) -> Result<Skips, String> {
        let mut entries = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let parts: Vec<&str> = line.splitn(3, " :: ").map(str::trim).collect();
            let [file, test, reason] = parts[..] else {
                return Err(format!("skips.txt line {}: want `file :: test :: reason`: {line}", n + 1));
            };
            if reason.is_empty() {
                return Err(format!("skips.txt line {}: no reason", n + 1));
            }
            if entries.insert((file.to_owned(), test.to_owned()), reason.to_owned()).is_some() {
                return Err(format!("skips.txt line {}: listed twice", n + 1));
            }
        }
        Ok(Skips { entries })
    }

    pub fn reason(&self, file: &str, test: &str) -> Option<&str> {
        let key = |t: &str| (file.to_owned(), t.to_owned());
        self.entries.get(&key(test)).or_else(|| self.entries.get(&key("*"))).map(String::as_str)
    }

    /// Entries that matched no test that ran (a renamed test, a stale line).
    pub fn unused(&self, records: &[Record]) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .keys()
            .filter(|(f, t)| {
                !records
                    .iter()
                    .any(|r| &r.file == f && (t == "*" || &r.test == t) && matches!(r.outcome, Outcome::Skip { .. }))
            })
            .map(|(f, t)| format!("{f} :: {t}"))
            .collect();
        out.sort();
        out
    }
}

#[derive(Debug)]
pub enum Outcome {
    Pass,
    Fail(String),
    /// Listed in `skips.txt`, and failed (`error`) as expected.
    Skip {
        reason: String,
        error: String,
    },
    /// Not applicable to Shoal: `runOnRequirements` unmet (or the file's own `skipReason`).
    Gated(String),
}

#[derive(Debug)]
pub struct Record {
    pub file: String,
    pub test: String,
    pub outcome: Outcome,
}

#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub gated: usize,
}

impl Counts {
    fn add(&mut self, o: &Outcome) {
        match o {
            Outcome::Pass => self.passed += 1,
            Outcome::Fail(_) => self.failed += 1,
            Outcome::Skip { .. } => self.skipped += 1,
            Outcome::Gated(_) => self.gated += 1,
        }
    }
}

/// Counts per file and per area.
pub fn counts(records: &[Record]) -> (BTreeMap<String, Counts>, BTreeMap<String, Counts>) {
    let mut files: BTreeMap<String, Counts> = BTreeMap::new();
    let mut areas: BTreeMap<String, Counts> = BTreeMap::new();
    for r in records {
        files.entry(r.file.clone()).or_default().add(&r.outcome);
        let area = r.file.split('/').next().unwrap_or_default().to_owned();
        areas.entry(area).or_default().add(&r.outcome);
    }
    (files, areas)
}

/// The table printed at the end of a run: every file, then the areas, then the failures.
pub fn summary(records: &[Record]) -> String {
    let (files, areas) = counts(records);
    let mut out = format!("{:<64} {:>6} {:>6} {:>7} {:>6}\n", "file", "passed", "failed", "skipped", "gated");
    let row = |name: &str, c: &Counts| {
        format!("{name:<64} {:>6} {:>6} {:>7} {:>6}\n", c.passed, c.failed, c.skipped, c.gated)
    };
    for (f, c) in &files {
        out.push_str(&row(f, c));
    }
    out.push('\n');
    for (a, c) in &areas {
        out.push_str(&row(&format!("TOTAL {a}"), c));
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for r in records {
        match &r.outcome {
            Outcome::Skip { reason, .. } => *reasons.entry(format!("skipped: {reason}")).or_default() += 1,
            Outcome::Gated(g) => *reasons.entry(format!("gated: {g}")).or_default() += 1,
            _ => {}
        }
    }
    out.push('\n');
    for (reason, n) in &reasons {
        out.push_str(&format!("{n:>5}  {reason}\n"));
    }
    for r in records {
        if let Outcome::Fail(e) = &r.outcome {
            out.push_str(&format!("\nFAIL {} :: {}\n    {e}\n", r.file, r.test));
        }
    }
    out
}
