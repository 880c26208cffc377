//! Deterministic crash points for testing migration crash safety.
//!
//! `SHOAL_FAILPOINTS=migration.after_clone=exit,migration.recipient_after_batch=exit` (or the
//! shard's `--failpoints` flag) makes the process `std::process::abort()` when it reaches a named
//! point, as a kill -9 would at that moment. Unset, a point costs one load of an initialised
//! `OnceLock`. Points (in protocol order):
//!
//! | name | where |
//! |---|---|
//! | `migration.after_start` | donor: record persisted, recipient started |
//! | `migration.after_clone` | donor: every cloned batch acked |
//! | `migration.in_catch_up` | donor: after the first catch-up pass was acked |
//! | `migration.in_critical_section` | donor: writes held, final catch-up acked, phase Committing persisted, before the catalog commit |
//! | `migration.after_commit` | donor: catalog commit succeeded, before refresh/recipient commit |
//! | `migration.recipient_after_start` | recipient: receiving record persisted, before the ack |
//! | `migration.recipient_after_batch` | recipient: a batch is durable, before the ack |
//! | `migration.recipient_before_commit` | recipient: told of the commit, before dropping its record |
//!
//! Actions: `exit` (abort the process) and `delay:<ms>` (hold the migration there for that long,
//! so a test can kill another process, e.g. the router that asked for the move, mid-phase).

use std::sync::OnceLock;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Exit,
    Delay(Duration),
}

static POINTS: OnceLock<Vec<(String, Action)>> = OnceLock::new();

/// Installs the points from `spec` (`name=exit,...`) plus `SHOAL_FAILPOINTS`. The first call wins.
pub fn init(spec: &str) {
    let env = std::env::var("SHOAL_FAILPOINTS").unwrap_or_default();
    let points = parse(spec).into_iter().chain(parse(&env)).collect::<Vec<_>>();
    if !points.is_empty() {
        tracing::warn!(?points, "failpoints armed: this process will abort when it reaches them");
    }
    let _ = POINTS.set(points);
}

fn parse(spec: &str) -> Vec<(String, Action)> {
    spec.split(',')
        .filter_map(|p| p.trim().split_once('='))
        .filter_map(|(name, action)| {
            let action = match action.split_once(':') {
                None if action == "exit" => Action::Exit,
                Some(("delay", ms)) => Action::Delay(Duration::from_millis(ms.parse().ok()?)),
                _ => return None,
            };
            Some((name.to_owned(), action))
        })
        .collect()
}

/// Aborts the process, or pauses this task, if `name` is armed.
pub fn hit(name: &str) {
    let Some(points) = POINTS.get() else { return };
    for (point, action) in points {
        if point != name {
            continue;
        }
        match action {
            Action::Exit => {
                tracing::error!(failpoint = name, "failpoint reached: aborting");
                std::process::abort();
            }
            Action::Delay(d) => {
                tracing::warn!(failpoint = name, delay = ?d, "failpoint reached: pausing");
                // Test-only: keep the runtime's other tasks running while this one waits.
                tokio::task::block_in_place(|| std::thread::sleep(*d));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_and_delay_actions_arm_a_point() {
        assert_eq!(
            parse("migration.after_clone=exit, a=b ,migration.x=delay:250,junk,y=delay:z"),
            vec![
                ("migration.after_clone".to_owned(), Action::Exit),
                ("migration.x".to_owned(), Action::Delay(Duration::from_millis(250)))
            ]
        );
        assert!(parse("").is_empty());
    }
}
