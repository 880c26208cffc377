//! Loopback ports for test servers.
//!
//! Ports come from below the kernel's ephemeral range (32768–60999 on Linux): a port the OS hands
//! out for `:0` can be taken as the source port of any outgoing connection between the pick and
//! the server's bind ("Address already in use"), which a fixed range never is. Concurrent test
//! processes keep apart through a claim file per port (`<tmp>/shoal-test-ports/<port>`), reused
//! once it is older than [`CLAIM_STALE`]; a port is also probed by binding it. Each port comes
//! with its metrics twin, the port 1000 above it (`shoal up` serves every process's `/metrics`
//! there), claimed and probed the same way, so no test's metrics port is another test's server.

use std::fs::OpenOptions;
use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use rand::Rng;

/// Where test servers listen (below the ephemeral range, with their twins [`METRICS_OFFSET`] above).
const PORT_RANGE: Range<u16> = 20_000..31_000;
/// A process's default metrics port is its own port plus this (`shoal_telemetry::http::default_port`).
const METRICS_OFFSET: u16 = 1000;
/// A claim older than this belongs to a finished test (clusters bind within seconds).
const CLAIM_STALE: Duration = Duration::from_secs(15 * 60);
/// Random picks before giving up.
const PICKS_MAX: usize = 10_000;

/// `n` distinct loopback ports, free and claimed for this process with their metrics twins.
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let dir = std::env::temp_dir().join("shoal-test-ports");
    std::fs::create_dir_all(&dir).context("creating the port claim directory")?;
    let mut rng = rand::rng();
    let mut out = Vec::with_capacity(n);
    for _ in 0..PICKS_MAX {
        if out.len() == n {
            break;
        }
        let port = rng.random_range(PORT_RANGE);
        let twin = port + METRICS_OFFSET;
        let taken = |p: u16| out.iter().any(|&o| o == p || o + METRICS_OFFSET == p || p + METRICS_OFFSET == o);
        if taken(port) || taken(twin) || !free(&dir, port) {
            continue;
        }
        if !free(&dir, twin) {
            // Released at once rather than left to go stale.
            let _ = std::fs::remove_file(dir.join(port.to_string()));
            continue;
        }
        out.push(port);
    }
    ensure!(out.len() == n, "found only {} of {n} free ports in {PORT_RANGE:?}", out.len());
    Ok(out)
}

/// Claimed for this process and bindable now.
fn free(dir: &Path, port: u16) -> bool {
    claim(dir, port) && TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Creates `dir/port`, or takes it over when it is stale; false when another test holds it.
fn claim(dir: &Path, port: u16) -> bool {
    let path = dir.join(port.to_string());
    let create = || OpenOptions::new().write(true).create_new(true).open(&path).is_ok();
    if create() {
        return true;
    }
    let stale = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > CLAIM_STALE);
    stale && std::fs::remove_file(&path).is_ok() && create()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_outside_the_ephemeral_range_and_claimed() {
        let ports = free_ports(8).expect("ports");
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8);
        assert!(ports.iter().all(|p| PORT_RANGE.contains(p)));
        let dir = std::env::temp_dir().join("shoal-test-ports");
        assert!(!claim(&dir, ports[0]), "a fresh claim is not handed out twice");
        assert!(!claim(&dir, ports[0] + METRICS_OFFSET), "nor its metrics twin");
        assert!(ports.iter().all(|p| !ports.contains(&(p + METRICS_OFFSET))), "no port is another's twin");
    }
}
