//! The writer lane: one thread that runs the client write commands (insert, update, delete) one
//! after another, instead of a thread of tokio's blocking pool each.
//!
//! Every such command takes the store's single writer lock for its statements; with 64 clients
//! that was 64 pool threads queueing on it, each hand-over a futex wake and a context switch. On
//! the lane the commands queue in a channel instead and the lane's thread takes the next one
//! without sleeping while there is work.
//!
//! Must not: run anything that waits on another write (a command here holds the lane until it
//! returns), or reads and DDL (they stay on the blocking pool).

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("the writer lane has stopped")]
    Stopped,
    #[error("the write command panicked")]
    Panicked,
}

pub struct WriteLane {
    jobs: mpsc::Sender<Job>,
}

impl WriteLane {
    /// Starts the lane's thread; it ends when the lane is dropped.
    pub fn start(name: &str) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            for job in queue {
                // A panic fails its own command (its reply sender is dropped); the lane goes on.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            }
        })?;
        Ok(Self { jobs })
    }

    /// Runs `f` on the lane after the commands queued before it.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, LaneError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = reply.send(f());
            }))
            .map_err(|_| LaneError::Stopped)?;
        answer.await.map_err(|_| LaneError::Panicked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_in_order_and_a_panic_fails_only_its_own() {
        let lane = WriteLane::start("lane-test").expect("start");
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waits = Vec::new();
        for i in 0..10 {
            let order = std::sync::Arc::clone(&order);
            waits.push(lane.run(move || order.lock().expect("lock").push(i)));
        }
        for w in waits {
            w.await.expect("ran");
        }
        assert_eq!(*order.lock().expect("lock"), (0..10).collect::<Vec<_>>());
        let failed = lane.run(|| -> u32 { panic!("boom") }).await;
        assert!(matches!(failed, Err(LaneError::Panicked)));
        assert_eq!(lane.run(|| 7).await.expect("after a panic"), 7);
    }
}
