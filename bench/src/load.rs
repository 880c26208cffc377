//! The foreground load the cluster benchmarks run beside background work (migrations, the
//! balancer): YCSB workload B's shape, 80% finds and 20% `$inc` updates by a uniformly random
//! `_id` in `0..docs`, from `threads` driver tasks, latencies in one HDR histogram.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bson::{Document, doc};
use hdrhistogram::Histogram;
use mongodb::Collection;
use rand::Rng;

#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadStats {
    pub ops: u64,
    pub errors: u64,
    pub ops_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Migrations that committed during the phase (filled in by the caller).
    pub moves: usize,
}

/// Runs the 80/20 load on `coll` until `during` completes, then returns its statistics and
/// `during`'s output.
pub async fn eighty_twenty<T>(
    coll: &Collection<Document>,
    docs: u64,
    threads: usize,
    during: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(LoadStats, T)> {
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..threads.max(1) {
        let coll = coll.clone();
        let (stop, errors) = (Arc::clone(&stop), Arc::clone(&errors));
        let mut hist = latency_histogram()?;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (k, read) = {
                    let mut rng = rand::rng();
                    (rng.random_range(0..docs.max(1)) as i64, rng.random_bool(0.8))
                };
                let started = Instant::now();
                let ok = if read {
                    coll.find_one(doc! { "_id": k }).await.is_ok()
                } else {
                    coll.update_one(doc! { "_id": k }, doc! { "$inc": { "u": 1 } }).await.is_ok()
                };
                if ok {
                    // Clamped to the histogram's hour instead of failing.
                    hist.saturating_record(started.elapsed().as_micros() as u64);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            hist
        }));
    }
    let started = Instant::now();
    let outcome = during.await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = latency_histogram()?;
    for t in tasks {
        // Histograms with the same bounds always merge.
        let _ = hist.add(t.await?);
    }
    let secs = started.elapsed().as_secs_f64();
    let stats = LoadStats {
        ops: hist.len(),
        errors: errors.load(Ordering::Relaxed),
        ops_per_sec: hist.len() as f64 / secs,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        max_us: hist.max(),
        moves: 0,
    };
    Ok((stats, outcome?))
}

/// Documents per insert while filling.
const INSERT_BATCH_DOCS: u64 = 1000;

/// Inserts `{_id: 0..n, pad}` documents, `doc_bytes` of padding each, until about `data_mib` MiB;
/// returns how many documents and their BSON bytes.
pub async fn fill(coll: &Collection<Document>, data_mib: u64, doc_bytes: usize) -> anyhow::Result<(u64, u64)> {
    let docs = (data_mib << 20) / doc_bytes.max(1) as u64;
    let pad = "x".repeat(doc_bytes);
    let mut next = 0u64;
    while next < docs {
        let end = (next + INSERT_BATCH_DOCS).min(docs);
        let batch: Vec<Document> = (next..end).map(|k| doc! { "_id": k as i64, "pad": &pad }).collect();
        coll.insert_many(batch).ordered(false).await?;
        next = end;
    }
    let data_bytes = docs * doc! { "_id": 0i64, "pad": &pad }.to_vec()?.len() as u64;
    Ok((docs, data_bytes))
}

/// `db.coll` dropped and sharded afresh on `_id`: the one chunk both benchmarks start from.
pub async fn fresh_sharded(client: &mongodb::Client, db: &str, coll: &str) -> anyhow::Result<Collection<Document>> {
    let admin = client.database("admin");
    client.database(db).drop().await?;
    admin.run_command(doc! { "enableSharding": db }).await?;
    admin.run_command(doc! { "shardCollection": format!("{db}.{coll}"), "key": { "_id": 1 } }).await?;
    Ok(client.database(db).collection::<Document>(coll))
}

/// Latencies in microseconds, 1 µs to an hour, 3 significant digits. Fixed bounds, because an
/// auto-resizing histogram does not grow on `saturating_record`: it would clamp at its initial
/// top (2047 µs).
fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    // Constant, valid bounds (low >= 1, high >= 2 * low, sigfig <= 5): this does not fail.
    Ok(Histogram::new_with_bounds(1, 3_600_000_000, 3)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn latencies_above_two_milliseconds_are_not_clamped() {
        let mut h = super::latency_histogram().unwrap();
        h.saturating_record(150_000);
        h.saturating_record(1_000);
        assert!(h.max() >= 149_000, "max {}", h.max());
        assert!(h.value_at_quantile(0.5) <= 1_001);
        h.saturating_record(u64::MAX);
        assert!(h.max() >= 3_590_000_000);
    }
}
