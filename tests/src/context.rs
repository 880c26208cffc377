//! Per-test context: a cluster (shared by the tests of one file, or owned), a fresh driver client,
//! the test's database, and a watchdog.
//!
//! ```text
//!   test fn ──TestContext::shared("db")──> static OnceCell<Cluster> (first test starts it)
//!            └── new Client per test (a Client is bound to its tokio runtime; each test has one)
//!   panic  ──drop(TestContext)──> print router and shard log tails
//!   hang   ──watchdog (TEST_DEADLINE)──> print log tails, abort the test process
//! ```
//!
//! Each test binary is one file of `tests/tests/`, so "shared" means per file. Under nextest every
//! test is its own process and gets its own cluster anyway; under `cargo test` the tests of a file
//! share one. Tests that share a cluster keep to their own database or collection names.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use bson::{Document, doc};
use mongodb::{Client, Collection, Database};
use tokio::sync::OnceCell;

use crate::cluster::{Cluster, print_log_tails};

/// A test that has not finished after this long is treated as hung: the watchdog prints the
/// process logs and aborts (its child processes die with it, see `process`).
pub const TEST_DEADLINE: Duration = Duration::from_secs(300);

static SHARED: OnceCell<Cluster> = OnceCell::const_new();

enum ClusterRef {
    Shared(&'static Cluster),
    Owned(Box<Cluster>),
}

pub struct TestContext {
    cluster: ClusterRef,
    client: Client,
    db: Database,
    _watchdog: Watchdog,
}

impl TestContext {
    /// Uses (starting it if needed) the cluster shared by this test file.
    /// Panics with the failure and the log tails if the cluster cannot start.
    pub async fn shared(db_name: &str) -> TestContext {
        let start = || async {
            let cluster = Cluster::start().await?;
            clean_up_shared_cluster_at_exit();
            anyhow::Ok(cluster)
        };
        let cluster = match SHARED.get_or_try_init(start).await {
            Ok(c) => c,
            Err(e) => panic!("starting the shared test cluster: {e:#}"),
        };
        Self::with(ClusterRef::Shared(cluster), db_name).await
    }

    /// Starts a cluster of its own (for tests that kill or restart processes).
    pub async fn owned(db_name: &str) -> TestContext {
        let cluster = match Cluster::start().await {
            Ok(c) => c,
            Err(e) => panic!("starting a test cluster: {e:#}"),
        };
        Self::with(ClusterRef::Owned(Box::new(cluster)), db_name).await
    }

    async fn with(cluster: ClusterRef, db_name: &str) -> TestContext {
        let c: &Cluster = match &cluster {
            ClusterRef::Shared(c) => c,
            ClusterRef::Owned(c) => c,
        };
        let watchdog = Watchdog::arm(c.log_paths());
        let client = match c.client().await {
            Ok(client) => client,
            Err(e) => {
                c.print_log_tails();
                panic!("creating a driver client for {}: {e:#}", c.router_uri());
            }
        };
        let db = client.database(db_name);
        TestContext { cluster, client, db, _watchdog: watchdog }
    }

    pub fn cluster(&self) -> &Cluster {
        match &self.cluster {
            ClusterRef::Shared(c) => c,
            ClusterRef::Owned(c) => c,
        }
    }

    /// Only for an owned cluster (killing a shared one would break the other tests).
    pub fn cluster_mut(&mut self) -> &mut Cluster {
        match &mut self.cluster {
            ClusterRef::Shared(_) => panic!("cluster_mut on a shared cluster"),
            ClusterRef::Owned(c) => c,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn db(&self) -> &Database {
        &self.db
    }

    pub fn coll(&self, name: &str) -> Collection<Document> {
        self.db.collection(name)
    }

    /// A brand-new client (fresh connections) for the same router.
    pub async fn new_client(&self) -> Client {
        self.cluster().client().await.expect("creating a second driver client")
    }

    /// Panics unless the router and shard processes are still running and a fresh client can
    /// `ping` the router.
    pub async fn assert_cluster_serving(&self) {
        assert!(self.cluster().router().is_alive(), "router process died: {:?}", self.cluster().router().exit_status());
        assert!(self.cluster().shard().is_alive(), "shard process died: {:?}", self.cluster().shard().exit_status());
        let client = self.new_client().await;
        client.database("admin").run_command(doc! {"ping": 1}).await.expect("ping through a fresh client");
    }
}

impl Drop for TestContext {
    fn drop(&mut self) {
        // An owned cluster prints its own log tails when dropped during a panic.
        if std::thread::panicking()
            && let ClusterRef::Shared(c) = &self.cluster
        {
            c.print_log_tails();
        }
    }
}

/// Statics are never dropped, so the shared cluster's processes and temp dir are cleaned up by an
/// `atexit` hook (libtest leaves through `exit`, on success and on failure alike).
fn clean_up_shared_cluster_at_exit() {
    #[allow(unsafe_code, reason = "declares libc's atexit, called below")]
    unsafe extern "C" {
        fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
    }
    extern "C" fn cleanup() {
        if let Some(cluster) = SHARED.get() {
            cluster.cleanup_at_exit();
        }
    }
    // SAFETY: registers a plain function that neither unwinds nor blocks.
    #[allow(unsafe_code, reason = "libtest leaves through exit(3): atexit is the only hook that still runs")]
    unsafe {
        atexit(cleanup);
    }
}

/// Aborts the test process if the test outlives [`TEST_DEADLINE`]; disarmed on drop.
struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(log_paths: Vec<PathBuf>) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        let test = thread::current().name().unwrap_or("?").to_string();
        thread::Builder::new()
            .name("test-watchdog".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(TEST_DEADLINE) {
                    eprintln!("test {test} still running after {TEST_DEADLINE:?}: aborting");
                    print_log_tails(&log_paths);
                    if let Some(cluster) = SHARED.get() {
                        cluster.cleanup_at_exit();
                    }
                    std::process::abort();
                }
            })
            .expect("spawning the watchdog thread");
        Watchdog { _disarm: tx }
    }
}
