//! `shoal status`: what `replSetGetStatus {shard}` says about every shard, asked through a
//! router, printed as a table (MongoDB's `rs.status()` / `rs.printSecondaryReplicationInfo()`
//! figures: each member's name, state, health, optime and how far it is behind its primary), and
//! the config servers' Raft leader when their addresses are known (from the spec).
//!
//! ```text
//!  shoal status --router host:port | -f SPEC.yaml
//!     --driver--> router: listShards, then replSetGetStatus {shard} per shard --> render()
//!     --gRPC----> config servers: Metrics (only with a spec)
//! ```
//!
//! Reads only; every call is bounded. [`render`] is pure and unit-tested.

use std::time::Duration;

use anyhow::Context;
use bson::{Bson, Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};

use crate::cli::StatusArgs;
use crate::router_client::{Login, command};
use crate::spec::ClusterSpec;

/// Bounds one config server's Metrics call.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// One shard's answer: its `replSetGetStatus` document, or why there is none.
pub type ShardStatus = (String, Result<Document, String>);

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let (router, config_servers, tls_options) = targets(&args)?;
    let login = Login {
        username: args.username.clone(),
        password: args.password.clone(),
        authentication_database: args.authentication_database.clone(),
    };
    let client = crate::router_client::connect(&router, &tls_options, &login, "shoal-status").await?;
    let admin = client.database("admin");
    let shards = command(&admin, doc! { "listShards": 1 }).await.with_context(|| format!("listShards on {router}"))?;
    let mut statuses = Vec::new();
    for shard in shards.get_array("shards").map(|a| a.as_slice()).unwrap_or_default() {
        let Some(id) = shard.as_document().and_then(|s| s.get_str("_id").ok()) else { continue };
        let status = command(&admin, doc! { "replSetGetStatus": 1, "shard": id }).await.map_err(|e| format!("{e:#}"));
        statuses.push((id.to_owned(), status));
    }
    let leader = if config_servers.is_empty() { None } else { Some(config_leader(&config_servers).await) };
    print!("{}", render(&router, leader.as_deref(), &statuses));
    Ok(())
}

/// The router to ask, the config servers (empty unless a spec is used) and the connection string
/// options a TLS router needs. With a secured spec, this process authenticates to the config
/// servers with the cluster's credentials from `--data-dir`.
fn targets(args: &StatusArgs) -> anyhow::Result<(String, Vec<String>, String)> {
    if let Some(router) = &args.router
        && args.file.is_none()
    {
        return Ok((router.clone(), Vec::new(), String::new()));
    }
    let (spec, source) = ClusterSpec::load(args.file.as_deref())?;
    let tls_options = secured(&spec, &args.data_dir)?;
    let config = spec.config_servers.iter().map(|c| spec.endpoint(c.host.as_deref(), c.port).advertise).collect();
    let router = match (&args.router, spec.routers.first()) {
        (Some(r), _) => r.clone(),
        (None, Some(r)) => spec.endpoint(r.host.as_deref(), r.port).advertise,
        (None, None) => anyhow::bail!("{source} names no router; pass --router host:port"),
    };
    Ok((router, config, tls_options))
}

/// Installs the cluster's credentials (if the spec has security) and answers the TLS options for
/// the router's connection string.
pub(crate) fn secured(spec: &ClusterSpec, data_dir: &std::path::Path) -> anyhow::Result<String> {
    if spec.security.effective_cluster_auth().is_none() && spec.net.tls.mode == crate::spec::TlsModeSpec::Disabled {
        return Ok(String::new());
    }
    let data_dir = std::path::absolute(data_dir).with_context(|| format!("bad data dir {}", data_dir.display()))?;
    let secrets = crate::secrets::prepare(spec, &data_dir, &[], crate::secrets::Missing::Refuse)?;
    crate::security::install(&secrets.cluster_args(crate::secrets::LAUNCHER))?;
    if spec.net.tls.mode == crate::spec::TlsModeSpec::Disabled {
        return Ok(String::new());
    }
    let mut options = "&tls=true".to_owned();
    if let Some(ca) = &secrets.ca_file {
        options.push_str(&format!("&tlsCAFile={}", ca.display()));
    }
    if let Some(certificate) = secrets.certificate(crate::secrets::LAUNCHER) {
        options.push_str(&format!("&tlsCertificateKeyFile={}", certificate.display()));
    }
    Ok(options)
}

/// `leader <addr> (term N)`, or what the config servers said instead.
async fn config_leader(addrs: &[String]) -> String {
    let settings =
        ClientSettings { rpc_timeout: METRICS_TIMEOUT, connect_timeout: METRICS_TIMEOUT, ..Default::default() };
    let client = ConfigClient::new(addrs.to_vec(), settings);
    let mut seen = Vec::new();
    for addr in addrs {
        match client.metrics(addr).await {
            Ok(m) if m.state == "Leader" => return format!("leader {addr} (term {})", m.term),
            Ok(m) => seen.push(format!("{addr} {}", m.state)),
            Err(e) => seen.push(format!("{addr}: {e}")),
        }
    }
    format!("no leader ({})", seen.join(", "))
}

fn optime_of(member: &Document) -> Option<(i64, bson::Timestamp)> {
    let o = member.get_document("optime").ok()?;
    let t = match o.get("t") {
        Some(Bson::Int64(t)) => *t,
        Some(Bson::Int32(t)) => i64::from(*t),
        _ => return None,
    };
    Some((t, o.get_timestamp("ts").ok()?))
}

/// The status report: one table per shard.
pub fn render(router: &str, config_leader: Option<&str>, shards: &[ShardStatus]) -> String {
    let mut out = format!("router {router}\n");
    if let Some(leader) = config_leader {
        out.push_str(&format!("config servers: {leader}\n"));
    }
    for (id, status) in shards {
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                out.push_str(&format!("\n{id}: status unavailable: {e}\n"));
                continue;
            }
        };
        let term = match status.get("term") {
            Some(Bson::Int64(t)) => t.to_string(),
            Some(Bson::Int32(t)) => t.to_string(),
            _ => "?".into(),
        };
        out.push_str(&format!("\n{id}  (replica set {}, term {term})\n", status.get_str("set").unwrap_or(id)));
        let members: Vec<&Document> =
            status.get_array("members").map(|a| a.iter().filter_map(Bson::as_document).collect()).unwrap_or_default();
        let primary_time = members
            .iter()
            .find(|m| m.get_str("stateStr").is_ok_and(|s| s == "PRIMARY"))
            .and_then(|m| optime_of(m))
            .map(|(_, ts)| ts.time);
        out.push_str(&format!("  {:<24} {:<24} {:<6} {:<24} {}\n", "NAME", "STATE", "HEALTH", "OPTIME", "LAG"));
        for m in members {
            let optime = optime_of(m);
            let lag = match (primary_time, optime, m.get_str("stateStr")) {
                (_, _, Ok("PRIMARY")) => "-".to_owned(),
                // A zero optime is one the reporting member has not heard yet: its lag is unknown.
                (Some(p), Some((_, ts)), _) if ts.time > 0 => format!("{} s", p.saturating_sub(ts.time)),
                _ => "?".to_owned(),
            };
            let health = match m.get("health") {
                Some(Bson::Double(h)) => format!("{h}"),
                Some(other) => other.to_string(),
                None => "?".into(),
            };
            let optime = optime.map_or("-".to_owned(), |(t, ts)| format!("({t}, {}|{})", ts.time, ts.increment));
            out.push_str(&format!(
                "  {:<24} {:<24} {:<6} {:<24} {lag}\n",
                m.get_str("name").unwrap_or("?"),
                m.get_str("stateStr").unwrap_or("?"),
                health,
                optime,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use bson::Timestamp;

    use super::*;

    fn member(name: &str, state: &str, health: f64, time: u32) -> Document {
        doc! { "name": name, "stateStr": state, "health": health, "optime": { "ts": Timestamp { time, increment: 2 }, "t": 3i64 } }
    }

    #[test]
    fn members_are_listed_with_state_optime_and_lag_behind_the_primary() {
        let status = doc! {
            "set": "shard0",
            "term": 3i64,
            "members": [
                member("127.0.0.1:27101", "PRIMARY", 1.0, 100),
                member("127.0.0.1:27111", "SECONDARY", 1.0, 97),
                { "name": "127.0.0.1:27121", "stateStr": "(not reachable/healthy)", "health": 0.0 },
                member("127.0.0.1:27131", "SECONDARY", 1.0, 0),
            ],
        };
        let shards = vec![("shard0".to_owned(), Ok(status)), ("shard1".to_owned(), Err("ShardNotFound".to_owned()))];
        let out = render("127.0.0.1:27017", Some("leader 127.0.0.1:27019 (term 2)"), &shards);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "router 127.0.0.1:27017");
        assert_eq!(lines[1], "config servers: leader 127.0.0.1:27019 (term 2)");
        assert!(out.contains("shard0  (replica set shard0, term 3)"), "{out}");
        let row =
            |name: &str| lines.iter().find(|l| l.contains(name)).map(|l| l.split_whitespace().collect::<Vec<_>>());
        assert_eq!(row("27101").expect("primary row"), ["127.0.0.1:27101", "PRIMARY", "1", "(3,", "100|2)", "-"]);
        assert_eq!(
            row("27111").expect("secondary row"),
            ["127.0.0.1:27111", "SECONDARY", "1", "(3,", "97|2)", "3", "s"]
        );
        let down = row("27121").expect("down row");
        assert_eq!(&down[..], ["127.0.0.1:27121", "(not", "reachable/healthy)", "0", "-", "?"]);
        let unheard = row("27131").expect("unheard row");
        assert_eq!(unheard.last(), Some(&"?"), "an optime not yet heard has no lag: {out}");
        assert!(out.contains("shard1: status unavailable: ShardNotFound"), "{out}");
    }
}
