//! Waiting for a write concern once a write is applied on the primary.
//!
//! `w: N` waits until N members (this one included) have applied the write (`j`: have it on
//! disk); `w: "majority"` until the commit point covers it. The wait ends with a
//! `writeConcernError` — the write stays applied — on `wtimeout` (64 WriteConcernFailed, as
//! MongoDB reports it), when the member stops being primary (189 PrimarySteppedDown: it may be
//! rolled back, and drivers retry it), or at once when `w` exceeds the group's size (100).

use std::time::Instant;

use shoal_proto::ErrorCode;

use super::Repl;
use super::state::MemberState;
use crate::error::ExecError;
use crate::exec::write_concern::{W, WriteConcern};
use crate::store::oplog::OpTime;

/// Waits until `optime` meets `wc`. `Err` is the reply's `writeConcernError`.
pub async fn wait(repl: &Repl, wc: &WriteConcern, optime: OpTime) -> Result<(), ExecError> {
    if wc.unacknowledged || matches!(wc.w, W::Nodes(0 | 1)) {
        return Ok(());
    }
    let n = match wc.w {
        W::Majority => return wait_majority(repl, wc, optime).await,
        W::Nodes(n) => n as usize,
    };
    let members = repl.member_count();
    if n > members {
        return Err(ExecError::new(
            ErrorCode::UnsatisfiableWriteConcern,
            format!("Not enough data-bearing nodes: w:{n} asked, the replica group has {members}"),
        ));
    }
    // `w: N` recounts at every member's progress report.
    let deadline = wc.wtimeout.map(|t| Instant::now() + t);
    let start = repl.role();
    let mut roles = repl.subscribe_role();
    let mut progress = repl.subscribe_progress();
    loop {
        if repl.members_at(optime, wc.journal) >= n {
            return Ok(());
        }
        stepped_down(&roles.borrow_and_update(), &start)?;
        progress.borrow_and_update();
        tokio::select! {
            _ = roles.changed() => {}
            _ = progress.changed() => {}
            _ = timed_out(deadline) => {
                return Err(ExecError::new(ErrorCode::WriteConcernFailed, "waiting for replication timed out"));
            }
        }
    }
}

/// `w: "majority"`: woken only by the commit-point advance that covers `optime` (see
/// [`super::majority_waiters`]) or by a role change.
async fn wait_majority(repl: &Repl, wc: &WriteConcern, optime: OpTime) -> Result<(), ExecError> {
    let deadline = wc.wtimeout.map(|t| Instant::now() + t);
    let start = repl.role();
    let mut roles = repl.subscribe_role();
    loop {
        if repl.commit_point() >= optime {
            return Ok(());
        }
        stepped_down(&roles.borrow_and_update(), &start)?;
        let mut registration = repl.majority_waiters.register(optime);
        // An advance just before the registration woke nobody: look again.
        if repl.commit_point() >= optime {
            return Ok(());
        }
        tokio::select! {
            _ = &mut registration.woken => {}
            _ = roles.changed() => {}
            _ = timed_out(deadline) => {
                return Err(ExecError::new(ErrorCode::WriteConcernFailed, "waiting for replication timed out"));
            }
        }
    }
}

/// PrimarySteppedDown once this member is no longer primary of the term the wait began in.
fn stepped_down(role: &super::RoleView, start: &super::RoleView) -> Result<(), ExecError> {
    let standalone = role.state == MemberState::Standalone;
    if !standalone && (role.term != start.term || role.state != MemberState::Primary) {
        return Err(ExecError::new(
            ErrorCode::PrimarySteppedDown,
            "Primary stepped down while waiting for replication",
        ));
    }
    Ok(())
}

/// Never, without a deadline.
async fn timed_out(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// How long a migration waits for what it wrote to reach a majority of its group.
pub const MIGRATION_MAJORITY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until everything this member wrote so far is durable here and majority-committed in its
/// group: a migration's recipient acknowledges data only then, so a failover after the catalog
/// names it owner cannot lose the range.
pub async fn newest_majority_committed(
    repl: &Repl,
    store: &crate::store::Store,
    limit: std::time::Duration,
) -> Result<(), ExecError> {
    let position = store.position();
    store.wait_durable(position.seq).await?;
    repl.set_durable(position.optime);
    let wc = WriteConcern { wtimeout: Some(limit), ..WriteConcern::default() };
    wait(repl, &wc, position.optime).await
}
