//! YCSB workload properties: Java-properties files (`-P`), `-p key=value` overrides, and their
//! validation into a typed [`Workload`].
//!
//! Only CoreWorkload is supported. A property this module does not know is an error, not ignored:
//! a mistyped `readproportoin=0.9` would otherwise silently run a different benchmark.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum PropsError {
    #[error("cannot read workload file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{origin}: line {line}: expected `key=value`, found {text:?}")]
    Syntax { origin: String, line: usize, text: String },
    #[error("-p {0:?}: expected key=value")]
    Override(String),
    #[error("unknown workload property `{0}` (see bench/workloads/README.md for the supported ones)")]
    Unknown(String),
    #[error("property `{key}`: {message} (got {value:?})")]
    Invalid { key: String, value: String, message: String },
}

/// Every property a CoreWorkload run reads, plus the ones YCSB's launcher and the MongoDB/JDBC
/// bindings take (accepted so that YCSB's own files load; the binding's URL comes from `--uri`).
const KNOWN: &[&str] = &[
    "workload",
    "db",
    "table",
    "recordcount",
    "operationcount",
    "insertstart",
    "insertcount",
    "threadcount",
    "target",
    "maxexecutiontime",
    "fieldcount",
    "fieldlength",
    "minfieldlength",
    "fieldlengthdistribution",
    "fieldnameprefix",
    "readallfields",
    "writeallfields",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "requestdistribution",
    "minscanlength",
    "maxscanlength",
    "scanlengthdistribution",
    "insertorder",
    "zeropadding",
    "core_workload_insertion_retry_limit",
    "core_workload_insertion_retry_interval",
    "measurementtype",
    "hdrhistogram.percentiles",
    "status.interval",
    "dataintegrity",
    "mongodb.url",
    "db.url",
];

/// Properties in the order of precedence YCSB uses: later files and `-p` overrides win.
#[derive(Debug, Clone, Default)]
pub struct Properties {
    values: BTreeMap<String, String>,
}

impl Properties {
    pub fn load_file(&mut self, path: &Path) -> Result<(), PropsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| PropsError::Read { path: path.display().to_string(), source })?;
        self.load_str(&path.display().to_string(), &text)
    }

    /// Java-properties syntax as YCSB's files use it: `key=value`, `key: value` or `key value`;
    /// `#` and `!` start comment lines; surrounding whitespace is trimmed.
    pub fn load_str(&mut self, origin: &str, text: &str) -> Result<(), PropsError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            // The key ends at the first `=`, `:` or blank; `key = value` has both a blank and `=`.
            let Some(at) = line.find(|c: char| c == '=' || c == ':' || c.is_whitespace()) else {
                return Err(PropsError::Syntax { origin: origin.into(), line: i + 1, text: raw.into() });
            };
            let rest = line[at..].trim_start();
            let value = rest.strip_prefix(['=', ':']).unwrap_or(rest).trim();
            self.set(&line[..at], value)?;
        }
        Ok(())
    }

    /// One `-p key=value`.
    pub fn set_override(&mut self, kv: &str) -> Result<(), PropsError> {
        let (k, v) = kv.split_once('=').ok_or_else(|| PropsError::Override(kv.into()))?;
        self.set(k.trim(), v.trim())
    }

    pub fn set(&mut self, key: &str, value: &str) -> Result<(), PropsError> {
        if !KNOWN.contains(&key) {
            return Err(PropsError::Unknown(key.into()));
        }
        self.values.insert(key.into(), value.into());
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    fn invalid(key: &str, value: &str, message: impl Into<String>) -> PropsError {
        PropsError::Invalid { key: key.into(), value: value.into(), message: message.into() }
    }

    fn parse<T: std::str::FromStr>(&self, key: &str, default: T, what: &str) -> Result<T, PropsError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| Self::invalid(key, v, format!("expected {what}"))),
        }
    }

    fn proportion(&self, key: &str, default: f64) -> Result<f64, PropsError> {
        let p: f64 = self.parse(key, default, "a number between 0 and 1")?;
        if !(0.0..=1.0).contains(&p) {
            return Err(Self::invalid(key, self.get(key).unwrap_or_default(), "expected a number between 0 and 1"));
        }
        Ok(p)
    }

    fn choice<'a>(&self, key: &str, default: &'a str, allowed: &[&'a str]) -> Result<&'a str, PropsError> {
        let v = self.get(key).unwrap_or(default);
        allowed
            .iter()
            .find(|a| **a == v)
            .copied()
            .ok_or_else(|| Self::invalid(key, v, format!("supported values: {}", allowed.join(", "))))
    }
}

/// The latency percentiles every report carries (`hdrhistogram.percentiles` picks among them).
pub const REPORTED_PERCENTILES: [f64; 4] = [50.0, 95.0, 99.0, 99.9];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    Zipfian,
    Latest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthDistribution {
    Constant,
    Uniform,
}

/// A validated CoreWorkload configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub table: String,
    pub record_count: u64,
    pub operation_count: u64,
    pub insert_start: u64,
    pub insert_count: u64,
    pub thread_count: usize,
    /// Operations per second over all threads; `None` runs flat out.
    pub target: Option<f64>,
    pub max_execution_time: Option<Duration>,
    pub field_count: usize,
    pub field_length: usize,
    pub min_field_length: usize,
    pub field_length_distribution: LengthDistribution,
    pub field_prefix: String,
    pub read_all_fields: bool,
    pub write_all_fields: bool,
    pub read_proportion: f64,
    pub update_proportion: f64,
    pub insert_proportion: f64,
    pub scan_proportion: f64,
    pub rmw_proportion: f64,
    pub request_distribution: Distribution,
    pub min_scan_length: usize,
    pub max_scan_length: usize,
    pub scan_length_distribution: Distribution,
    pub ordered_inserts: bool,
    pub zero_padding: usize,
    pub insertion_retry_limit: u32,
    pub insertion_retry_interval: Duration,
    /// Percentiles printed in the YCSB text report (`hdrhistogram.percentiles`, default 95,99).
    pub percentiles: Vec<f64>,
}

impl Workload {
    /// Validates `props`; `run_phase` says whether operation proportions matter.
    pub fn from_properties(props: &Properties, run_phase: bool) -> Result<Self, PropsError> {
        if let Some(w) = props.get("workload")
            && !w.ends_with(".CoreWorkload")
        {
            return Err(Properties::invalid("workload", w, "only CoreWorkload is supported"));
        }
        if let Some(v) = props.get("dataintegrity")
            && v != "false"
        {
            return Err(Properties::invalid("dataintegrity", v, "read verification is not supported; use false"));
        }
        let table = props.get("table").unwrap_or("usertable").to_string();
        if table.is_empty() || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Properties::invalid("table", &table, "expected letters, digits and underscores"));
        }
        let record_count: u64 = props.parse("recordcount", 1000, "a whole number")?;
        if record_count == 0 {
            return Err(Properties::invalid("recordcount", "0", "at least one record is needed"));
        }
        let insert_start: u64 = props.parse("insertstart", 0, "a whole number")?;
        if insert_start >= record_count {
            return Err(Properties::invalid("insertstart", &insert_start.to_string(), "must be below recordcount"));
        }
        let insert_count: u64 = props.parse("insertcount", record_count - insert_start, "a whole number")?;
        let operation_count: u64 = props.parse("operationcount", 1000, "a whole number")?;
        let thread_count: usize = props.parse("threadcount", 1, "a whole number")?;
        if !(1..=4096).contains(&thread_count) {
            return Err(Properties::invalid("threadcount", &thread_count.to_string(), "expected 1..=4096"));
        }
        let target: f64 = props.parse("target", 0.0, "operations per second")?;
        if !(target.is_finite() && target >= 0.0) {
            return Err(Properties::invalid("target", &target.to_string(), "expected operations per second"));
        }
        let max_secs: u64 = props.parse("maxexecutiontime", 0, "seconds")?;
        let field_count: usize = props.parse("fieldcount", 10, "a whole number")?;
        let field_length: usize = props.parse("fieldlength", 100, "a whole number")?;
        let min_field_length: usize = props.parse("minfieldlength", 1, "a whole number")?;
        if field_count == 0 || field_count > 10_000 {
            return Err(Properties::invalid("fieldcount", &field_count.to_string(), "expected 1..=10000"));
        }
        if field_length == 0 || field_length > 1 << 20 {
            return Err(Properties::invalid("fieldlength", &field_length.to_string(), "expected 1..=1048576"));
        }
        let field_length_distribution =
            match props.choice("fieldlengthdistribution", "constant", &["constant", "uniform"])? {
                "uniform" => LengthDistribution::Uniform,
                _ => LengthDistribution::Constant,
            };
        if field_length_distribution == LengthDistribution::Uniform && min_field_length > field_length {
            return Err(Properties::invalid("minfieldlength", &min_field_length.to_string(), "exceeds fieldlength"));
        }
        let bool_prop = |key: &str, default: bool| props.parse(key, default, "true or false");
        let (read, update, insert, scan, rmw) = (
            props.proportion("readproportion", 0.95)?,
            props.proportion("updateproportion", 0.05)?,
            props.proportion("insertproportion", 0.0)?,
            props.proportion("scanproportion", 0.0)?,
            props.proportion("readmodifywriteproportion", 0.0)?,
        );
        if run_phase && read + update + insert + scan + rmw <= 0.0 {
            return Err(Properties::invalid("readproportion", "0", "all operation proportions are zero"));
        }
        let request_distribution =
            match props.choice("requestdistribution", "uniform", &["uniform", "zipfian", "latest"])? {
                "zipfian" => Distribution::Zipfian,
                "latest" => Distribution::Latest,
                _ => Distribution::Uniform,
            };
        let scan_length_distribution =
            match props.choice("scanlengthdistribution", "uniform", &["uniform", "zipfian"])? {
                "zipfian" => Distribution::Zipfian,
                _ => Distribution::Uniform,
            };
        let min_scan_length: usize = props.parse("minscanlength", 1, "a whole number")?;
        let max_scan_length: usize = props.parse("maxscanlength", 1000, "a whole number")?;
        if min_scan_length == 0 || min_scan_length > max_scan_length {
            return Err(Properties::invalid(
                "maxscanlength",
                &max_scan_length.to_string(),
                format!("need 1 <= minscanlength ({min_scan_length}) <= maxscanlength"),
            ));
        }
        let ordered_inserts = props.choice("insertorder", "hashed", &["hashed", "ordered"])? == "ordered";
        props.choice("measurementtype", "hdrhistogram", &["hdrhistogram", "histogram", "timeseries", "raw"])?;
        let percentiles = match props.get("hdrhistogram.percentiles") {
            None => vec![95.0, 99.0],
            Some(list) => list
                .split(',')
                .map(|p| p.trim().parse::<f64>().ok().filter(|p| REPORTED_PERCENTILES.contains(p)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Properties::invalid("hdrhistogram.percentiles", list, "supported: 50, 95, 99, 99.9"))?,
        };
        Ok(Self {
            table,
            record_count,
            operation_count,
            insert_start,
            insert_count,
            thread_count,
            target: (target > 0.0).then_some(target),
            max_execution_time: (max_secs > 0).then(|| Duration::from_secs(max_secs)),
            field_count,
            field_length,
            min_field_length,
            field_length_distribution,
            field_prefix: props.get("fieldnameprefix").unwrap_or("field").to_string(),
            read_all_fields: bool_prop("readallfields", true)?,
            write_all_fields: bool_prop("writeallfields", false)?,
            read_proportion: read,
            update_proportion: update,
            insert_proportion: insert,
            scan_proportion: scan,
            rmw_proportion: rmw,
            request_distribution,
            min_scan_length,
            max_scan_length,
            scan_length_distribution,
            ordered_inserts,
            zero_padding: props.parse("zeropadding", 1, "a whole number")?,
            insertion_retry_limit: props.parse("core_workload_insertion_retry_limit", 0, "a whole number")?,
            insertion_retry_interval: Duration::from_secs(props.parse(
                "core_workload_insertion_retry_interval",
                3,
                "seconds",
            )?),
            percentiles,
        })
    }

    /// Payload bytes of one record (`fieldcount` × `fieldlength`).
    pub fn record_bytes(&self) -> usize {
        self.field_count * self.field_length
    }

    pub fn field_names(&self) -> Vec<String> {
        (0..self.field_count).map(|i| format!("{}{i}", self.field_prefix)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(text: &str) -> Result<Properties, PropsError> {
        let mut p = Properties::default();
        p.load_str("test", text)?;
        Ok(p)
    }

    #[test]
    fn parses_ycsb_file_syntax_and_overrides() -> Result<(), PropsError> {
        let mut p = props("# comment\n! also\nrecordcount=500\noperationcount : 20\nreadproportion 0.5\n\n")?;
        p.set_override("threadcount=8")?;
        p.set_override("recordcount = 700")?;
        let w = Workload::from_properties(&p, true)?;
        assert_eq!((w.record_count, w.operation_count, w.thread_count), (700, 20, 8));
        assert_eq!(w.read_proportion, 0.5);
        assert_eq!(w.insert_count, 700);
        assert_eq!(w.field_names()[9], "field9");
        assert_eq!(w.record_bytes(), 1000);
        Ok(())
    }

    #[test]
    fn shipped_workloads_load() -> Result<(), PropsError> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        for name in ["workloada", "workloadb", "workloadc", "workloadd", "workloade", "workloadf"] {
            let mut p = Properties::default();
            p.load_file(&dir.join(name))?;
            Workload::from_properties(&p, true)?;
        }
        Ok(())
    }

    #[test]
    fn bad_input_is_refused_with_the_property_named() {
        let unknown = props("readproportoin=0.9").map(|_| ()).map_err(|e| e.to_string());
        assert!(unknown.is_err_and(|e| e.contains("readproportoin")));
        for bad in [
            "recordcount=0",
            "recordcount=-1",
            "readproportion=1.5",
            "threadcount=0",
            "requestdistribution=hotspot",
            "workload=site.ycsb.workloads.RestWorkload",
            "minscanlength=10\nmaxscanlength=5",
            "table=user table",
            "readproportion=0\nupdateproportion=0",
            "hdrhistogram.percentiles=95,x",
        ] {
            let result = props(bad).and_then(|p| Workload::from_properties(&p, true));
            assert!(result.is_err(), "{bad} accepted");
        }
        assert!(props("novalue").is_err());
        let mut p = Properties::default();
        assert!(p.set_override("nokey").is_err());
    }
}
