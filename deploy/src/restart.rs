//! `shoal restart --rolling`: restarts the processes a `shoal up` runs, one at a time, so the
//! cluster keeps serving: config servers first (followers, the Raft leader last), then every
//! shard (its secondaries, then the primary once it stepped down and another member was elected),
//! then the routers. Each restart waits until the process is back in its group (a follower with a
//! leader elected; a SECONDARY caught up to the primary's optime of before; a router answering
//! ping) before the next one starts.
//!
//! ```text
//!  shoal restart --rolling -f SPEC --data-dir D [--host H]
//!     --unix socket D/shoal-up.sock--> shoal up: list | restart NAME (stop, start, wait ready)
//!     --gRPC--> config servers: Metrics (leader)       --driver--> routers: replSetGetStatus,
//!                                                                  replSetStepDown {shard}, ping
//! ```
//!
//! The order is decided by pure functions ([`config_order`], [`shard_steps`]) from what the
//! cluster says just before each group, because a restart may move a leader or primary. Must not:
//! restart a process while the previous one is not back, or restart a primary without a step down.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use bson::{Bson, Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use tracing::{info, warn};

use crate::cli::RestartArgs;
use crate::plan::{ProcessPlan, Role, plan};
use crate::router_client::{Login, command};
use crate::secrets::Secrets;
use crate::spec::ClusterSpec;
use crate::supervise;

/// How long one restarted process may take to be back in its group.
const BACK_WAIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(250);
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);
/// `replSetStepDown`'s seconds: how long the old primary stays ineligible.
const STEP_DOWN_SECS: i32 = 10;

/// One action of a shard's rolling restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Restart(String),
    /// Step the shard's primary down (it is `name`, restarted next).
    StepDown(String),
}

/// Config servers of this host in restart order: followers (spec order), the leader last.
pub fn config_order(here: &[&ProcessPlan], leader: Option<&str>) -> Vec<String> {
    let (mut leaders, mut rest): (Vec<&&ProcessPlan>, Vec<&&ProcessPlan>) =
        here.iter().partition(|p| Some(p.connect.as_str()) == leader);
    rest.append(&mut leaders);
    rest.into_iter().map(|p| p.name.clone()).collect()
}

/// One shard's members on this host: secondaries first, then (if here) step the primary down and
/// restart it.
pub fn shard_steps(here: &[&ProcessPlan], primary: Option<&str>) -> Vec<Step> {
    let mut steps: Vec<Step> =
        here.iter().filter(|p| Some(p.connect.as_str()) != primary).map(|p| Step::Restart(p.name.clone())).collect();
    if let Some(p) = here.iter().find(|p| Some(p.connect.as_str()) == primary) {
        steps.push(Step::StepDown(p.name.clone()));
        steps.push(Step::Restart(p.name.clone()));
    }
    steps
}

pub async fn run(args: RestartArgs) -> anyhow::Result<()> {
    let (spec, source) = ClusterSpec::load(args.file.as_deref())?;
    spec.validate(true).with_context(|| format!("invalid spec {source}"))?;
    let data_dir =
        std::path::absolute(&args.data_dir).with_context(|| format!("bad data dir {}", args.data_dir.display()))?;
    let tls_options = crate::status::secured(&spec, &data_dir)?;
    let mut cluster = plan(&spec, &data_dir, &Secrets::default());
    if let Some(host) = &args.host {
        cluster = cluster.on_host(host);
    }
    let running: Vec<String> =
        supervise::request(&data_dir, "list").await?.split_whitespace().map(str::to_owned).collect();
    let here: Vec<&ProcessPlan> = cluster.processes.iter().filter(|p| running.contains(&p.name)).collect();
    if here.is_empty() {
        bail!("the shoal up at {} runs none of the processes of {source} selected here", data_dir.display());
    }
    let routers: Vec<String> =
        spec.routers.iter().map(|r| spec.endpoint(r.host.as_deref(), r.port).advertise).collect();
    let login = Login {
        username: args.username.clone(),
        password: args.password.clone(),
        authentication_database: args.authentication_database.clone(),
    };
    let rolling = Rolling { data_dir: &data_dir, routers: &routers, tls_options: &tls_options, login: &login };
    info!("rolling restart of {} processes", here.len());

    let config_here: Vec<&ProcessPlan> = here.iter().copied().filter(|p| p.role == Role::ConfigServer).collect();
    if !config_here.is_empty() {
        let leader = config_leader(&cluster.config_servers).await;
        for name in config_order(&config_here, leader.as_deref()) {
            rolling.restart(&name).await?;
            let Some(process) = config_here.iter().find(|p| p.name == name) else { continue };
            wait_config_member(&cluster.config_servers, &process.connect).await?;
        }
    }

    let mut shards: BTreeMap<String, Vec<&ProcessPlan>> = BTreeMap::new();
    for p in here.iter().copied().filter(|p| p.role == Role::Shard) {
        if let Some(shard) = p.args.windows(2).find(|w| w[0] == "--name").and_then(|w| w[1].to_str()) {
            shards.entry(shard.to_owned()).or_default().push(p);
        }
    }
    for (shard, members) in &shards {
        let status = rolling.shard_status(shard).await?;
        let primary = primary_of(&status).map(|(addr, _)| addr);
        for step in shard_steps(members, primary.as_deref()) {
            match step {
                Step::StepDown(name) => rolling.step_down(shard, &name, members).await?,
                Step::Restart(name) => {
                    let Some(process) = members.iter().find(|p| p.name == name) else { continue };
                    let before = rolling.shard_status(shard).await.ok().and_then(|s| primary_of(&s).map(|(_, t)| t));
                    rolling.restart(&name).await?;
                    rolling.wait_secondary(shard, &process.connect, before).await?;
                }
            }
        }
    }

    for router in here.iter().filter(|p| p.role == Role::Router) {
        rolling.restart(&router.name).await?;
        crate::probe::wait_for_ping(&router.connect, &tls_options).await?;
    }
    println!("rolling restart done: {} processes restarted one at a time", here.len());
    Ok(())
}

struct Rolling<'a> {
    data_dir: &'a std::path::Path,
    routers: &'a [String],
    tls_options: &'a str,
    login: &'a Login,
}

impl Rolling<'_> {
    async fn restart(&self, name: &str) -> anyhow::Result<()> {
        info!(%name, "restarting");
        supervise::request(self.data_dir, &format!("restart {name}")).await?;
        info!(%name, "started again; waiting until it is back in its group");
        Ok(())
    }

    /// Runs `body` on the first router that answers (one may be restarting).
    async fn admin(&self, body: Document) -> anyhow::Result<Document> {
        let mut last = anyhow::anyhow!("the spec names no router");
        for router in self.routers {
            let client = crate::router_client::connect(router, self.tls_options, self.login, "shoal-restart").await?;
            match command(&client.database("admin"), body.clone()).await {
                Ok(reply) => return Ok(reply),
                Err(e) => last = e.context(format!("router {router}")),
            }
        }
        Err(last)
    }

    async fn shard_status(&self, shard: &str) -> anyhow::Result<Document> {
        self.admin(doc! { "replSetGetStatus": 1, "shard": shard }).await
    }

    async fn step_down(&self, shard: &str, name: &str, members: &[&ProcessPlan]) -> anyhow::Result<()> {
        let Some(old) = members.iter().find(|p| p.name == name).map(|p| p.connect.clone()) else { return Ok(()) };
        info!(%shard, primary = %old, "stepping the primary down");
        // The step-down closes the connection it arrived on in MongoDB; either answer is fine as
        // long as another member is elected, which is what is waited for.
        if let Err(e) = self.admin(doc! { "replSetStepDown": STEP_DOWN_SECS, "shard": shard }).await {
            warn!(%shard, "replSetStepDown answered: {e:#}");
        }
        let deadline = tokio::time::Instant::now() + BACK_WAIT;
        loop {
            if let Ok(status) = self.shard_status(shard).await
                && let Some((primary, _)) = primary_of(&status)
                && primary != old
            {
                info!(%shard, %primary, "a new primary was elected");
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("shard {shard} elected no other primary within {} s of stepping {old} down", BACK_WAIT.as_secs());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Until `member` is SECONDARY with an optime at least the primary's of before its restart.
    async fn wait_secondary(&self, shard: &str, member: &str, before: Option<bson::Timestamp>) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + BACK_WAIT;
        let mut last;
        loop {
            match self.shard_status(shard).await {
                Ok(status) => {
                    let row = members(&status).into_iter().find(|m| m.get_str("name").is_ok_and(|n| n == member));
                    let state = row.and_then(|m| m.get_str("stateStr").ok()).unwrap_or("?");
                    let optime = row.and_then(optime_ts);
                    let caught_up = match (before, optime) {
                        (Some(b), Some(o)) => (o.time, o.increment) >= (b.time, b.increment),
                        (None, _) => true,
                        (Some(_), None) => false,
                    };
                    if (state == "SECONDARY" || state == "PRIMARY") && caught_up {
                        info!(%shard, %member, "back as {state}");
                        return Ok(());
                    }
                    last = format!("{state}, optime {optime:?} (waiting for {before:?})");
                }
                Err(e) => last = format!("{e:#}"),
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{member} of shard {shard} is not back as a caught-up SECONDARY within {} s: {last}",
                    BACK_WAIT.as_secs()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

fn members(status: &Document) -> Vec<&Document> {
    status.get_array("members").map(|a| a.iter().filter_map(Bson::as_document).collect()).unwrap_or_default()
}

fn optime_ts(member: &Document) -> Option<bson::Timestamp> {
    member.get_document("optime").ok()?.get_timestamp("ts").ok()
}

/// The primary's address and optime in a `replSetGetStatus` answer.
fn primary_of(status: &Document) -> Option<(String, bson::Timestamp)> {
    let primary = members(status).into_iter().find(|m| m.get_str("stateStr").is_ok_and(|s| s == "PRIMARY"))?;
    let ts = optime_ts(primary).unwrap_or(bson::Timestamp { time: 0, increment: 0 });
    Some((primary.get_str("name").ok()?.to_owned(), ts))
}

fn config_client(addrs: &[String]) -> ConfigClient {
    let settings =
        ClientSettings { rpc_timeout: METRICS_TIMEOUT, connect_timeout: METRICS_TIMEOUT, ..Default::default() };
    ConfigClient::new(addrs.to_vec(), settings)
}

async fn config_leader(addrs: &[String]) -> Option<String> {
    let client = config_client(addrs);
    for addr in addrs {
        if let Ok(m) = client.metrics(addr).await
            && m.state == "Leader"
        {
            return Some(addr.clone());
        }
    }
    None
}

/// Until `member` answers as a Follower or Leader and the group has a leader.
async fn wait_config_member(addrs: &[String], member: &str) -> anyhow::Result<()> {
    let client = config_client(addrs);
    let deadline = tokio::time::Instant::now() + BACK_WAIT;
    let mut last;
    loop {
        match client.metrics(member).await {
            Ok(m) if m.state == "Leader" || (m.state == "Follower" && config_leader(addrs).await.is_some()) => {
                info!(%member, state = %m.state, "config server back");
                return Ok(());
            }
            Ok(m) => last = format!("{} in term {}", m.state, m.term),
            Err(e) => last = e.to_string(),
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("config server {member} is not back in its group within {} s: {last}", BACK_WAIT.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(name: &str, connect: &str) -> ProcessPlan {
        ProcessPlan {
            name: name.into(),
            role: Role::Shard,
            host: "h".into(),
            connect: connect.into(),
            data_dir: None,
            log_path: "x.log".into(),
            args: Vec::new(),
        }
    }

    #[test]
    fn the_leader_restarts_last() {
        let (a, b, c) = (process("c1", "h:1"), process("c2", "h:2"), process("c3", "h:3"));
        assert_eq!(config_order(&[&a, &b, &c], Some("h:1")), ["c2", "c3", "c1"]);
        assert_eq!(config_order(&[&a, &b, &c], None), ["c1", "c2", "c3"]);
        assert_eq!(config_order(&[&b], Some("h:1")), ["c2"]);
    }

    #[test]
    fn secondaries_first_then_the_primary_after_its_step_down() {
        let (a, b, c) = (process("s-1", "h:1"), process("s-2", "h:2"), process("s-3", "h:3"));
        let steps = shard_steps(&[&a, &b, &c], Some("h:2"));
        let r = |n: &str| Step::Restart(n.into());
        assert_eq!(steps, [r("s-1"), r("s-3"), Step::StepDown("s-2".into()), r("s-2")]);
        // The primary lives on another host: only restarts here, no step-down.
        assert_eq!(shard_steps(&[&a, &c], Some("h:2")), [r("s-1"), r("s-3")]);
    }
}
