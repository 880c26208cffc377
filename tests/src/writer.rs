//! A writer that keeps inserting while a test does something to the cluster, and remembers what
//! was acknowledged: every acknowledged `_id` must be found afterwards, exactly once.
//!
//! It inserts `{_id: n, w: "writer"}` one at a time through the driver (retryable writes,
//! w:majority). A failed insert is sent again with the same `_id` until it succeeds (a retry
//! whose first attempt had landed answers DuplicateKey: acknowledged too). Errors are sorted into
//! those a MongoDB application must expect during failover (network errors and codes labelled
//! retryable) and the others, which tests assert never happen.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Document, doc};
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use tokio::task::JoinHandle;

/// Tries of one `_id` before the writer gives up on it (with a pause between tries).
const TRIES_MAX: u32 = 600;
const PAUSE: Duration = Duration::from_millis(100);

/// What the writer saw.
#[derive(Debug, Default)]
pub struct Written {
    pub acknowledged: BTreeSet<i64>,
    /// Errors an application must expect while a primary changes (retried).
    pub retryable_errors: Vec<String>,
    /// Anything else (a test normally asserts this is empty).
    pub other_errors: Vec<String>,
}

pub struct Writer {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Written>,
}

impl Writer {
    /// Starts writing into `db.coll` through `client`.
    pub fn start(client: mongodb::Client, db: &str, coll: &str) -> Writer {
        let majority = WriteConcern::builder().w(Acknowledgment::Majority).build();
        let collection = client
            .database(db)
            .collection_with_options::<Document>(coll, CollectionOptions::builder().write_concern(majority).build());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut written = Written::default();
            let mut id = 0i64;
            while !flag.load(Ordering::Relaxed) {
                id += 1;
                let mut tries = 0;
                loop {
                    tries += 1;
                    match collection.insert_one(doc! { "_id": id, "w": "writer" }).await {
                        Ok(_) => {
                            written.acknowledged.insert(id);
                            break;
                        }
                        Err(e) if tries > 1 && is_duplicate_key(&e) => {
                            written.acknowledged.insert(id);
                            break;
                        }
                        Err(e) => {
                            let text = e.to_string();
                            if is_expected_during_failover(&e) {
                                written.retryable_errors.push(text);
                            } else {
                                written.other_errors.push(text);
                            }
                            if tries >= TRIES_MAX || flag.load(Ordering::Relaxed) && tries > 50 {
                                break;
                            }
                            tokio::time::sleep(PAUSE).await;
                        }
                    }
                }
            }
            written
        });
        Writer { stop, task }
    }

    /// How many acknowledged writes so far is not observable without stopping; tests wait on
    /// the cluster instead. Stops the writer and returns what it saw.
    pub async fn finish(self) -> Written {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

fn is_duplicate_key(e: &mongodb::error::Error) -> bool {
    code_of(e) == Some(11000) || e.to_string().contains("E11000")
}

fn code_of(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => Some(w.code),
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteConcernError(w)) => Some(w.code),
        _ => None,
    }
}

/// Network errors, server selection timeouts and the codes MongoDB labels retryable or returns
/// while a primary changes (NotWritablePrimary, PrimarySteppedDown, InterruptedDueToReplStateChange,
/// ShutdownInProgress, HostUnreachable, ...).
fn is_expected_during_failover(e: &mongodb::error::Error) -> bool {
    use mongodb::error::{ErrorKind, RETRYABLE_WRITE_ERROR};
    if e.contains_label(RETRYABLE_WRITE_ERROR) {
        return true;
    }
    if matches!(
        e.kind.as_ref(),
        ErrorKind::ConnectionPoolCleared { .. } | ErrorKind::Io(_) | ErrorKind::ServerSelection { .. }
    ) {
        return true;
    }
    const FAILOVER_CODES: [i32; 13] = [6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 64];
    code_of(e).is_some_and(|c| FAILOVER_CODES.contains(&c))
}

/// Every acknowledged `_id` of `written` in `db.coll`, each exactly once (reads at majority).
pub async fn check(client: &mongodb::Client, db: &str, coll: &str, written: &Written) -> anyhow::Result<()> {
    use futures::TryStreamExt as _;
    let majority = mongodb::options::ReadConcern::majority();
    let collection = client
        .database(db)
        .collection_with_options::<Document>(coll, CollectionOptions::builder().read_concern(majority).build());
    let docs: Vec<Document> = collection.find(doc! { "w": "writer" }).await?.try_collect().await?;
    let mut seen = BTreeSet::new();
    for d in &docs {
        let id = d.get_i64("_id")?;
        anyhow::ensure!(seen.insert(id), "_id {id} is there twice");
    }
    let lost: Vec<&i64> = written.acknowledged.difference(&seen).collect();
    anyhow::ensure!(lost.is_empty(), "{} acknowledged writes lost: {:?}", lost.len(), &lost[..lost.len().min(20)]);
    Ok(())
}
