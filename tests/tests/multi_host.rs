//! Faults of a cluster spread over five hosts (network namespaces on one machine,
//! `tests/src/netns.rs`; the cluster of `tests/src/netns_cluster.rs`: 3 config servers, 2 shards of
//! 3 members, 2 routers, authorization and keyFile cluster authentication on), while a writer
//! checks that every write acknowledged at w:majority is there afterwards, exactly once:
//!
//! - a shard primary's host cut off: another member is elected, writes continue; healed, the old
//!   primary rejoins as a secondary;
//! - a shard primary cut off from its group's other members only (it still reaches the config
//!   servers): it steps down for want of a majority and another member is elected;
//! - the config leader's host cut off: a new leader is elected and the routers keep serving,
//!   catalog changes included;
//! - a host lost for good (processes killed, namespace and data deleted) replaced by a new host
//!   with the same address and spec entry and an empty data dir, which rejoins (a host with
//!   secondaries and a config follower, and the shard0 primary's host replaced before the config
//!   leader noticed it was gone);
//! - a random campaign of faults (cut, one-way partitions, kill -9 of a whole host, netem delay
//!   and loss when the kernel has it), off unless asked for:
//!
//!   ```sh
//!   SHOAL_NETNS_CAMPAIGN=600 SHOAL_NETNS_SEED=42 \
//!     cargo nextest run -p shoal-tests --test multi_host --run-ignored all random_fault_campaign
//!   ```
//!
//!   (`SHOAL_NETNS_CAMPAIGN`: seconds of faults; `SHOAL_NETNS_SEED`: the seed, printed when
//!   absent, so a failing campaign can be replayed.)
//!
//! Needs root, iproute2 and nftables (.ci/run installs them); without them the tests say so and
//! pass, except under CI=true where they fail.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use shoal_tests::netns::{Bed, Fault};
use shoal_tests::netns_cluster::{CONFIG_HOSTS, NetnsCluster, SHARDS};
use shoal_tests::writer::{Writer, Written, check};

/// Bound on an election, a rejoin or writes resuming after a fault.
const RECOVERY: Duration = Duration::from_secs(90);
/// Acknowledged writes that show the writer makes progress.
const PROGRESS: u64 = 20;
const DB: &str = "app";
const COLL: &str = "w";

/// Whether this machine can run the bed; under CI it must.
fn bed_available() -> bool {
    match Bed::available() {
        Ok(()) => true,
        Err(reason) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: the network-namespace test bed needs root, iproute2 and nftables ({reason})");
            false
        }
        Err(reason) => panic!("the network-namespace test bed cannot run under CI: {reason}"),
    }
}

/// The cluster, `app` placed on shard0 (hosts 1-3), and a writer into `app.w`.
async fn cluster_with_writer() -> (NetnsCluster, mongodb::Client, Writer) {
    let cluster = NetnsCluster::start().await.expect("the five-host cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    let deadline = tokio::time::Instant::now() + RECOVERY;
    loop {
        match admin.run_command(doc! { "enableSharding": DB, "primaryShard": "shard0" }).await {
            Ok(_) => break,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "enableSharding: {e}\n{}", cluster.logs(40)),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let writer = Writer::start(client.clone(), DB, COLL);
    wait_for_writes(&client, &cluster, PROGRESS).await;
    (cluster, client, writer)
}

/// How many writer documents there are now (retrying through failovers).
async fn count(client: &mongodb::Client) -> Option<u64> {
    client.database(DB).collection::<Document>(COLL).count_documents(doc! {}).await.ok()
}

/// Waits until `more` documents were added to what there is now.
async fn wait_for_writes(client: &mongodb::Client, cluster: &NetnsCluster, more: u64) {
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let mut start = None;
    loop {
        let n = count(client).await;
        if let (Some(s), Some(n)) = (start, n)
            && n >= s + more
        {
            return;
        }
        if start.is_none() {
            start = n;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "writes did not progress: {n:?} from {start:?}\n{}",
            cluster.logs(60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops the writer and checks every acknowledged write.
async fn finish(cluster: &NetnsCluster, client: &mongodb::Client, writer: Writer) -> Written {
    let written = writer.finish().await;
    assert!(!written.acknowledged.is_empty(), "the writer wrote");
    assert!(written.other_errors.is_empty(), "only retryable errors: {:?}", written.other_errors);
    let deadline = tokio::time::Instant::now() + RECOVERY;
    loop {
        match check(client, DB, COLL, &written).await {
            Ok(()) => break,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "acknowledged writes: {e:#}\n{}", cluster.logs(60))
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    written
}

/// Waits until the shard member on `host` is SECONDARY again.
async fn wait_secondary(cluster: &NetnsCluster, shard: &str, host: usize) {
    let addr = cluster.members(shard).into_iter().find(|(h, _)| *h == host).unwrap().1;
    if let Err(e) = shoal_tests::repl::wait_state(&addr, "SECONDARY", RECOVERY).await {
        panic!("{shard} member on host {host}: {e:#}\n{}", cluster.logs(60));
    }
}

/// Applies `fault` (built from the shard0 primary's host) under the writer: another member is
/// elected and takes writes; healed, the old primary is a secondary again and nothing
/// acknowledged is lost.
async fn shard0_primary_is_replaced_under(fault: impl FnOnce(usize) -> Fault) {
    let (cluster, client, writer) = cluster_with_writer().await;
    let old = cluster.wait_primary("shard0", &[], RECOVERY).await.expect("shard0 has a primary");
    let fault = fault(old);
    cluster.bed.apply(&fault).expect("apply the fault");
    let new = cluster
        .wait_primary("shard0", &[old], RECOVERY)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.logs(60)));
    assert_ne!(new, old);
    wait_for_writes(&client, &cluster, PROGRESS).await;
    cluster.bed.undo(&fault).expect("heal");
    wait_secondary(&cluster, "shard0", old).await;
    wait_for_writes(&client, &cluster, PROGRESS).await;
    finish(&cluster, &client, writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_shard_primary_is_replaced_and_rejoins() {
    if !bed_available() {
        return;
    }
    shard0_primary_is_replaced_under(Fault::Cut).await;
}

/// The shard0 primary cut off from the other shard0 members only (their port, both ways) while
/// it still reaches the config servers and the routers: a primary without its group's majority.
///
/// It keeps heartbeating to the config leader, so the arbiter alone would never depose it (this
/// test found that: no other member was elected within 90 s). It steps down itself when no
/// majority of its group has reported for a window, as a MongoDB primary that cannot see a
/// majority does (`Repl::step_down_if_isolated`), and a member the majority reaches is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_cut_from_its_group_but_not_from_the_config_servers_is_replaced() {
    if !bed_available() {
        return;
    }
    let (_, port, hosts) = SHARDS[0];
    shard0_primary_is_replaced_under(|old| Fault::PortBetween {
        host: old,
        others: hosts.into_iter().filter(|h| *h != old).collect(),
        port,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_config_leader_is_replaced_and_routers_keep_serving() {
    if !bed_available() {
        return;
    }
    let (cluster, client, writer) = cluster_with_writer().await;
    let old = cluster.wait_config_leader(&[], RECOVERY).await.expect("a config leader");
    cluster.bed.apply(&Fault::Cut(old)).expect("cut the leader's host off");
    let new =
        cluster.wait_config_leader(&[old], RECOVERY).await.unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.logs(60)));
    assert_ne!(new, old);
    wait_for_writes(&client, &cluster, PROGRESS).await;
    // A catalog change goes through the new leader.
    let deadline = tokio::time::Instant::now() + RECOVERY;
    loop {
        match client.database("admin").run_command(doc! { "enableSharding": "other", "primaryShard": "shard1" }).await {
            Ok(_) => break,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "enableSharding under the new leader: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    client
        .database("other")
        .collection::<Document>("c")
        .insert_one(doc! { "_id": 1 })
        .await
        .expect("insert into other");

    cluster.bed.undo(&Fault::Cut(old)).expect("heal");
    let deadline = tokio::time::Instant::now() + RECOVERY;
    loop {
        match cluster.config_state(old).await {
            Ok((state, _)) if state == "Follower" || state == "Leader" => break,
            other => assert!(tokio::time::Instant::now() < deadline, "cfg on host {old} did not rejoin: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for_writes(&client, &cluster, PROGRESS).await;
    finish(&cluster, &client, writer).await;
}

/// Host `lost` lost for good and replaced (same address and spec entry, empty data dir) under the
/// writer: its shard0 member initial-syncs and its config server catches up; nothing acknowledged
/// is lost and the new member holds every acknowledged write.
async fn replace_host_and_check(mut cluster: NetnsCluster, client: mongodb::Client, writer: Writer, lost: usize) {
    cluster.replace_host(lost).await.unwrap_or_else(|e| panic!("the new host starts: {e:#}\n{}", cluster.logs(60)));
    wait_for_writes(&client, &cluster, PROGRESS).await;
    wait_secondary(&cluster, "shard0", lost).await;
    // The config server caught up: it follows, and applies what the leader applied.
    let deadline = tokio::time::Instant::now() + RECOVERY;
    loop {
        let leader = cluster.config_leader(&[]).await;
        let leader_applied = match leader {
            Some(l) => cluster.config_state(l).await.map(|(_, a)| a).unwrap_or(u64::MAX),
            None => u64::MAX,
        };
        let mine = cluster.config_state(lost).await;
        if let Ok((state, applied)) = &mine
            && (state == "Follower" || state == "Leader")
            && *applied >= leader_applied
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new config server did not catch up: {mine:?} vs leader {leader:?} at {leader_applied}\n{}",
            cluster.logs(60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let written = finish(&cluster, &client, writer).await;
    // The new member holds every acknowledged write too (initial sync, then replication).
    let addr = cluster.members("shard0").into_iter().find(|(h, _)| *h == lost).unwrap().1;
    let deadline = tokio::time::Instant::now() + RECOVERY;
    loop {
        let n = shoal_tests::repl::count_on_member(&addr, DB, COLL).await.unwrap_or(0);
        if n >= written.acknowledged.len() as u64 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the new member has {n} of {}", written.acknowledged.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A host with a config follower and shard secondaries only is lost and replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_lost_for_good_is_replaced_by_a_new_one() {
    if !bed_available() {
        return;
    }
    let (cluster, client, writer) = cluster_with_writer().await;
    let leader = cluster.wait_config_leader(&[], RECOVERY).await.expect("a config leader");
    let primary0 = cluster.wait_primary("shard0", &[], RECOVERY).await.expect("shard0 has a primary");
    // Hosts 1-3 run a config server and a shard0 member; host 3 a shard1 member too.
    let lost = CONFIG_HOSTS.into_iter().find(|h| *h != leader && *h != primary0).expect("a third host");
    if cluster.primary_of("shard1", &[]).await == Some(lost) {
        client
            .database("admin")
            .run_command(doc! { "replSetStepDown": 60, "shard": "shard1" })
            .await
            .expect("shard1's primary steps down");
        cluster.wait_primary("shard1", &[lost], RECOVERY).await.expect("another shard1 primary");
    }
    replace_host_and_check(cluster, client, writer, lost).await;
}

/// The shard0 primary's host is lost and at once replaced by a new one at the same address, before
/// the config leader noticed: the catalog still names that address primary of the term. The new,
/// empty member must not take the old term over (this test found that it did, and the old
/// secondaries, which hold every acknowledged write, resynced from it and lost them all): it
/// resigns, a member with the writes is elected, and the new one syncs from it
/// (`shard/src/repl/heartbeat.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_primary_host_is_replaced_by_a_new_one() {
    if !bed_available() {
        return;
    }
    let (cluster, client, writer) = cluster_with_writer().await;
    let lost = cluster.wait_primary("shard0", &[], RECOVERY).await.expect("shard0 has a primary");
    replace_host_and_check(cluster, client, writer, lost).await;
}

/// `SHOAL_NETNS_CAMPAIGN=seconds` of random faults, one at a time, each healed and recovered
/// from before the next; `SHOAL_NETNS_SEED` replays one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a long campaign: SHOAL_NETNS_CAMPAIGN=seconds [SHOAL_NETNS_SEED=n] (see the file header)"]
async fn random_fault_campaign() {
    use rand::{Rng as _, SeedableRng as _};
    let Some(seconds) = shoal_tests::knobs::env_u64("SHOAL_NETNS_CAMPAIGN") else {
        eprintln!("SHOAL_NETNS_CAMPAIGN is not set: nothing to do");
        return;
    };
    if !bed_available() {
        return;
    }
    let seed = shoal_tests::knobs::seed("SHOAL_NETNS_SEED", None);
    eprintln!("campaign: {seconds} s, SHOAL_NETNS_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut cluster, client, writer) = cluster_with_writer().await;
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut round = 0;
    while tokio::time::Instant::now() < end {
        round += 1;
        let host = rng.random_range(1..=5usize);
        let hold = Duration::from_millis(rng.random_range(2_000..15_000));
        if rng.random_range(0..4) == 0 {
            eprintln!("round {round}: kill -9 every process of host {host}, then start it again after {hold:?}");
            cluster.kill_host(host);
            tokio::time::sleep(hold).await;
            cluster.start_host(host).await.unwrap_or_else(|e| panic!("host {host} restarts: {e:#}"));
        } else {
            let fault = match rng.random_range(0..4) {
                0 => Fault::Cut(host),
                1 => Fault::OneWay { from: host, to: host % 5 + 1 },
                2 => Fault::LinkDown(host),
                _ => Fault::Netem {
                    host,
                    delay_ms: rng.random_range(5..60),
                    loss_percent: rng.random_range(0..5) as f32,
                },
            };
            eprintln!("round {round}: {fault:?} for {hold:?}");
            if cluster.bed.apply(&fault).expect("apply the fault") {
                tokio::time::sleep(hold).await;
            }
            cluster.bed.undo(&fault).expect("undo the fault");
        }
        // Recovered before the next fault: every shard has a primary and writes go on.
        for (shard, _, _) in SHARDS {
            cluster.wait_primary(shard, &[], RECOVERY).await.unwrap_or_else(|e| panic!("round {round}: {e:#}"));
        }
        cluster.wait_config_leader(&[], RECOVERY).await.unwrap_or_else(|e| panic!("round {round}: {e:#}"));
        wait_for_writes(&client, &cluster, PROGRESS).await;
    }
    let written = finish(&cluster, &client, writer).await;
    eprintln!("campaign: {round} rounds, {} acknowledged writes, all there", written.acknowledged.len());
}
