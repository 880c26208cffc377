//! The command fuzzer (grey-failures issue): seeded, generated commands and frames against a
//! two-shard cluster over raw connections.
//!
//! - Differential: each well-formed-but-wrong command ([`shoal_tests::command_fuzz`]) runs on an
//!   unsharded collection, on a sharded one, on a database that does not exist (reads) and under
//!   `explain`; all collections are kept empty, so nothing a document holds can make one path
//!   fail where another passes. A command one path refuses and another accepts (or refuses with
//!   another code) is a finding: the same validation must hold on every path, as MongoDB's does.
//!   The few differences MongoDB itself has are named in [`allowed`].
//! - Frames: generated commands in mutated OP_MSG frames, each on its own connection; the router
//!   answers with well-formed replies or closes, never hangs, and serves afterwards.
//!
//! `SHOAL_FUZZ_CASES` (default 600, CI's short run) and `SHOAL_FUZZ_SEED` (default 1; `random`
//! draws one, printed for replay) choose the run:
//!
//! ```text
//! SHOAL_FUZZ_CASES=20000 SHOAL_FUZZ_SEED=random cargo nextest run -p shoal-tests --test command_fuzz --no-capture
//! ```
//!
//! A finding is fixed like any bug and its command becomes a case of `same_validation.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::fmt;
use std::time::Duration;

use bson::{Bson, Document, doc};
use rand::SeedableRng;
use rand::rngs::StdRng;
use shoal_tests::command_fuzz::{Generated, Generator, Kind};
use shoal_tests::knobs::{env_u64, seed};
use shoal_tests::sharded_cluster::ShardedCluster;
use shoal_tests::wire::{OP_MSG, OP_REPLY, WireConn, parse_op_msg_reply, parse_op_reply};

const DB: &str = "fz";
const MISSING_DB: &str = "fz_none";
const PLAIN: &str = "plain";
const SHARDED: &str = "sharded";

fn seed_and_cases(default_cases: u64) -> (u64, u64) {
    (seed("SHOAL_FUZZ_SEED", Some(1)), env_u64("SHOAL_FUZZ_CASES").unwrap_or(default_cases))
}

/// What one path answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Accepted,
    /// Refused with this code: the command's, or its first write error's.
    Refused(i32),
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Accepted => f.write_str("ok"),
            Answer::Refused(code) => write!(f, "code {code}"),
        }
    }
}

fn answer(reply: &Document) -> Answer {
    let code = |d: &Document| match d.get("code") {
        Some(Bson::Int32(c)) => *c,
        Some(Bson::Int64(c)) => *c as i32,
        Some(Bson::Double(c)) => *c as i32,
        _ => panic!("an error without a code: {reply}"),
    };
    if !shoal_tests::wire::ok_value(reply).is_some_and(|ok| ok == 1.0) {
        assert!(reply.get_str("codeName").is_ok() && reply.get_str("errmsg").is_ok(), "error shape: {reply}");
        return Answer::Refused(code(reply));
    }
    match reply.get_array("writeErrors").ok().and_then(|e| e.first()) {
        Some(Bson::Document(e)) => Answer::Refused(code(e)),
        _ => Answer::Accepted,
    }
}

/// The differences between paths MongoDB has too.
fn allowed(command: &Generated, path: &str, base: Answer, other: Answer) -> bool {
    match path {
        // A sharded collection needs the shard key where MongoDB needs it (an upsert's query, a
        // findAndModify's, a replacement or update that would change it).
        "sharded" => matches!(other, Answer::Refused(61 | 72 | 31025 | 66)),
        // An explained aggregate needs no `cursor` ("required, except for aggregate with the
        // explain argument").
        "explain" => {
            command.kind == Kind::Aggregate
                && !command.rest.contains_key("cursor")
                && base == Answer::Refused(9)
                && other == Answer::Accepted
        }
        _ => false,
    }
}

struct Paths {
    conn: WireConn,
}

impl Paths {
    /// The answer and, for a refusal, its message.
    async fn run(&mut self, body: &Document) -> (Answer, String) {
        let reply = self.conn.command(body).await.unwrap_or_else(|e| panic!("no answer to {body}: {e:#}"));
        let message = reply.get_str("errmsg").map(str::to_owned).unwrap_or_else(|_| {
            let first = reply.get_array("writeErrors").ok().and_then(|e| e.first()).and_then(Bson::as_document);
            first.and_then(|e| e.get_str("errmsg").ok()).unwrap_or_default().to_owned()
        });
        (answer(&reply), message)
    }

    /// Empties both collections after a write (an accepted insert or upsert leaves documents).
    async fn clear(&mut self) {
        for coll in [PLAIN, SHARDED] {
            let body = doc! { "delete": coll, "deletes": [{ "q": {}, "limit": 0 }], "$db": DB };
            let reply = self.conn.command(&body).await.expect("clear");
            assert_eq!(answer(&reply), Answer::Accepted, "clearing {coll}: {reply}");
        }
    }
}

/// What one command did on the paths: refusal differences (one path accepted what another
/// refused) and code differences (both refused, with different codes).
#[derive(Default)]
struct Differences {
    refusals: Vec<String>,
    codes: Vec<String>,
}

/// Each path's answer to `command`, compared with the unsharded collection's.
async fn differences(paths: &mut Paths, command: &Generated) -> Differences {
    let (base, base_message) = paths.run(&command.on(DB, PLAIN)).await;
    let mut others = vec![("sharded", paths.run(&command.on(DB, SHARDED)).await)];
    if command.kind.is_read() {
        others.push(("missing database", paths.run(&command.on(MISSING_DB, PLAIN)).await));
    }
    if command.kind.explainable() {
        others.push(("explain", paths.run(&command.explained(DB, PLAIN)).await));
    }
    if !command.kind.is_read() {
        paths.clear().await;
    }
    let mut out = Differences::default();
    for (path, (other, message)) in others {
        if other == base || allowed(command, path, base, other) {
            continue;
        }
        let line = format!("{path}: {other} ({message}), unsharded: {base} ({base_message})");
        if base == Answer::Accepted || other == Answer::Accepted {
            out.refusals.push(line);
        } else {
            out.codes.push(line);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_path_refuses_what_the_unsharded_path_refuses() {
    let (seed, cases) = seed_and_cases(600);
    println!("command fuzz: seed {seed}, {cases} commands (replay with SHOAL_FUZZ_SEED={seed})");
    let cluster = ShardedCluster::start().await.expect("cluster");
    cluster.shard_in_two(DB, SHARDED, 50).await.expect("sharded collection");
    let mut conn = WireConn::connect_client(cluster.router.addr()).await.expect("connect");
    let reply = conn.command(&doc! { "create": PLAIN, "$db": DB }).await.expect("create");
    assert_eq!(answer(&reply), Answer::Accepted, "{reply}");
    let mut paths = Paths { conn };

    let mut generator = Generator::new(StdRng::seed_from_u64(seed));
    let mut findings = Vec::new();
    let mut codes = Vec::new();
    for case in 0..cases {
        let command = generator.command();
        let found = differences(&mut paths, &command).await;
        let shown = command.on("<db>", "<coll>");
        findings.extend(found.refusals.iter().map(|d| format!("case {case}: {shown}\n    {d}")));
        codes.extend(found.codes.iter().map(|d| format!("case {case}: {shown}\n    {d}")));
    }
    // Which of several problems is named first differs between MongoDB's own paths too: code
    // differences are reported, refusal differences fail.
    println!("{} commands refused with different codes on different paths:\n{}", codes.len(), codes.join("\n"));
    assert!(
        findings.is_empty(),
        "seed {seed}: {} commands answered differently on different paths:\n{}",
        findings.len(),
        findings.join("\n")
    );
    let databases = paths.conn.command(&doc! { "listDatabases": 1, "nameOnly": true, "$db": "admin" }).await.unwrap();
    assert!(!databases.to_string().contains(MISSING_DB), "a read created {MISSING_DB}: {databases}");
}

/// Replies the router sent to one frame, read until it closed the connection, each checked to be
/// a well-formed OP_MSG or OP_REPLY.
async fn replies_until_closed(conn: &mut WireConn) -> anyhow::Result<usize> {
    let mut n = 0;
    while let Some(message) = conn.next_message().await? {
        match message.op_code {
            OP_MSG => {
                // `answer` checks an error's shape (code, codeName, errmsg).
                answer(&parse_op_msg_reply(&message.payload)?);
            }
            OP_REPLY => {
                parse_op_reply(&message.payload)?;
            }
            other => anyhow::bail!("a reply with opCode {other}"),
        }
        n += 1;
    }
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutated_frames_get_well_formed_answers_and_the_router_keeps_serving() {
    let (seed, cases) = seed_and_cases(600);
    println!("frame fuzz: seed {seed}, {cases} frames (replay with SHOAL_FUZZ_SEED={seed})");
    let cluster = ShardedCluster::start().await.expect("cluster");
    cluster.shard_in_two(DB, SHARDED, 50).await.expect("sharded collection");
    let addr = cluster.router.addr();
    let mut generator = Generator::new(StdRng::seed_from_u64(seed));
    let mut answered = 0;
    for case in 0..cases {
        let mut conn = WireConn::connect_client(addr).await.expect("connect");
        let coll = if case % 2 == 0 { PLAIN } else { SHARDED };
        let id = conn.request_id();
        let frame = generator.frame(id, DB, coll);
        // The router may close before reading it all (a bad header): then the send fails.
        if conn.send_raw(&frame).await.is_ok() {
            let _ = conn.shutdown_write().await;
        }
        match replies_until_closed(&mut conn).await {
            Ok(n) => answered += n,
            Err(e) => panic!("seed {seed} frame {case} ({} bytes) {frame:02x?}: {e:#}", frame.len()),
        }
        assert!(cluster.router.is_alive(), "seed {seed}: the router died on frame {case}: {frame:02x?}");
    }
    println!("frame fuzz: {answered} replies to {cases} frames");
    let mut conn = WireConn::connect_client(addr).await.expect("connect after the frames");
    let reply = tokio::time::timeout(Duration::from_secs(30), conn.command(&doc! { "ping": 1, "$db": "admin" }))
        .await
        .expect("ping in time")
        .expect("ping");
    assert_eq!(answer(&reply), Answer::Accepted, "{reply}");
    let count = conn.command(&doc! { "count": SHARDED, "$db": DB }).await.expect("count");
    assert_eq!(answer(&count), Answer::Accepted, "{count}");
}
