//! Part of `shoal bench catalog`: what a router's catalog reads cost the config servers. Before
//! narrow queries a router re-read the whole catalog (the `Read` RPC, since removed) on every
//! catalog version the watch stream announced, and on every retry while a shard primary was being
//! replaced; now it reads only the shards (`Query{shards}`). The whole catalog is read here as a
//! `view` of every part, the nearest thing the API still serves. Both run against the same config
//! servers in one run, on a catalog grown to a realistic size first: one collection of
//! [`BIG_CHUNKS`] chunks.
//!
//! Must not: run before the commit and read rows (it grows the catalog they measure).

use std::sync::Arc;

use anyhow::Context;
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_proto::catalog::{Command, Epoch, InitialChunks, KeyPattern, Parts};

use crate::catalog::{Cell, DIAGNOSTIC_OPS_MAX, cell};

/// Chunks of the collection that makes the catalog realistic.
pub const BIG_CHUNKS: usize = 1000;
/// Concurrent readers: a few routers' watch loops and retries at once.
const READERS: usize = 16;

/// One way of reading, its reply size and its measurement.
pub struct ReadCost {
    pub what: &'static str,
    pub reply_bytes: usize,
    pub cell: Cell,
}

/// Grows the catalog by a [`BIG_CHUNKS`]-chunk collection, then measures both reads (not
/// linearizable, as the router's watch loop reads) from [`READERS`] tasks on `leader`.
pub async fn measure(ops: usize, leader: &str, pids: &[u32]) -> anyhow::Result<Vec<ReadCost>> {
    let client = Arc::new(ConfigClient::new(vec![leader.to_owned()], ClientSettings::default()));
    let split_points = (1..BIG_CHUNKS).map(|i| format!("key{i:06}").into_bytes()).collect();
    let grow = Command::ShardCollection {
        ns: "bench.big".into(),
        uuid: uuid::Uuid::new_v4(),
        epoch: Epoch(*b"shoal-bench2"),
        key: KeyPattern::range(&["_id"]),
        unique: false,
        initial: InitialChunks::Distributed { split_points, shards: vec!["bench-shard".into()] },
    };
    client.write(&grow).await?.outcome.map_err(|e| anyhow::anyhow!("growing the catalog: {e}"))?;
    let (catalog, _) = client.view(Parts::ALL, false).await?;
    anyhow::ensure!(
        catalog.collection("bench.big").is_some_and(|c| c.chunks.len() == BIG_CHUNKS),
        "bench.big does not have {BIG_CHUNKS} chunks"
    );
    let whole_bytes = shoal_proto::catalog::wire::encode(&catalog)?.len();
    let (shards, _) = client.shards(false).await?;
    let shards_bytes = shoal_proto::catalog::wire::encode(&shards)?.len();
    let ops = ops.min(DIAGNOSTIC_OPS_MAX);
    let whole = {
        let c = Arc::clone(&client);
        move |_: usize| {
            let c = Arc::clone(&c);
            async move {
                c.view(Parts::ALL, false).await.context("whole-catalog read")?;
                Ok(())
            }
        }
    };
    let narrow = {
        let c = Arc::clone(&client);
        move |_: usize| {
            let c = Arc::clone(&c);
            async move {
                let (shards, _) = c.shards(false).await.context("shards query")?;
                anyhow::ensure!(!shards.is_empty(), "no shards");
                Ok(())
            }
        }
    };
    Ok(vec![
        ReadCost {
            what: "whole catalog (view of every part): the router's re-read before",
            reply_bytes: whole_bytes,
            cell: cell(pids, ops, READERS, whole).await?,
        },
        ReadCost {
            what: "shards (Query): the router's re-read now",
            reply_bytes: shards_bytes,
            cell: cell(pids, ops, READERS, narrow).await?,
        },
    ])
}

/// A markdown table of the measurements.
pub fn report(costs: &[ReadCost]) -> String {
    let mut out = format!(
        "\nrouter catalog reads ({BIG_CHUNKS}-chunk collection in the catalog, {READERS} readers, leader, not linearizable):\n\n\
         | read | reply bytes | ops/s | p50 / p99 µs | server CPU µs/op | errors |\n|---|---:|---:|---:|---:|---:|\n"
    );
    for c in costs {
        let s = &c.cell.summary;
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} / {} | {:.0} | {} |\n",
            c.what,
            c.reply_bytes,
            s.ops_per_sec(),
            s.p50_us,
            s.p99_us,
            c.cell.cpu_us_per_op(),
            s.errors
        ));
    }
    out
}
