//! Running N operations from C concurrent workers and summarising their latencies.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

#[derive(Debug, Clone)]
pub struct Summary {
    pub ops: usize,
    pub elapsed: Duration,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub errors: usize,
}

impl Summary {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `op(i)` for i in 0..ops across `concurrency` tasks; errors are counted, never hidden.
pub async fn run<F, Fut>(ops: usize, concurrency: usize, op: F) -> anyhow::Result<Summary>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (op, next) = (Arc::clone(&op), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut errors = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ops {
                    break;
                }
                let t = Instant::now();
                if op(i).await.is_err() {
                    errors += 1;
                }
                hist.saturating_record(t.elapsed().as_micros() as u64);
            }
            anyhow::Ok((hist, errors))
        }));
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await??;
        all.add(&h)?;
        errors += e;
    }
    Ok(Summary {
        ops,
        elapsed: started.elapsed(),
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        max_us: all.max(),
        errors,
    })
}
