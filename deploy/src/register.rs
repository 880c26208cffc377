//! Registering shards in the catalog (`AddShard`): what `shoal up` does once a host's shards are
//! running, and `shoal deploy register`, the same step as a job of rendered manifests (a
//! Kubernetes Job, a Compose one-shot service, a systemd oneshot unit).
//!
//! Must not: register anything the caller did not name, or treat a refusal (the catalog has that
//! shard with other members) as retryable.

use std::time::Duration;

use anyhow::{Context, bail};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::Command;
use tracing::{info, warn};

use crate::cli::RegisterArgs;
use crate::plan::ShardRegistration;

/// Tries of one shard's registration; `AddShard` is idempotent, so a write whose outcome was
/// unknown (timeout, leader change) is simply sent again. Each try is bounded by the client's own
/// deadline (`ClientSettings::deadline`).
const REGISTER_ATTEMPTS_MAX: u32 = 3;
const REGISTER_BACKOFF_INITIAL: Duration = Duration::from_millis(200);

/// `shoal deploy register`: waits for a config leader (bounded by `--wait-secs` unless 0), then
/// registers every `--shard`.
pub async fn run(args: RegisterArgs) -> anyhow::Result<()> {
    let shards = args.shards.iter().map(|s| parse_shard(s)).collect::<anyhow::Result<Vec<_>>>()?;
    crate::security::install(&args.cluster_auth)?;
    let bound = (args.wait_secs > 0).then(|| Duration::from_secs(args.wait_secs));
    crate::probe::wait_for_config_leader(&args.config, bound).await?;
    register_shards(&args.config, &shards).await
}

/// `NAME=host:port,host:port,...`, the replica set named as the shard (as `shoal up` does).
fn parse_shard(text: &str) -> anyhow::Result<ShardRegistration> {
    let (name, members) =
        text.split_once('=').with_context(|| format!("--shard {text:?} is not NAME=host:port,host:port,..."))?;
    let members: Vec<String> = members.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect();
    if name.is_empty() || members.is_empty() {
        bail!("--shard {text:?} needs a name and at least one member");
    }
    if let Some(bad) = members.iter().find(|m| m.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none()) {
        bail!("--shard {text:?}: member {bad:?} is not host:port");
    }
    Ok(ShardRegistration { shard: name.to_owned(), replica_set: name.to_owned(), members })
}

/// Registers every shard in the catalog. Safe to repeat on every start: the catalog answers an
/// `AddShard` of a shard it already has, with the same replica set and members, as a success that
/// changes nothing. A shard it has with other members (the spec changed under an existing data
/// dir) is refused, and that refusal is reported as the error.
pub async fn register_shards(config_servers: &[String], shards: &[ShardRegistration]) -> anyhow::Result<()> {
    let client = ConfigClient::new(config_servers.to_vec(), ClientSettings::default());
    for shard in shards {
        let command = Command::AddShard {
            shard: shard.shard.clone(),
            replica_set: shard.replica_set.clone(),
            members: shard.members.clone(),
        };
        let mut backoff = REGISTER_BACKOFF_INITIAL;
        let mut attempt = 1;
        loop {
            match client.write(&command).await {
                Ok(written) => match written.outcome {
                    Ok(_) => {
                        info!(shard = %shard.shard, members = ?shard.members, catalog_version = written.catalog_version, "shard registered in the catalog");
                        break;
                    }
                    Err(refused) => bail!(
                        "the catalog refused to register shard {} ({}): {refused}; the data dir's catalog \
                         was made from a different spec (start with another --data-dir, or remove this one)",
                        shard.shard,
                        shard.members.join(",")
                    ),
                },
                Err(e) if attempt < REGISTER_ATTEMPTS_MAX => {
                    warn!(shard = %shard.shard, attempt, "registering the shard failed, retrying: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
                Err(e) => bail!("cannot register shard {} in the catalog after {attempt} attempts: {e}", shard.shard),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_argument_names_the_shard_and_its_members() {
        let shard = parse_shard("s0=a.example:27018, b.example:27018").expect("parses");
        assert_eq!(shard.shard, "s0");
        assert_eq!(shard.replica_set, "s0");
        assert_eq!(shard.members, ["a.example:27018", "b.example:27018"]);
        assert!(parse_shard("s0").is_err());
        assert!(parse_shard("=a:1").is_err());
        assert!(parse_shard("s0=").is_err());
        assert!(parse_shard("s0=a.example").is_err());
    }
}
