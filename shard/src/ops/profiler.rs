//! The database profiler and the slow-operation log, as MongoDB has them.
//!
//! Settings: a level (0 off, 1 slow operations, 2 all) and an optional filter per database, in
//! memory on each member (as MongoDB keeps them); `slowms` (default 100) and `sampleRate`
//! (default 1.0) for the whole process (MongoDB's are global too). Set by the `profile` command
//! ([`Profiler::command`]).
//!
//! When an operation ends ([`Profiler::finished`]): with a filter set on its database, it is
//! logged as slow and (at level 1) profiled when the filter matches its profile document;
//! without one, when it ran longer than `slowms` and was sampled (`sampleRate`). Level 2
//! profiles everything. The slow-query line (`shoal_telemetry::log::slow_query`) is written
//! whatever the level, as MongoDB's is.
//!
//! **Deviation from MongoDB:** `<db>.system.profile` is not a capped collection on disk but a
//! ring in memory per database on each member, [`RING_MAX_BYTES`] of documents (MongoDB's
//! default capped size), oldest dropped first, lost on restart and not replicated (neither is
//! MongoDB's: each member profiles its own operations). Operations on `system.profile` itself
//! are not profiled.
//!
//! Must not: cost an operation that is neither slow nor profiled more than two atomic loads (no
//! lookup, no document) unless a database has a level or a filter set.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;

use super::{Op, Outcome, report};
use crate::error::{ExecError, ExecResult};

/// MongoDB's default `slowms`.
pub const DEFAULT_SLOW_MS: i64 = 100;
/// Documents kept per database's `system.profile` (MongoDB's default capped size, 1 MiB).
pub const RING_MAX_BYTES: usize = 1 << 20;
/// The collection the profiler writes.
pub const PROFILE_COLL: &str = "system.profile";

const FILTER_NOTE: &str =
    "When a filter expression is set, slowms and sampleRate are not used for profiling and slow-query log lines.";

/// A profile filter: as given, and parsed.
pub struct ProfileFilter {
    pub doc: Document,
    filter: Filter,
}

impl ProfileFilter {
    fn matches(&self, profiled: &Document) -> bool {
        if self.filter.can_fail() {
            self.filter.try_matches(profiled).unwrap_or(false)
        } else {
            self.filter.matches(profiled)
        }
    }
}

/// One database's settings.
#[derive(Clone, Default)]
pub struct DbSettings {
    pub level: i32,
    pub filter: Option<Arc<ProfileFilter>>,
}

#[derive(Default)]
struct Ring {
    docs: VecDeque<(Document, usize)>,
    bytes: usize,
}

pub struct Profiler {
    slow_ms: AtomicI64,
    /// `sampleRate` as f64 bits.
    sample_rate: AtomicU64,
    /// Some database has a level or a filter set: only then are settings looked up.
    configured: AtomicBool,
    dbs: Mutex<HashMap<String, DbSettings>>,
    rings: Mutex<HashMap<String, Ring>>,
}

impl Default for Profiler {
    fn default() -> Self {
        Self {
            slow_ms: AtomicI64::new(DEFAULT_SLOW_MS),
            sample_rate: AtomicU64::new(1.0f64.to_bits()),
            configured: AtomicBool::new(false),
            dbs: Mutex::default(),
            rings: Mutex::default(),
        }
    }
}

thread_local! {
    static RANDOM: Cell<u64> = Cell::new({
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (t.as_nanos() as u64) ^ 0x9e37_79b9_7f4a_7c15
    });
}

/// A uniform number in [0, 1) (xorshift64*; sampling needs no more).
fn random_unit() -> f64 {
    RANDOM.with(|s| {
        let mut x = s.get().max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    })
}

impl Profiler {
    pub fn slow_ms(&self) -> i64 {
        self.slow_ms.load(Ordering::Relaxed)
    }

    pub fn sample_rate(&self) -> f64 {
        f64::from_bits(self.sample_rate.load(Ordering::Relaxed))
    }

    fn dbs(&self) -> std::sync::MutexGuard<'_, HashMap<String, DbSettings>> {
        self.dbs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rings(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ring>> {
        self.rings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `db`'s settings (level 0 and no filter unless set).
    pub fn settings(&self, db: &str) -> DbSettings {
        if !self.configured.load(Ordering::Relaxed) {
            return DbSettings::default();
        }
        self.dbs().get(db).cloned().unwrap_or_default()
    }

    fn sampled(&self) -> bool {
        let rate = self.sample_rate();
        rate >= 1.0 || (rate > 0.0 && random_unit() < rate)
    }

    /// An operation ended after `elapsed`: logs it as slow and profiles it as the settings say.
    pub fn finished(&self, op: &Op, outcome: &Outcome, elapsed: Duration) {
        if op.ns.strip_prefix(op.db.as_str()).is_some_and(|c| c.strip_prefix('.') == Some(PROFILE_COLL)) {
            return;
        }
        let settings = self.settings(&op.db);
        let (log, profile, doc) = match &settings.filter {
            Some(filter) => {
                let doc = report::profile_doc(op, outcome, elapsed);
                let matched = filter.matches(&doc);
                (matched, settings.level == 2 || (settings.level == 1 && matched), Some(doc))
            }
            None => {
                let slow = elapsed.as_micros() as i128 > i128::from(self.slow_ms()) * 1000 && self.sampled();
                (slow, settings.level == 2 || (settings.level == 1 && slow), None)
            }
        };
        if log {
            shoal_telemetry::log::slow_query(&op.desc(), report::slow_attr(op, outcome, elapsed));
        }
        if profile {
            self.append(&op.db, doc.unwrap_or_else(|| report::profile_doc(op, outcome, elapsed)));
        }
    }

    /// Adds a document to `db`'s `system.profile`, dropping the oldest past the cap.
    pub fn append(&self, db: &str, doc: Document) {
        let size = doc.to_vec().map_or(0, |b| b.len());
        let mut rings = self.rings();
        if !rings.contains_key(db) {
            rings.insert(db.to_owned(), Ring::default());
        }
        let Some(ring) = rings.get_mut(db) else { return };
        ring.bytes += size;
        ring.docs.push_back((doc, size));
        while ring.bytes > RING_MAX_BYTES
            && let Some((_, dropped)) = ring.docs.pop_front()
        {
            ring.bytes -= dropped;
        }
    }

    /// `db`'s `system.profile`, oldest first (a capped collection's natural order).
    pub fn documents(&self, db: &str) -> Vec<Document> {
        self.rings().get(db).map(|r| r.docs.iter().map(|(d, _)| d.clone()).collect()).unwrap_or_default()
    }

    /// Bytes held in `db`'s `system.profile`.
    pub fn ring_bytes(&self, db: &str) -> usize {
        self.rings().get(db).map_or(0, |r| r.bytes)
    }

    /// `drop` of `<db>.system.profile`: empties it, refused while `db` is profiled (as MongoDB);
    /// whether it held anything.
    pub fn drop_ring(&self, db: &str) -> ExecResult<bool> {
        if self.settings(db).level != 0 {
            return Err(ExecError::new(
                ErrorCode::IllegalOperation,
                "turn off profiling before dropping system.profile collection",
            ));
        }
        Ok(self.rings().remove(db).is_some())
    }

    /// `dropDatabase`: its `system.profile` goes too.
    pub fn forget_database(&self, db: &str) {
        self.rings().remove(db);
    }

    /// `{profile: <-1|0|1|2>, slowms?, sampleRate?, filter?: <doc> | "unset"}` on `db`: sets what
    /// it names (level -1 changes no level) and answers the settings before.
    pub fn command(&self, db: &str, body: &Document) -> ExecResult<Document> {
        let level = match body.get("profile") {
            Some(v) => integer(v, "profile")?,
            None => return Err(ExecError::bad_value("profile: missing level")),
        };
        if !(-1..=2).contains(&level) {
            return Err(ExecError::bad_value(format!("Invalid profiling level: {level}; it must be -1, 0, 1 or 2")));
        }
        let slow_ms = body.get("slowms").map(|v| integer(v, "slowms")).transpose()?;
        let sample_rate = match body.get("sampleRate") {
            None => None,
            Some(Bson::Double(f)) => Some(*f),
            Some(Bson::Int32(n)) => Some(f64::from(*n)),
            Some(Bson::Int64(n)) => Some(*n as f64),
            Some(other) => return Err(wrong_type("sampleRate", other, "double")),
        };
        if let Some(rate) = sample_rate
            && !(0.0..=1.0).contains(&rate)
        {
            return Err(ExecError::bad_value("'sampleRate' must be between 0.0 and 1.0 inclusive"));
        }
        // None: unchanged; Some(None): unset.
        let filter = match body.get("filter") {
            None => None,
            Some(Bson::String(s)) if s == "unset" => Some(None),
            Some(Bson::String(s)) => {
                return Err(ExecError::bad_value(format!(
                    "the only string value 'filter' takes is \"unset\", not {s:?}"
                )));
            }
            Some(Bson::Document(d)) => {
                Some(Some(Arc::new(ProfileFilter { doc: d.clone(), filter: Filter::parse(d)? })))
            }
            Some(other) => return Err(wrong_type("filter", other, "object or \"unset\"")),
        };

        let (previous, filtered_now, old_slow_ms, old_rate) = {
            let mut dbs = self.dbs();
            let entry = dbs.entry(db.to_owned()).or_default();
            let previous = entry.clone();
            if level >= 0 {
                entry.level = level as i32;
            }
            if let Some(f) = filter {
                entry.filter = f;
            }
            let filtered_now = entry.filter.is_some();
            if entry.level == 0 && entry.filter.is_none() {
                dbs.remove(db);
            }
            self.configured.store(!dbs.is_empty(), Ordering::Relaxed);
            let old_slow_ms = slow_ms.map_or_else(|| self.slow_ms(), |ms| self.slow_ms.swap(ms, Ordering::Relaxed));
            let old_rate = match sample_rate {
                Some(r) => f64::from_bits(self.sample_rate.swap(r.to_bits(), Ordering::Relaxed)),
                None => self.sample_rate(),
            };
            (previous, filtered_now, old_slow_ms, old_rate)
        };
        let slowms = i32::try_from(old_slow_ms).map_or(Bson::Int64(old_slow_ms), Bson::Int32);
        let mut reply = doc! { "was": previous.level, "slowms": slowms, "sampleRate": old_rate };
        if let Some(f) = &previous.filter {
            reply.insert("filter", f.doc.clone());
        }
        if filtered_now || previous.filter.is_some() {
            reply.insert("note", FILTER_NOTE);
        }
        reply.insert("ok", 1.0);
        Ok(reply)
    }
}

fn wrong_type(field: &str, got: &Bson, want: &str) -> ExecError {
    ExecError::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field 'profile.{field}' is the wrong type '{}', expected type '{want}'",
            crate::exec::args::type_name(got)
        ),
    )
}

/// An integral number (int, long, or a double without fraction).
fn integer(v: &Bson, field: &str) -> ExecResult<i64> {
    match v {
        Bson::Int32(n) => Ok(i64::from(*n)),
        Bson::Int64(n) => Ok(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        Bson::Double(f) => Err(ExecError::bad_value(format!("profile.{field} must be an integer, not {f}"))),
        other => Err(wrong_type(field, other, "int")),
    }
}
