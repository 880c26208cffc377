//! Load sampling for the balancer's load-based splits: per sharded namespace, how many versioned
//! requests ran in the last [`LOAD_WINDOW_MS`] and a bounded, uniform sample of the shard-key
//! spans they touched ([`finder::Span`]: a point operation's document key, a read's first and
//! last returned key — the response span, not the request's, as cockroach#104563 argues).
//!
//! Every request is counted; a reservoir of at most [`LOAD_SAMPLES_PER_BUCKET_MAX`] requests per
//! [`LOAD_BUCKET_MS`] bucket is sampled. Only a sampled request notes the keys it touches
//! ([`Recording`]); the others pay one short lock and no allocation. The ownership filter and
//! `insert` already hold each document's shard key, so noting it costs nothing more.
//!
//! ```text
//!  service::blocking -- begin(ns) --> Ticket? --(blocking thread)--> Recording::start
//!        exec: scan keep / insert -- note_key(k) --> thread-local span
//!  service::blocking <-- Recording::finish -- record(ns, ticket, span)
//!  _shoalChunkStats -- ranges(ns, [min,max)...) --> ops/s, samples, finder::find_split_key
//! ```
//!
//! Must not: block on I/O or hold its lock for more than a few comparisons per request.

pub mod finder;
pub mod sizes;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

pub use finder::{NoSplit, Span};

/// One bucket of the window.
pub const LOAD_BUCKET_MS: u64 = 2_000;
/// Buckets kept: the window is [`LOAD_BUCKETS`] × [`LOAD_BUCKET_MS`].
pub const LOAD_BUCKETS: usize = 5;
pub const LOAD_WINDOW_MS: u64 = LOAD_BUCKET_MS * LOAD_BUCKETS as u64;
/// Requests sampled per bucket and namespace (memory: this many spans × buckets × namespaces).
pub const LOAD_SAMPLES_PER_BUCKET_MAX: usize = 256;
/// Namespaces tracked at once; requests on further ones are not counted.
pub const LOAD_NAMESPACES_MAX: usize = 4096;

/// A sampled request's claim on a reservoir slot.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    bucket: u64,
    slot: usize,
}

struct Bucket {
    /// Aligned to [`LOAD_BUCKET_MS`].
    start_ms: u64,
    id: u64,
    requests: u64,
    /// `None`: a sampled request that touched no document (or has not finished).
    samples: Vec<Option<Span>>,
}

#[derive(Default)]
struct NsLoad {
    buckets: VecDeque<Bucket>,
}

impl NsLoad {
    /// Drops buckets that left the window.
    fn expire(&mut self, now_ms: u64) {
        while self.buckets.front().is_some_and(|b| b.start_ms + LOAD_WINDOW_MS <= now_ms) {
            self.buckets.pop_front();
        }
    }
}

struct Inner {
    namespaces: HashMap<String, NsLoad>,
    next_bucket: u64,
    rng: u64,
}

impl Inner {
    /// xorshift64: the reservoir needs cheap uniform choices, not cryptographic ones.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

/// A bucket copied out of the lock: requests, finished samples, reservoir slots.
type Copied = (u64, Vec<Span>, usize);

/// The load of one queried range.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeLoad {
    /// Estimated requests per second that touched the range.
    pub ops_per_sec: f64,
    /// Sampled requests that touched it.
    pub samples: usize,
    /// The load split key, or why there is none.
    pub split: Result<Vec<u8>, NoSplit>,
}

/// Per-namespace request counts and span samples (see the module doc). `std::sync::Mutex`: the
/// critical sections are a few comparisons and never await.
pub struct LoadSampler {
    epoch: Instant,
    inner: Mutex<Inner>,
}

impl Default for LoadSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl LoadSampler {
    pub fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
            | 1;
        Self {
            epoch: Instant::now(),
            inner: Mutex::new(Inner { namespaces: HashMap::new(), next_bucket: 1, rng: seed }),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a request on `ns`; `Some` when it is sampled (then run it under a [`Recording`] and
    /// hand the span to [`Self::record`]).
    pub fn begin(&self, ns: &str) -> Option<Ticket> {
        self.begin_at(ns, self.now_ms())
    }

    fn begin_at(&self, ns: &str, now_ms: u64) -> Option<Ticket> {
        let mut inner = self.lock();
        if !inner.namespaces.contains_key(ns) {
            if inner.namespaces.len() >= LOAD_NAMESPACES_MAX {
                return None;
            }
            inner.namespaces.insert(ns.to_owned(), NsLoad::default());
        }
        let start_ms = now_ms - now_ms % LOAD_BUCKET_MS;
        let fresh = inner.next_bucket;
        let random = inner.next_random();
        // Present (inserted above); were it not, the request would just go unsampled.
        let load = inner.namespaces.get_mut(ns)?;
        load.expire(now_ms);
        // Only a later bucket is pushed: a request that read the clock before a rotation joins the newer one.
        if load.buckets.back().is_none_or(|b| b.start_ms < start_ms) {
            load.buckets.push_back(Bucket { start_ms, id: fresh, requests: 0, samples: Vec::new() });
        }
        // Present (pushed above), as before.
        let bucket = load.buckets.back_mut()?;
        bucket.requests += 1;
        let bucket_id = bucket.id;
        let ticket = if bucket.samples.len() < LOAD_SAMPLES_PER_BUCKET_MAX {
            bucket.samples.push(None);
            Some(Ticket { bucket: bucket_id, slot: bucket.samples.len() - 1 })
        } else {
            // Reservoir sampling: request n replaces a random sample with probability max/n.
            let r = (random % bucket.requests) as usize;
            (r < LOAD_SAMPLES_PER_BUCKET_MAX).then(|| {
                bucket.samples[r] = None;
                Ticket { bucket: bucket_id, slot: r }
            })
        };
        if bucket_id == fresh {
            inner.next_bucket += 1;
        }
        ticket
    }

    /// Stores what a sampled request touched (dropped if its bucket has left the window).
    pub fn record(&self, ns: &str, ticket: Ticket, span: Option<Span>) {
        let mut inner = self.lock();
        let Some(load) = inner.namespaces.get_mut(ns) else { return };
        if let Some(b) = load.buckets.iter_mut().rev().find(|b| b.id == ticket.bucket)
            && let Some(slot) = b.samples.get_mut(ticket.slot)
        {
            *slot = span;
        }
    }

    /// The window the estimates cover, in seconds, and the load of each `[min, max)` of `ns`.
    pub fn ranges(&self, ns: &str, ranges: &[(Vec<u8>, Vec<u8>)]) -> (f64, Vec<RangeLoad>) {
        self.ranges_at(ns, ranges, self.now_ms())
    }

    fn ranges_at(&self, ns: &str, ranges: &[(Vec<u8>, Vec<u8>)], now_ms: u64) -> (f64, Vec<RangeLoad>) {
        // Copy out under the lock; the finder runs without it.
        let (buckets, oldest): (Vec<Copied>, Option<u64>) = {
            let mut inner = self.lock();
            match inner.namespaces.get_mut(ns) {
                Some(load) => {
                    load.expire(now_ms);
                    let copied = load
                        .buckets
                        .iter()
                        .map(|b| (b.requests, b.samples.iter().flatten().cloned().collect(), b.samples.len()))
                        .collect();
                    (copied, load.buckets.front().map(|b| b.start_ms))
                }
                None => (Vec::new(), None),
            }
        };
        // At least one bucket long: a burst just after a rotation is not a rate of its own.
        let window_ms =
            oldest.map_or(LOAD_WINDOW_MS, |s| now_ms.saturating_sub(s).clamp(LOAD_BUCKET_MS, LOAD_WINDOW_MS));
        let window_secs = window_ms as f64 / 1000.0;
        let loads = ranges
            .iter()
            .map(|(min, max)| {
                let mut estimate = 0.0;
                let mut spans = Vec::new();
                for (requests, samples, slots) in &buckets {
                    let before = spans.len();
                    spans.extend(samples.iter().filter(|s| s.touches(min, max)).cloned());
                    if *slots > 0 {
                        estimate += *requests as f64 * (spans.len() - before) as f64 / *slots as f64;
                    }
                }
                let samples = spans.len();
                RangeLoad { ops_per_sec: estimate / window_secs, samples, split: finder::find_split_key(&spans, min) }
            })
            .collect();
        (window_secs, loads)
    }
}

thread_local! {
    /// The span of the sampled request running on this thread, if one is.
    static TOUCHED: RefCell<Option<Option<Span>>> = const { RefCell::new(None) };
}

/// Notes the shard keys a sampled request touches on this (blocking-pool) thread; a thread-local
/// because the keys are computed deep in the scan and write paths, which a request runs on one
/// thread from start to end. Dropping it without [`Self::finish`] clears the thread's state.
pub struct Recording(());

impl Recording {
    pub fn start() -> Self {
        TOUCHED.with(|t| *t.borrow_mut() = Some(None));
        Recording(())
    }

    /// The smallest and largest key noted since [`Self::start`].
    pub fn finish(self) -> Option<Span> {
        TOUCHED.with(|t| t.borrow_mut().take().flatten())
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        TOUCHED.with(|t| t.borrow_mut().take());
    }
}

/// Whether a sampled request runs on this thread (callers that must compute a key first ask).
pub fn recording() -> bool {
    TOUCHED.with(|t| t.borrow().is_some())
}

/// Widens this thread's recorded span to `key`; a no-op (the key is dropped) when not recording.
pub fn note_key(key: Vec<u8>) {
    TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        let Some(span) = t.as_mut() else { return };
        match span {
            None => *span = Some(Span::point(key)),
            Some(s) if key < s.first => s.first = key,
            Some(s) if key > s.last => s.last = key,
            Some(_) => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    fn hit(s: &LoadSampler, ns: &str, key: u32, now_ms: u64) {
        if let Some(t) = s.begin_at(ns, now_ms) {
            s.record(ns, t, Some(Span::point(k(key))));
        }
    }

    #[test]
    fn samples_stay_bounded_and_every_request_counts() {
        let s = LoadSampler::new();
        for i in 0..100_000u32 {
            hit(&s, "d.c", i % 1000, u64::from(i) / 10);
        }
        let inner = s.lock();
        let load = &inner.namespaces["d.c"];
        assert!(load.buckets.len() <= LOAD_BUCKETS);
        assert!(load.buckets.iter().all(|b| b.samples.len() <= LOAD_SAMPLES_PER_BUCKET_MAX));
        assert_eq!(load.buckets.back().expect("bucket").requests, 20_000, "one bucket is 2 s of 10 requests/ms");
    }

    #[test]
    fn ops_per_sec_splits_by_range_and_the_window_expires() {
        let s = LoadSampler::new();
        // 10 s at 1000 requests/s: 3/4 on keys 0..100, 1/4 on 100..200.
        for i in 0..10_000u64 {
            let key = if i % 4 == 3 { 100 + (i % 100) as u32 } else { (i % 100) as u32 };
            hit(&s, "d.c", key, 10_000 + i);
        }
        let ranges = [(k(0), k(100)), (k(100), k(200)), (k(200), k(300))];
        let (window, loads) = s.ranges_at("d.c", &ranges, 19_999);
        assert!((window - 10.0).abs() < 0.01, "{window}");
        let total: f64 = loads.iter().map(|l| l.ops_per_sec).sum();
        assert!((total - 1000.0).abs() < 2.0, "{loads:?}");
        assert!((loads[0].ops_per_sec - 750.0).abs() < 60.0, "{loads:?}");
        assert_eq!(loads[2].ops_per_sec, 0.0);
        assert_eq!(loads[2].samples, 0);
        assert!(loads[0].split.is_ok(), "{:?}", loads[0].split);
        let (_, later) = s.ranges_at("d.c", &ranges, 40_000);
        assert!(later.iter().all(|l| l.ops_per_sec == 0.0 && l.samples == 0));
        let (_, unknown) = s.ranges_at("x.y", &ranges, 40_000);
        assert_eq!(unknown.len(), 3);
    }

    #[test]
    fn a_recording_keeps_the_smallest_and_largest_key() {
        note_key(k(1));
        assert!(!recording());
        let r = Recording::start();
        assert!(recording());
        for i in [5, 3, 9, 4] {
            note_key(k(i));
        }
        assert_eq!(r.finish(), Some(Span { first: k(3), last: k(9) }));
        assert!(!recording());
        let r = Recording::start();
        drop(r);
        assert!(!recording());
        assert_eq!(Recording::start().finish(), None);
    }
}
