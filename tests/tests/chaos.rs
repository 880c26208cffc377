//! A seeded fault campaign (grey-failures issue): a `shoal up` cluster of 3 config servers, two
//! shards of three members and two routers runs a w:majority workload — unique inserts and `$inc`s
//! of counters, retryable — while random faults hit it one at a time: kill -9 of any process
//! (`shoal up` restarts it), SIGSTOP of any process for 1–4 s, and chunk moves between the shards.
//! At the end every acknowledged insert is there exactly once, every counter lies between its
//! acknowledged and attempted increments, and the longest stretch without an acknowledged write
//! is reported (measured, never asserted).
//!
//! `SHOAL_CHAOS_SECS` (default 20, CI's short run) and `SHOAL_CHAOS_SEED` (default 1, so CI runs
//! the same faults every time; `random` draws one) choose the run. The seed is printed; the same
//! seed replays the same faults in the same order (their timing against the workload varies):
//!
//! ```text
//! SHOAL_CHAOS_SECS=600 SHOAL_CHAOS_SEED=random cargo nextest run -p shoal-tests --test chaos --no-capture
//! ```
//!
//! `SHOAL_CHAOS_FAULTS` (comma-separated `kill`, `pause`, `move`; default all),
//! `SHOAL_CHAOS_TARGETS` (processes whose name starts with one of the comma-separated prefixes,
//! e.g. `cfg`; default all) and `SHOAL_CHAOS_PAUSE_MAX_MS` (default 4000) narrow a campaign, e.g.
//! to measure writes with one config server paused at a time (docs/benchmarks.md):
//!
//! ```text
//! SHOAL_CHAOS_FAULTS=pause SHOAL_CHAOS_TARGETS=cfg SHOAL_CHAOS_PAUSE_MAX_MS=10000 SHOAL_CHAOS_SECS=300 \
//!   cargo nextest run -p shoal-tests --test chaos --no-capture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_tests::knobs::{env_u64, seed};
use shoal_tests::process::{Process, ProcessSpec};
use shoal_tests::up::{pid_with_arg, up_args};
use shoal_tests::writer::{Writer, check};

const COUNTERS: i64 = 8;
const SETTLE: Duration = Duration::from_secs(120);

/// What the counter workload saw: per counter, increments acknowledged and attempted, and the
/// instants of acknowledgements.
#[derive(Default)]
struct Counted {
    acknowledged: Vec<u64>,
    attempted: Vec<u64>,
    acks: Vec<Instant>,
}

/// The kinds of fault a campaign draws from.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Pause,
    Move,
}

impl Fault {
    fn parse(name: &str) -> Option<Fault> {
        match name {
            "kill" => Some(Fault::Kill),
            "pause" => Some(Fault::Pause),
            "move" => Some(Fault::Move),
            _ => None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_a_seeded_fault_campaign() {
    let secs = env_u64("SHOAL_CHAOS_SECS").unwrap_or(20);
    let seed = seed("SHOAL_CHAOS_SEED", Some(1));
    println!("chaos: seed {seed}, {secs} s (replay with SHOAL_CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);

    let dir = tempfile::tempdir().unwrap();
    // SHOAL_CHAOS_KEEP=1 keeps the processes' logs (the directory is printed) to study a stall.
    let (origin, origin_wall) = (Instant::now(), std::time::SystemTime::now());
    let keep = std::env::var_os("SHOAL_CHAOS_KEEP").is_some();
    let p = shoal_tests::ports::free_ports(11).unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: chaos\nconfig_servers:\n  - {{ name: cfg1, port: {} }}\n  - {{ name: cfg2, port: {} }}\n  - {{ name: cfg3, port: {} }}\n\
             routers:\n  - {{ name: router0, port: {} }}\n  - {{ name: router1, port: {} }}\n\
             shards:\n  - name: shard0\n    members: [{{ port: {} }}, {{ port: {} }}, {{ port: {} }}]\n  \
             - name: shard1\n    members: [{{ port: {} }}, {{ port: {} }}, {{ port: {} }}]\n",
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10]
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let launcher = Process::start(ProcessSpec {
        name: "up".into(),
        role: "cluster".into(),
        args: up_args(&spec, &data),
        log_path: dir.path().join("up.log"),
    })
    .await
    .expect("shoal up starts");
    let targets = std::env::var("SHOAL_CHAOS_TARGETS").unwrap_or_default();
    let processes: Vec<String> = [
        "cfg1", "cfg2", "cfg3", "router0", "router1", "shard0-1", "shard0-2", "shard0-3", "shard1-1", "shard1-2",
        "shard1-3",
    ]
    .into_iter()
    .filter(|name| targets.is_empty() || targets.split(',').any(|prefix| name.starts_with(prefix.trim())))
    .map(str::to_owned)
    .collect();
    assert!(!processes.is_empty(), "SHOAL_CHAOS_TARGETS={targets} names no process");
    let kinds: Vec<Fault> = match std::env::var("SHOAL_CHAOS_FAULTS") {
        Ok(list) => list.split(',').filter_map(|k| Fault::parse(k.trim())).collect(),
        Err(_) => vec![Fault::Kill, Fault::Pause, Fault::Move],
    };
    assert!(!kinds.is_empty(), "SHOAL_CHAOS_FAULTS names no fault (kill, pause, move)");
    let pause_max = env_u64("SHOAL_CHAOS_PAUSE_MAX_MS").unwrap_or(4_000).max(1_001);
    println!("chaos: faults {kinds:?} on {processes:?}, pauses up to {pause_max} ms");
    let uri = format!("mongodb://127.0.0.1:{},127.0.0.1:{}/?w=majority&serverSelectionTimeoutMS=30000", p[3], p[4]);
    let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "chaos", "primaryShard": "shard0" }).await.expect("enableSharding");
    admin
        .run_command(doc! { "shardCollection": "chaos.acked", "key": { "_id": "hashed" }, "numInitialChunks": 4 })
        .await
        .expect("shardCollection acked");
    admin.run_command(doc! { "shardCollection": "chaos.counters", "key": { "_id": 1 } }).await.expect("counters");
    admin.run_command(doc! { "split": "chaos.counters", "middle": { "_id": COUNTERS / 2 } }).await.expect("split");
    let majority = WriteConcern::builder().w(Acknowledgment::Majority).build();
    let counters = client
        .database("chaos")
        .collection_with_options::<Document>("counters", CollectionOptions::builder().write_concern(majority).build());
    let seeds: Vec<Document> = (0..COUNTERS).map(|c| doc! { "_id": c, "n": 0i64 }).collect();
    counters.insert_many(seeds).await.expect("counters");

    // The workload: inserts (checked by the writer) and counter increments.
    let writer = Writer::start(client.clone(), "chaos", "acked");
    let stop = Arc::new(AtomicBool::new(false));
    let counting = {
        let (stop, counters) = (stop.clone(), counters.clone());
        tokio::spawn(async move {
            let mut counted = Counted {
                acknowledged: vec![0; COUNTERS as usize],
                attempted: vec![0; COUNTERS as usize],
                acks: Vec::new(),
            };
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let c = i % COUNTERS;
                i += 1;
                counted.attempted[c as usize] += 1;
                let inc = counters.update_one(doc! { "_id": c }, doc! { "$inc": { "n": 1i64 } });
                match tokio::time::timeout(Duration::from_secs(30), inc).await {
                    Ok(Ok(r)) if r.matched_count == 1 => {
                        counted.acknowledged[c as usize] += 1;
                        counted.acks.push(Instant::now());
                    }
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            counted
        })
    };

    // Faults, one at a time.
    let ends = Instant::now() + Duration::from_secs(secs);
    let mut faults = Vec::new();
    while Instant::now() < ends {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..3_000))).await;
        let target = processes[rng.random_range(0..processes.len())].clone();
        let began = Instant::now();
        let needle = data.join(&target).display().to_string();
        match kinds[rng.random_range(0..kinds.len())] {
            Fault::Kill => {
                if let Some(pid) = pid_with_arg(&needle).or_else(|| router_pid(&target, &p)) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    faults.push((began, Instant::now(), format!("kill -9 {target}")));
                }
            }
            Fault::Pause => {
                if let Some(pid) = pid_with_arg(&needle).or_else(|| router_pid(&target, &p)) {
                    let pause = Duration::from_millis(rng.random_range(1_000..pause_max));
                    let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
                    tokio::time::sleep(pause).await;
                    let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                    faults.push((began, Instant::now(), format!("SIGSTOP {target} for {} ms", pause.as_millis())));
                }
            }
            Fault::Move => {
                let to = if rng.random_bool(0.5) { "shard0" } else { "shard1" };
                let counter = rng.random_range(0..COUNTERS);
                let moved = doc! { "moveChunk": "chaos.counters", "find": { "_id": counter }, "to": to };
                let outcome = tokio::time::timeout(Duration::from_secs(60), admin.run_command(moved)).await;
                let how = match outcome {
                    Ok(Ok(_)) => "moved".to_owned(),
                    Ok(Err(e)) => format!("refused: {e}"),
                    Err(_) => "no answer in 60 s".to_owned(),
                };
                faults.push((began, Instant::now(), format!("moveChunk counter {counter} to {to}: {how}")));
            }
        }
    }
    let listed: Vec<&str> = faults.iter().map(|(_, _, what)| what.as_str()).collect();
    println!("chaos: {} faults:\n  {}", faults.len(), listed.join("\n  "));

    stop.store(true, Ordering::Relaxed);
    let counted = counting.await.unwrap();
    let written = writer.finish().await;
    assert!(!written.acknowledged.is_empty(), "no insert was acknowledged");
    // Every acknowledged insert exactly once (reads at majority, retried while the cluster settles).
    let deadline = Instant::now() + SETTLE;
    loop {
        match check(&client, "chaos", "acked", &written).await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not settled yet: {e:#}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("seed {seed}: {e:#}\n{}", launcher.log_tail(60)),
        }
    }
    // Every counter between its acknowledged and attempted increments.
    let read = |c: i64| counters.find_one(doc! { "_id": c });
    for c in 0..COUNTERS {
        let deadline = Instant::now() + SETTLE;
        let n = loop {
            match read(c).await {
                Ok(Some(d)) => break d.get_i64("n").unwrap() as u64,
                other if Instant::now() < deadline => {
                    eprintln!("counter {c} not readable yet: {other:?}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                other => panic!("seed {seed}: counter {c}: {other:?}"),
            }
        };
        let (acked, attempted) = (counted.acknowledged[c as usize], counted.attempted[c as usize]);
        assert!(
            acked <= n && n <= attempted,
            "seed {seed}: counter {c} is {n}, acknowledged {acked}, attempted {attempted}"
        );
    }
    let longest = counted.acks.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    // The longest stretches, each with the fault that was under way when it began.
    let mut gaps: Vec<(Duration, Instant)> = counted.acks.windows(2).map(|w| (w[1] - w[0], w[0])).collect();
    gaps.sort_by_key(|g| std::cmp::Reverse(g.0));
    for (gap, from) in gaps.iter().take(5) {
        let during = faults
            .iter()
            .filter(|(began, ended, _)| *began <= *from + *gap && *from <= *ended + Duration::from_secs(1))
            .map(|(_, _, what)| what.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let wall = origin_wall + (*from - origin);
        let at = wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        println!(
            "chaos: {:.2} s without an acknowledged increment from {at:.3} (unix), during: {during}",
            gap.as_secs_f64()
        );
    }
    println!(
        "chaos: seed {seed}: {} inserts and {} increments acknowledged; longest stretch without an acknowledged increment {:.2} s",
        written.acknowledged.len(),
        counted.acknowledged.iter().sum::<u64>(),
        longest.as_secs_f64()
    );
    assert!(written.other_errors.is_empty(), "seed {seed}: unexpected errors: {:?}", written.other_errors);
    shoal_tests::up::stop(&launcher).await.expect("shoal up stops");
    if keep {
        println!("chaos: logs kept in {}", dir.keep().display());
    }
}

/// Routers have no data dir: found by their listen port.
fn router_pid(name: &str, ports: &[u16]) -> Option<i32> {
    let port = match name {
        "router0" => ports[3],
        "router1" => ports[4],
        _ => return None,
    };
    pid_with_arg(&format!("127.0.0.1:{port}"))
}
