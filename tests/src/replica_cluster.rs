//! A cluster with one replicated shard: three config servers, shard `rs0` of N members on fixed
//! loopback ports (a member restarted on its data dir keeps the address the catalog lists), and a
//! router. Members can be killed, paused (SIGSTOP), restarted and wiped.
//!
//! ```text
//!   test ──driver──> router ──gRPC──> primary of rs0 ──oplog stream──> secondaries
//!                      └──> cfg1..3 (Raft: term, primary) <──heartbeats── every member
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::{Document, doc};

use crate::process::{Process, ProcessSpec};
use crate::repl::{PRIMARY_WAIT, member_status};

pub const SHARD: &str = "rs0";

pub struct ReplicaCluster {
    _config: Vec<Process>,
    members: Vec<Option<Process>>,
    ports: Vec<u16>,
    pub router: Process,
    pub config_addrs: Vec<String>,
    /// Flags every member gets after the usual ones (kept for restarts).
    member_flags: Vec<String>,
    /// Last: dropped after the processes, so a failing test can still print their logs.
    dir: tempfile::TempDir,
}

impl ReplicaCluster {
    /// Starts everything, registers `rs0` with all members and waits for a primary.
    pub async fn start(members: usize) -> anyhow::Result<ReplicaCluster> {
        Self::start_with(members, &[]).await
    }

    /// [`ReplicaCluster::start`] with extra `shoal shard` flags for every member.
    pub async fn start_with(members: usize, member_flags: &[&str]) -> anyhow::Result<ReplicaCluster> {
        let member_flags: Vec<String> = member_flags.iter().map(|f| f.to_string()).collect();
        let dir = tempfile::tempdir()?;
        let ports = crate::ports::free_ports(3 + members)?;
        let (cfg_ports, member_ports) = ports.split_at(3);
        let (config, config_addrs) = crate::catalog_cluster::start_config_servers(dir.path(), cfg_ports).await?;
        let mut procs = Vec::new();
        for (i, port) in member_ports.iter().enumerate() {
            procs.push(Some(Process::start(member_spec(dir.path(), i, *port, &config_addrs, &member_flags)).await?));
        }
        let router = Process::start(ProcessSpec {
            name: "router".into(),
            role: "router".into(),
            args: vec![
                "router".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--config".into(),
                config_addrs.join(","),
            ],
            log_path: dir.path().join("router.log"),
        })
        .await?;
        let cluster = ReplicaCluster {
            dir,
            _config: config,
            members: procs,
            ports: member_ports.to_vec(),
            router,
            config_addrs,
            member_flags,
        };
        let hosts: Vec<String> = (0..members).map(|i| cluster.addr(i)).collect();
        let admin = cluster.client().await?.database("admin");
        admin.run_command(doc! { "addShard": format!("{SHARD}/{}", hosts.join(",")), "name": SHARD }).await?;
        cluster.wait_primary(PRIMARY_WAIT).await?;
        for i in 0..members {
            cluster.wait_settled(i, PRIMARY_WAIT).await?;
        }
        Ok(cluster)
    }

    /// Starts one more member process (not yet in the group's configuration: add it with
    /// `replSetReconfig`); returns its index.
    pub async fn start_member(&mut self) -> anyhow::Result<usize> {
        let port = crate::ports::free_ports(1)?[0];
        let i = self.ports.len();
        let spec = member_spec(self.dir.path(), i, port, &self.config_addrs, &self.member_flags);
        self.members.push(Some(Process::start(spec).await?));
        self.ports.push(port);
        Ok(i)
    }

    pub fn size(&self) -> usize {
        self.ports.len()
    }

    /// `127.0.0.1:<port>` of member `i`, as the catalog lists it.
    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i])
    }

    pub fn member(&self, i: usize) -> Option<&Process> {
        self.members[i].as_ref()
    }

    pub async fn client(&self) -> anyhow::Result<mongodb::Client> {
        crate::sharded_cluster::client_of(&self.router).await
    }

    /// The member that reports itself PRIMARY, waiting up to `within` for one.
    pub async fn wait_primary(&self, within: Duration) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            for i in 0..self.size() {
                if self.members[i].is_none() {
                    continue;
                }
                if let Ok(s) = member_status(&self.addr(i)).await
                    && s.get_str("stateStr").is_ok_and(|v| v == "PRIMARY")
                {
                    return Ok(i);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!("no primary within {within:?}\n{}", self.log_tails(30));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A primary other than `not`, waiting up to `within`.
    pub async fn wait_new_primary(&self, not: usize, within: Duration) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let p = self.wait_primary(deadline.saturating_duration_since(tokio::time::Instant::now())).await?;
            if p != not {
                return Ok(p);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn kill9(&mut self, i: usize) {
        if let Some(p) = self.members[i].take() {
            p.kill9();
        }
    }

    pub fn pause(&self, i: usize) {
        if let Some(p) = &self.members[i] {
            p.pause();
        }
    }

    pub fn resume(&self, i: usize) {
        if let Some(p) = &self.members[i] {
            p.resume();
        }
    }

    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(member_name(i))
    }

    /// Restarts member `i` on its data dir (after [`ReplicaCluster::kill9`]).
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let spec = member_spec(self.dir.path(), i, self.ports[i], &self.config_addrs, &self.member_flags);
        self.members[i] = Some(Process::start(spec).await?);
        Ok(())
    }

    /// Kills member `i`, deletes its data and starts it empty: it must resync.
    pub async fn wipe(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill9(i);
        std::fs::remove_dir_all(self.data_dir(i))?;
        self.restart(i).await
    }

    /// Waits until member `i` is settled (PRIMARY or SECONDARY: not syncing or rolling back).
    pub async fn wait_settled(&self, i: usize, within: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut last = String::from("no answer");
        while tokio::time::Instant::now() < deadline {
            match member_status(&self.addr(i)).await {
                Ok(s) => match s.get_str("stateStr") {
                    Ok(state @ ("PRIMARY" | "SECONDARY")) => return Ok(state.to_owned()),
                    _ => last = s.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("member {i} not PRIMARY or SECONDARY within {within:?}; last: {last}")
    }

    /// Waits until member `i` is settled with `n` documents in `db.coll`.
    pub async fn wait_caught_up(&self, i: usize, db: &str, coll: &str, n: u64, within: Duration) -> anyhow::Result<()> {
        self.wait_settled(i, within).await?;
        let deadline = tokio::time::Instant::now() + within;
        let mut last = 0;
        while tokio::time::Instant::now() < deadline {
            last = crate::repl::count_on_member(&self.addr(i), db, coll).await.unwrap_or(last);
            if last == n {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("member {i} has {last} of {n} documents of {db}.{coll} after {within:?}")
    }

    /// Every `_id` (as i64) of `db.coll` on member `i`, sorted, duplicates kept.
    pub async fn ids_on(&self, i: usize, db: &str, coll: &str) -> anyhow::Result<Vec<i64>> {
        let body =
            doc! { "find": coll, "filter": {}, "projection": {"_id": 1}, "batchSize": 1_000_000, "singleBatch": true };
        let addr = self.addr(i);
        let mut client = crate::grpc::shard(&addr).await?.max_decoding_message_size(usize::MAX);
        let req = shoal_proto::shard::CommandRequest {
            db: db.into(),
            body: body.to_vec()?.into(),
            secondary_ok: true,
            ..Default::default()
        };
        let reply = tokio::time::timeout(crate::repl::MEMBER_CALL_TIMEOUT, client.find(req)).await??.into_inner();
        if let Some(e) = reply.error {
            anyhow::bail!("find on {addr}: {}", e.errmsg);
        }
        let mut ids = Vec::new();
        for raw in &reply.documents {
            let d = Document::from_reader(&mut &raw[..])?;
            ids.push(match d.get("_id") {
                Some(bson::Bson::Int32(v)) => i64::from(*v),
                Some(bson::Bson::Int64(v)) => *v,
                other => anyhow::bail!("unexpected _id {other:?}"),
            });
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// The rollback files member `i` wrote (`rollback/<ns>/removed.*.bson`), their documents.
    pub fn rollback_documents(&self, i: usize) -> anyhow::Result<Vec<Document>> {
        let mut out = Vec::new();
        let root = self.data_dir(i).join("rollback");
        if !root.exists() {
            return Ok(out);
        }
        for ns in std::fs::read_dir(&root)? {
            for file in std::fs::read_dir(ns?.path())? {
                let bytes = std::fs::read(file?.path())?;
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    out.push(Document::from_reader(&mut rest)?);
                }
            }
        }
        Ok(out)
    }

    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        let names = (0..self.size()).map(member_name).chain(["router".to_owned(), "cfg1".to_owned()]);
        for name in names {
            let path = self.dir.path().join(format!("{name}.log"));
            out.push_str(&format!("--- {name} ---\n{}\n", crate::process::log_tail(&path, lines)));
        }
        out
    }
}

fn member_name(i: usize) -> String {
    format!("{SHARD}-{}", i + 1)
}

fn member_spec(dir: &Path, i: usize, port: u16, config_addrs: &[String], flags: &[String]) -> ProcessSpec {
    let name = member_name(i);
    let mut args = vec![
        "shard".into(),
        "--name".into(),
        SHARD.into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--data-dir".into(),
        dir.join(&name).display().to_string(),
        "--config".into(),
        config_addrs.join(","),
    ];
    args.extend(flags.iter().cloned());
    let log_path = dir.join(format!("{name}.log"));
    ProcessSpec { name, role: "shard".into(), args, log_path }
}
