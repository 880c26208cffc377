//! Balancer admin commands: `balancerStart`, `balancerStop`, `balancerStatus`,
//! `balancerCollectionStatus`, `configureCollectionBalancing`. Every router answers them alike:
//! the mode lives in the catalog's settings, the round count and "in a round" flag in the catalog
//! record the lease holder reports (`Command::ReportBalancerRounds`; see balancer/runtime.rs), and
//! collection compliance is the policy's verdict on fresh statistics.

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{BALANCER_LEASE, BalancerMode, ClusterCatalogView, Command, SettingsUpdate};
use shoal_proto::config::CatalogPart;

use super::{body_of, raw};
use crate::balancer::policy::{self, Action, Memory, MoveReason, SplitReason};
use crate::balancer::stats;
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// `balancerStop` waits at most this long (or `maxTimeMS`) for a running round to end.
const STOP_WAIT_MAX: Duration = Duration::from_secs(60);
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(200);

async fn set_mode(state: &RouterState, mode: BalancerMode) -> Result<(), CommandError> {
    let update = SettingsUpdate { balancer_mode: Some(mode), ..SettingsUpdate::default() };
    state.catalog.write(&Command::SetSettings(update)).await.map(|_| ())
}

/// Whether the lease holder reported being inside a round and still holds the lease.
fn in_round(catalog: &ClusterCatalogView) -> bool {
    let live = catalog.leases().get(BALANCER_LEASE).is_some_and(|l| l.is_live(catalog.now_ms()));
    live && catalog.balancer_rounds().in_round
}

fn max_time(body: &Document) -> Option<Duration> {
    let ms = match body.get("maxTimeMS") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) => *f as i64,
        _ => return None,
    };
    u64::try_from(ms).ok().filter(|ms| *ms > 0).map(Duration::from_millis)
}

/// `balancerStart` (`sh.startBalancer`, `sh.setBalancerState(true)`): mode full.
pub async fn balancer_start(state: &RouterState, _conn: &ConnContext, _cmd: &ClientCommand) -> HandlerResult {
    set_mode(state, BalancerMode::Full).await?;
    // A balancer in this router starts its round now rather than after its idle interval (one in
    // another router notices at its next round).
    state.balancer_wake.notify_one();
    raw(&doc! {})
}

/// `balancerStop` (`sh.stopBalancer`): mode off, then waits for a round in progress to end, as
/// MongoDB does, so no balancer migration runs once it returns.
pub async fn balancer_stop(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    set_mode(state, BalancerMode::Off).await?;
    let wait = max_time(&body).unwrap_or(STOP_WAIT_MAX).min(STOP_WAIT_MAX);
    let deadline = Instant::now() + wait;
    while in_round(&state.catalog.view(&[CatalogPart::Leases]).await?) {
        if Instant::now() >= deadline {
            return Err(CommandError::new(
                ErrorCode::ExceededTimeLimit,
                "the balancer is stopped, but its current round was still running when the wait ran out",
            ));
        }
        tokio::time::sleep(STOP_POLL_INTERVAL).await;
    }
    raw(&doc! {})
}

/// `balancerStatus` (`sh.isBalancerRunning`, `sh.status`).
pub async fn balancer_status(state: &RouterState, _conn: &ConnContext, _cmd: &ClientCommand) -> HandlerResult {
    let catalog = state.catalog.view(&[CatalogPart::Settings, CatalogPart::Leases]).await?;
    let mode = if catalog.settings().balancer_enabled() { "full" } else { "off" };
    let rounds = i64::try_from(catalog.balancer_rounds().completed).unwrap_or(i64::MAX);
    raw(&doc! { "mode": mode, "inBalancerRound": in_round(&catalog), "numBalancerRounds": rounds })
}

fn namespace(body: &Document, cmd: &str) -> Result<String, CommandError> {
    match body.get(cmd) {
        Some(Bson::String(s)) if s.split_once('.').is_some_and(|(d, c)| !d.is_empty() && !c.is_empty()) => {
            Ok(s.clone())
        }
        Some(Bson::String(s)) => {
            Err(CommandError::new(ErrorCode::InvalidNamespace, format!("Invalid namespace specified '{s}'")))
        }
        _ => Err(CommandError::type_mismatch(format!("BSON field '{cmd}' is the wrong type, expected type 'string'"))),
    }
}

fn not_sharded(ns: &str) -> CommandError {
    CommandError::new(ErrorCode::NamespaceNotSharded, format!("Collection {ns} is not sharded."))
}

/// MongoDB's `firstComplianceViolation` for the first action the policy wants for a collection.
pub fn violation(action: &Action) -> &'static str {
    match action {
        Action::Move { reason: MoveReason::Draining, .. } => "draining",
        Action::Move { reason: MoveReason::ZoneViolation, .. }
        | Action::Split { reason: SplitReason::ZoneBoundary, .. } => "zoneViolation",
        Action::Move { .. } | Action::Split { .. } => "chunksImbalance",
        Action::Merge { .. } => "defragmentingChunks",
        Action::MarkJumbo { .. } => "jumboChunks",
    }
}

/// `balancerCollectionStatus: "db.coll"`: what the balancer would do for it now.
pub async fn balancer_collection_status(
    state: &RouterState,
    _conn: &ConnContext,
    cmd: &ClientCommand,
) -> HandlerResult {
    let body = body_of(cmd)?;
    let ns = namespace(&body, "balancerCollectionStatus")?;
    let catalog = state.catalog.view(policy::INPUT).await?;
    if catalog.collection(&ns).is_none() {
        return Err(not_sharded(&ns));
    }
    let now = crate::balancer::runtime::now_ms();
    let stats = stats::gather(state, &catalog, Some(&ns)).await;
    // A fresh memory: nothing has been hot for long and no merge is due, as after a lease change.
    let memory = Memory { since_ms: now, ..Memory::default() };
    let plan = policy::plan(&catalog, &stats, &memory, &state.settings.balancer.params, now);
    let first = plan.decisions.iter().find(|d| action_ns(&d.action) == ns);
    Ok(match first {
        None => raw(&doc! { "balancerCompliant": true })?,
        Some(d) => raw(&doc! {
            "balancerCompliant": false,
            "firstComplianceViolation": violation(&d.action),
            "details": { "why": &d.why },
        })?,
    })
}

fn action_ns(action: &Action) -> &str {
    match action {
        Action::Split { ns, .. }
        | Action::Move { ns, .. }
        | Action::Merge { ns, .. }
        | Action::MarkJumbo { ns, .. } => ns,
    }
}

/// `configureCollectionBalancing: ns, chunkSize (MiB, 0 = back to the cluster's), enableAutoMerger`.
pub async fn configure_collection_balancing(
    state: &RouterState,
    _conn: &ConnContext,
    cmd: &ClientCommand,
) -> HandlerResult {
    let body = body_of(cmd)?;
    let ns = namespace(&body, "configureCollectionBalancing")?;
    let chunk_size_mib = parse_chunk_size(&body)?;
    if body.contains_key("defragmentCollection") {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "configureCollectionBalancing: defragmentCollection is not supported; the auto-merger merges \
             small neighbouring chunks instead",
        ));
    }
    let enable_auto_merge = match body.get("enableAutoMerger") {
        None | Some(Bson::Null) => None,
        Some(Bson::Boolean(b)) => Some(*b),
        Some(other) => {
            return Err(CommandError::new(
                ErrorCode::TypeMismatch,
                format!("configureCollectionBalancing: enableAutoMerger must be a boolean, not {other}"),
            ));
        }
    };
    if state.catalog.collection(&ns).await?.is_none() {
        return Err(not_sharded(&ns));
    }
    if chunk_size_mib.is_some() || enable_auto_merge.is_some() {
        state
            .catalog
            .write(&Command::ConfigureCollection { ns, no_balance: None, chunk_size_mib, enable_auto_merge })
            .await?;
    }
    raw(&doc! {})
}

pub fn parse_chunk_size(body: &Document) -> Result<Option<u32>, CommandError> {
    let n = match body.get("chunkSize") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) if f.fract() == 0.0 => *f as i64,
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'configureCollectionBalancing.chunkSize' is the wrong type, expected an integer",
            ));
        }
    };
    u32::try_from(n)
        .map(Some)
        .map_err(|_| CommandError::bad_value(format!("chunkSize must be between 0 and 1024 MiB, not {n}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_and_namespace_parsing() {
        assert_eq!(parse_chunk_size(&doc! {}).ok(), Some(None));
        assert_eq!(parse_chunk_size(&doc! { "chunkSize": 64 }).ok(), Some(Some(64)));
        assert_eq!(parse_chunk_size(&doc! { "chunkSize": 0.0 }).ok(), Some(Some(0)));
        assert!(parse_chunk_size(&doc! { "chunkSize": -1 }).is_err());
        assert!(parse_chunk_size(&doc! { "chunkSize": "big" }).is_err());
        assert_eq!(namespace(&doc! { "x": "db.c" }, "x").ok().as_deref(), Some("db.c"));
        for bad in [doc! { "x": "db" }, doc! { "x": ".c" }, doc! { "x": 1 }] {
            assert!(namespace(&bad, "x").is_err(), "{bad}");
        }
        assert_eq!(max_time(&doc! { "maxTimeMS": 1500 }), Some(Duration::from_millis(1500)));
        assert_eq!(max_time(&doc! { "maxTimeMS": 0 }), None);
    }
}
