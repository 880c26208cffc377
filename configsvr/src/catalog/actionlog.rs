//! The balancer's record (`config.actionlog` and `balancerStatus`): a second bounded ring of the
//! changelog's kind for the balancer's rounds and decisions, and the cluster-wide count of
//! balancer rounds, which the lease holder reports so every router answers `balancerStatus` alike.
//!
//! Invariants: the action log never holds more than [`CHANGELOG_ENTRIES_MAX`] entries (it is a
//! [`Changelog`]); the round count only grows. Neither ever changes chunks, so neither needs a
//! fencing token: a stale balancer can at worst add a line or a count.
//!
//! [`CHANGELOG_ENTRIES_MAX`]: super::CHANGELOG_ENTRIES_MAX
//! [`Changelog`]: super::Changelog

use std::collections::BTreeMap;

use super::CatalogError;
use super::Detail;
use super::Reply;
use super::changelog;
use super::{ClusterCatalog, Outcome};

impl ClusterCatalog {
    /// `Command::LogAction`: validated as a `LogChange` is, then appended to the action log.
    pub(super) fn log_action(
        &mut self,
        what: &str,
        ns: &str,
        details: &BTreeMap<String, Detail>,
    ) -> Result<Outcome, CatalogError> {
        let outcome = changelog::log_change(what, ns, details)?;
        Ok(outcome.into_action())
    }

    /// `Command::ReportBalancerRounds`: adds `completed` rounds and records `in_round`.
    pub(super) fn report_balancer_rounds(&mut self, completed: u64, in_round: bool, now: u64) -> Outcome {
        let rounds = &mut self.balancer_rounds;
        if completed == 0 && rounds.in_round == in_round {
            return Outcome::unchanged(Reply::Done);
        }
        rounds.completed = rounds.completed.saturating_add(completed);
        rounds.in_round = in_round;
        rounds.reported_at_ms = now;
        Outcome::silent(Reply::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BalancerRounds, CHANGELOG_ENTRIES_MAX, Command};
    use super::*;

    fn action(what: &str) -> Command {
        let details = BTreeMap::from([("why".to_owned(), Detail::from("because"))]);
        Command::LogAction { what: what.into(), ns: String::new(), details }
    }

    #[test]
    fn actions_go_to_the_action_log_only_and_stay_bounded() {
        let mut c = ClusterCatalog::new();
        let changes = c.changelog().entries().len();
        for i in 0..CHANGELOG_ENTRIES_MAX + 3 {
            c.apply(&action("balancer.round"), 1000 + i as u64).expect("logged");
        }
        assert_eq!(c.changelog().entries().len(), changes);
        assert_eq!(c.actionlog().entries().len(), CHANGELOG_ENTRIES_MAX);
        assert!(c.apply(&action(""), 5).is_err(), "an empty event name is refused");
    }

    #[test]
    fn rounds_add_up_and_repeats_change_nothing() {
        let mut c = ClusterCatalog::new();
        c.apply(&Command::ReportBalancerRounds { completed: 0, in_round: true }, 10).expect("report");
        let v = c.version();
        c.apply(&Command::ReportBalancerRounds { completed: 0, in_round: true }, 11).expect("report");
        assert_eq!(c.version(), v, "a repeated report is no change");
        c.apply(&Command::ReportBalancerRounds { completed: 3, in_round: false }, 12).expect("report");
        c.apply(&Command::ReportBalancerRounds { completed: 2, in_round: false }, 13).expect("report");
        assert_eq!(c.balancer_rounds(), &BalancerRounds { completed: 5, in_round: false, reported_at_ms: 13 });
    }
}
