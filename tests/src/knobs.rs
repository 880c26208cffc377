//! Environment knobs of the long-running tests (fault campaigns, fuzzers): numbers, and seeds that
//! are printed and replayed. One reading rule for every campaign.

/// `name` as an unsigned number; `None` if unset or not a number.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The seed in `name`: a number replays a run, `random` draws one, unset is `default` (so CI runs
/// the same cases every time; `None` draws one when unset too).
pub fn seed(name: &str, default: Option<u64>) -> u64 {
    match std::env::var(name).as_deref() {
        Ok("random") => rand::random(),
        _ => env_u64(name).or(default).unwrap_or_else(rand::random),
    }
}
