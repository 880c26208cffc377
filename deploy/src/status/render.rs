//! The status report as text: the config servers' Raft states, the routers, then one table per
//! shard. Pure: it formats what `shoal status` gathered and decides nothing else.

use bson::{Bson, Document};

/// One shard's answer: its `replSetGetStatus` document, or why there is none.
pub type ShardStatus = (String, Result<Document, String>);

/// A process of the spec and what asking it gave.
#[derive(Debug, Clone)]
pub struct Process<S> {
    /// The spec's name for it (empty for a `--router` given by address).
    pub name: String,
    /// `host:port` as the others dial it.
    pub address: String,
    pub state: S,
}

impl<S> Process<S> {
    pub fn map<T>(self, f: impl FnOnce(S) -> T) -> Process<T> {
        Process { name: self.name, address: self.address, state: f(self.state) }
    }
}

/// A config server's own view of its Raft group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigServerState {
    /// openraft's server state: Leader, Follower, Candidate, Learner, Shutdown.
    pub state: String,
    pub term: u64,
    /// The last log index its catalog has applied.
    pub applied: u64,
}

/// The whole report. `asked` is the router the shard tables came through; `routers` is empty when
/// they were not probed (a `--router` given alone); `metrics` lists each process's metrics URL
/// (empty without a spec).
pub fn render(
    asked: &str,
    config_servers: &[Process<Result<ConfigServerState, String>>],
    routers: &[Process<Result<(), String>>],
    shards: &[ShardStatus],
    metrics: &[Process<()>],
) -> String {
    let mut out = format!("router {asked}\n");
    if !config_servers.is_empty() {
        out.push_str(&config_table(config_servers));
    }
    if !routers.is_empty() {
        out.push_str("\nrouters\n");
        out.push_str(&format!("  {:<16} {:<24} {}\n", "NAME", "ADDRESS", "STATE"));
        for router in routers {
            let state = match &router.state {
                Ok(()) => "up".to_owned(),
                Err(e) => format!("unreachable: {e}"),
            };
            out.push_str(&format!("  {:<16} {:<24} {state}\n", router.name, router.address));
        }
    }
    for (id, status) in shards {
        match status {
            Ok(status) => out.push_str(&shard_table(id, status)),
            Err(e) => out.push_str(&format!("\n{id}: status unavailable: {e}\n")),
        }
    }
    if !metrics.is_empty() {
        out.push_str("\nmetrics (Prometheus text over HTTP)\n");
        for process in metrics {
            out.push_str(&format!("  {:<16} http://{}/metrics\n", process.name, process.address));
        }
    }
    out
}

/// `config servers: leader ADDR (term N)` (or why there is none), then a row per server with how
/// many log entries it has applied fewer than the leader.
fn config_table(servers: &[Process<Result<ConfigServerState, String>>]) -> String {
    let leader = servers.iter().find_map(|s| match &s.state {
        Ok(state) if state.state == "Leader" => Some((s, state)),
        _ => None,
    });
    let mut out = match leader {
        Some((server, state)) => format!("config servers: leader {} (term {})\n", server.address, state.term),
        None => "config servers: no leader\n".to_owned(),
    };
    out.push_str(&format!(
        "  {:<16} {:<24} {:<10} {:<6} {:<9} {}\n",
        "NAME", "ADDRESS", "STATE", "TERM", "APPLIED", "LAG"
    ));
    for server in servers {
        match &server.state {
            Ok(state) => {
                let lag = match leader {
                    Some((l, _)) if l.address == server.address => "-".to_owned(),
                    Some((_, l)) => l.applied.saturating_sub(state.applied).to_string(),
                    None => "?".to_owned(),
                };
                out.push_str(&format!(
                    "  {:<16} {:<24} {:<10} {:<6} {:<9} {lag}\n",
                    server.name, server.address, state.state, state.term, state.applied
                ));
            }
            Err(e) => out.push_str(&format!("  {:<16} {:<24} unreachable: {e}\n", server.name, server.address)),
        }
    }
    out
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

/// One shard's members: name, state, health, optime and seconds behind the primary.
fn shard_table(id: &str, status: &Document) -> String {
    let term = match status.get("term") {
        Some(Bson::Int64(t)) => t.to_string(),
        Some(Bson::Int32(t)) => t.to_string(),
        _ => "?".into(),
    };
    let mut out = format!("\n{id}  (replica set {}, term {term})\n", status.get_str("set").unwrap_or(id));
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
    out
}

#[cfg(test)]
mod tests {
    use bson::{Timestamp, doc};

    use super::*;

    fn member(name: &str, state: &str, health: f64, time: u32) -> Document {
        doc! { "name": name, "stateStr": state, "health": health, "optime": { "ts": Timestamp { time, increment: 2 }, "t": 3i64 } }
    }

    fn words<'a>(out: &'a str, needle: &str) -> Vec<&'a str> {
        out.lines().find(|l| l.contains(needle)).map(|l| l.split_whitespace().collect()).unwrap_or_default()
    }

    fn process<S>(name: &str, address: &str, state: S) -> Process<S> {
        Process { name: name.to_owned(), address: address.to_owned(), state }
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
        let out = render("127.0.0.1:27017", &[], &[], &shards, &[]);
        assert_eq!(out.lines().next(), Some("router 127.0.0.1:27017"));
        assert!(out.contains("shard0  (replica set shard0, term 3)"), "{out}");
        assert_eq!(words(&out, "27101"), ["127.0.0.1:27101", "PRIMARY", "1", "(3,", "100|2)", "-"]);
        assert_eq!(words(&out, "27111"), ["127.0.0.1:27111", "SECONDARY", "1", "(3,", "97|2)", "3", "s"]);
        assert_eq!(words(&out, "27121"), ["127.0.0.1:27121", "(not", "reachable/healthy)", "0", "-", "?"]);
        assert_eq!(words(&out, "27131").last(), Some(&"?"), "an optime not yet heard has no lag: {out}");
        assert!(out.contains("shard1: status unavailable: ShardNotFound"), "{out}");
    }

    #[test]
    fn every_config_server_and_router_gets_a_row_with_its_state() {
        let raft = |state: &str, term, applied| Ok(ConfigServerState { state: state.to_owned(), term, applied });
        let config = [
            process("cfg1", "10.0.0.1:27019", raft("Follower", 4, 117)),
            process("cfg2", "10.0.0.2:27019", raft("Leader", 4, 120)),
            process("cfg3", "10.0.0.3:27019", Err("10.0.0.3:27019: no answer".to_owned())),
        ];
        let routers = [
            process("router0", "10.0.0.1:27017", Ok(())),
            process("router1", "10.0.0.3:27017", Err("connection refused".to_owned())),
        ];
        let metrics = [process("router0", "10.0.0.1:28017", ())];
        let out = render("10.0.0.1:27017", &config, &routers, &[], &metrics);
        assert!(out.contains("config servers: leader 10.0.0.2:27019 (term 4)"), "{out}");
        let listed = out.lines().skip_while(|l| !l.starts_with("metrics")).nth(1).map(str::split_whitespace);
        assert_eq!(listed.map(Iterator::collect::<Vec<_>>), Some(vec!["router0", "http://10.0.0.1:28017/metrics"]));
        assert_eq!(words(&out, "cfg1"), ["cfg1", "10.0.0.1:27019", "Follower", "4", "117", "3"]);
        assert_eq!(words(&out, "cfg2"), ["cfg2", "10.0.0.2:27019", "Leader", "4", "120", "-"]);
        assert_eq!(words(&out, "cfg3")[..3], ["cfg3", "10.0.0.3:27019", "unreachable:"]);
        assert_eq!(words(&out, "router0"), ["router0", "10.0.0.1:27017", "up"]);
        assert_eq!(words(&out, "router1"), ["router1", "10.0.0.3:27017", "unreachable:", "connection", "refused"]);
    }

    #[test]
    fn without_a_leader_lag_is_unknown() {
        let config = [process(
            "cfg1",
            "127.0.0.1:27019",
            Ok(ConfigServerState { state: "Candidate".into(), term: 9, applied: 5 }),
        )];
        let out = render("127.0.0.1:27017", &config, &[], &[], &[]);
        assert!(out.contains("config servers: no leader"), "{out}");
        assert_eq!(words(&out, "cfg1").last(), Some(&"?"));
    }
}
