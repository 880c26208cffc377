//! `shoal reconfig`: changes the config servers' Raft group one voter at a time (MongoDB changes a
//! config server replica set with `rs.add` / `rs.remove` on it; Shoal's config servers are a Raft
//! group, so this is openraft's membership change through the `AddLearner` and
//! `ChangeMembership` RPCs).
//!
//! ```text
//!  --add-config-server ID=HOST:PORT : the new server (already started, without --init) is added
//!     as a learner and caught up with the leader's log (blocking), then made a voter
//!  --remove-config-server ID        : the voter set without ID (joint consensus inside openraft)
//!  neither                          : print the group
//! ```
//!
//! One voter changes per call, so old and new majorities always overlap. Must not: remove the
//! last voter, add an id or address already in the group, or change anything else.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, bail};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_proto::config::MetricsReply;

use crate::cli::ReconfigArgs;

const LEADER_WAIT: Duration = Duration::from_secs(30);

pub async fn run(args: ReconfigArgs) -> anyhow::Result<()> {
    crate::security::install(&args.cluster_auth)?;
    let client = ConfigClient::new(args.config.clone(), ClientSettings::default());
    let before = group(&client, &args.config).await?;
    let voters: BTreeSet<u64> = before.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
    match (&args.add_config_server, args.remove_config_server) {
        (Some(add), None) => {
            let (id, addr) = parse_server(add)?;
            if let Some(existing) = before.members.iter().find(|m| m.id == id || m.addr == addr) {
                bail!(
                    "config server {} ({}) is already in the group; one id and one address per server",
                    existing.id,
                    existing.addr
                );
            }
            client.add_learner(id, &addr, true).await.with_context(|| format!("adding {id}={addr} as a learner"))?;
            let mut next = voters.clone();
            next.insert(id);
            change(&client, &next).await?;
            println!("config server {id} ({addr}) added: it caught up with the leader's log and votes");
        }
        (None, Some(id)) => {
            if !voters.contains(&id) {
                bail!("config server {id} is not a voter of the group ({})", ids(&voters));
            }
            if voters.len() == 1 {
                bail!("config server {id} is the last voter; add another before removing it");
            }
            let mut next = voters.clone();
            next.remove(&id);
            change(&client, &next).await?;
            println!("config server {id} removed: stop its process, and drop it from --config lists and specs");
        }
        (None, None) => {}
        (Some(_), Some(_)) => bail!("one change per call: --add-config-server or --remove-config-server"),
    }
    let after = group(&client, &args.config).await?;
    print!("{}", render(&after));
    Ok(())
}

async fn change(client: &ConfigClient, voters: &BTreeSet<u64>) -> anyhow::Result<()> {
    let voters: Vec<u64> = voters.iter().copied().collect();
    client.change_membership(&voters, false).await.with_context(|| format!("making the voters {voters:?}"))?;
    Ok(())
}

/// The group as the leader sees it (found through leader hints when no listed server leads).
async fn group(client: &ConfigClient, addrs: &[String]) -> anyhow::Result<MetricsReply> {
    let leader = crate::probe::wait_for_config_leader(addrs, Some(LEADER_WAIT)).await?;
    let metrics = client.metrics(&leader).await.with_context(|| format!("asking the leader {leader}"))?;
    if metrics.state != "Leader" {
        bail!("{leader} is no longer the leader ({}); try again", metrics.state);
    }
    Ok(metrics)
}

fn ids(voters: &BTreeSet<u64>) -> String {
    voters.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// `ID=HOST:PORT`.
fn parse_server(text: &str) -> anyhow::Result<(u64, String)> {
    let (id, addr) = text.split_once('=').with_context(|| format!("{text:?} is not ID=HOST:PORT"))?;
    let id: u64 = id.trim().parse().with_context(|| format!("bad id in {text:?}"))?;
    if id == 0 {
        bail!("config server ids start at 1");
    }
    let addr = addr.trim();
    if addr.rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok()).is_none() {
        bail!("{addr:?} is not HOST:PORT");
    }
    Ok((id, addr.to_owned()))
}

fn render(group: &MetricsReply) -> String {
    let mut out = format!("config servers (leader {} in term {}):\n", group.id, group.term);
    for member in &group.members {
        let role = if member.voter { "voter" } else { "learner" };
        let leader = if member.id == group.id { " (leader)" } else { "" };
        let _ = writeln!(out, "  {:>3}  {:<28} {role}{leader}", member.id, member.addr);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_an_id_and_an_address() {
        assert_eq!(parse_server("4=db4.example.net:27019").expect("parses"), (4, "db4.example.net:27019".to_owned()));
        assert!(parse_server("0=a:1").is_err());
        assert!(parse_server("4").is_err());
        assert!(parse_server("x=a:1").is_err());
        assert!(parse_server("4=a").is_err());
    }
}
