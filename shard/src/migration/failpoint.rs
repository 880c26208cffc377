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
//! The only action is `exit` (abort the process).

use std::sync::OnceLock;

static POINTS: OnceLock<Vec<String>> = OnceLock::new();

/// Installs the points from `spec` (`name=exit,...`) plus `SHOAL_FAILPOINTS`. The first call wins.
pub fn init(spec: &str) {
    let env = std::env::var("SHOAL_FAILPOINTS").unwrap_or_default();
    let points = parse(spec).into_iter().chain(parse(&env)).collect::<Vec<_>>();
    if !points.is_empty() {
        tracing::warn!(?points, "failpoints armed: this process will abort when it reaches them");
    }
    let _ = POINTS.set(points);
}

fn parse(spec: &str) -> Vec<String> {
    spec.split(',')
        .filter_map(|p| p.trim().split_once('='))
        .filter(|(_, action)| *action == "exit")
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Aborts the process if `name` is armed.
pub fn hit(name: &str) {
    let Some(points) = POINTS.get() else { return };
    if points.iter().any(|p| p == name) {
        tracing::error!(failpoint = name, "failpoint reached: aborting");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exit_actions_arm_a_point() {
        assert_eq!(
            parse("migration.after_clone=exit, a=b ,migration.x=exit,junk"),
            vec!["migration.after_clone".to_owned(), "migration.x".to_owned()]
        );
        assert!(parse("").is_empty());
    }
}
