//! Informational and housekeeping commands: what shells, drivers and monitoring tools send around
//! a connection that is not about data (`ping`, `buildInfo`, `serverStatus`, `getParameter`, ...).
//!
//! Owns: the version this router claims (MongoDB 7.0, matching `maxWireVersion` 21 in hello) and
//! the replies of these commands. Each handler is a thin shell over a pure `*_reply` function so
//! the replies are testable without a running router. `ok` is appended by the dispatcher.
//!
//! Invariant: nothing here may fail for a well-formed request from mongosh, pymongo, node or the
//! Java 3.6 driver on connect: they abort the connection when these commands error.

use std::time::Duration;

use bson::raw::{CStr, RawBsonRef};
use bson::{RawArrayBuf, RawBson, RawDocument, RawDocumentBuf, cstr, rawdoc};
use shoal_proto::ErrorCode;
use shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES;

use crate::cmd::handshake::connection_id_value;
use crate::command::Command;
use crate::commands::COMMANDS;
use crate::counters::{CommandCount, NetworkCounts, OpCounts};
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// The MongoDB release we present as. mongosh semver-compares it; drivers ignore it.
pub const MONGODB_VERSION: &str = "7.0.0";
pub const MONGODB_VERSION_ARRAY: [i32; 4] = [7, 0, 0, 0];
pub const FEATURE_COMPATIBILITY_VERSION: &str = "7.0";

/// Commands MongoDB refuses outside the `admin` database (`adminOnly()`), of those we serve.
/// Logs `getLog` knows: the process's recent lines and its startup warnings
/// (`shoal_telemetry::log`, MongoDB's JSON lines).
const LOG_NAMES: &[&str] = &["global", "startupWarnings"];

pub async fn ping(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    Ok(RawDocumentBuf::new())
}

pub async fn build_info(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    Ok(build_info_reply())
}

pub async fn server_status(state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    let c = &state.counters;
    let current = c.connections_current.get().max(0);
    let mut reply = server_status_reply(&StatusSnapshot {
        host: format!("{}:{}", hostname(), state.settings.listen.port()),
        uptime: state.started.elapsed(),
        connections_current: current,
        connections_available: (state.settings.max_connections as i64 - current).max(0),
        connections_total: c.connections_total.get(),
        commands: c.commands.snapshot(),
        ops: c.ops.snapshot(),
        network: c.network.snapshot(),
        cursors: state.cursors.counts(),
        now: bson::DateTime::now(),
    });
    // Client operations by how many shards they went to, and per shard.
    let stats = bson::RawDocumentBuf::try_from(&state.targeting.to_document()).map_err(CommandError::from)?;
    reply.append(bson::cstr!("shardingStatistics"), stats);
    Ok(reply)
}

pub async fn get_parameter(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    get_parameter_reply(&cmd.body)
}

pub async fn get_log(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    get_log_reply(&cmd.body)
}

pub async fn whats_my_uri(_state: &RouterState, conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    Ok(rawdoc! { "you": conn.peer.to_string() })
}

pub async fn connection_status(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let user = conn.session().user().cloned();
    let snapshot = state.security.get(&state.catalog).await?;
    let authenticated = user.as_ref().and_then(|u| snapshot.user(u));
    connection_status_reply(&cmd.body, authenticated, &snapshot.catalog)
}

pub async fn end_sessions(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    end_sessions_reply(&cmd.body)
}

pub async fn get_last_error(_state: &RouterState, conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    // Java 3.6 runs this on every new connection and reads `connectionId`; writes are always
    // acknowledged through write commands, so there is never a "last error" to report.
    Ok(rawdoc! { "connectionId": connection_id_value(conn.id), "n": 0, "err": RawBson::Null })
}

/// MongoDB ≤ 5.0's `getnonce` (the MONGODB-CR nonce): mgo, the Go driver of the Debian
/// `prometheus-mongodb-exporter` and of older Go applications, sends it over OP_QUERY with its
/// first `isMaster` and drops the connection if it fails. MONGODB-CR itself is not offered, so
/// the nonce is never used for anything.
pub async fn get_nonce(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    let nonce: String = (0..8).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
    Ok(rawdoc! { "nonce": nonce })
}

pub async fn host_info(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    Ok(host_info_reply(&hostname(), bson::DateTime::now()))
}

pub async fn get_cmd_line_opts(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    let argv: RawArrayBuf = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    Ok(rawdoc! { "argv": argv, "parsed": {} })
}

pub async fn list_commands(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    list_commands_reply()
}

/// MongoDB's `BSONElement::trueValue`: numbers are true when non-zero, null/undefined false,
/// every other type true.
pub(crate) fn truthy(value: RawBsonRef<'_>) -> bool {
    match value {
        RawBsonRef::Boolean(b) => b,
        RawBsonRef::Int32(n) => n != 0,
        RawBsonRef::Int64(n) => n != 0,
        RawBsonRef::Double(n) => n != 0.0,
        RawBsonRef::Null | RawBsonRef::Undefined => false,
        _ => true,
    }
}

pub fn build_info_reply() -> RawDocumentBuf {
    let version_array: RawArrayBuf = MONGODB_VERSION_ARRAY.into_iter().collect();
    rawdoc! {
        "version": MONGODB_VERSION,
        "gitVersion": concat!("shoal-", env!("CARGO_PKG_VERSION")),
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "versionArray": version_array,
        "openssl": { "running": "disabled", "compiled": "disabled" },
        "buildEnvironment": {},
        "bits": 64,
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE_BYTES as i32,
        "storageEngines": ["shoal"],
        "shoal": { "version": env!("CARGO_PKG_VERSION") },
    }
}

/// Everything `serverStatus` reports that comes from the running process.
#[derive(Debug, Clone)]
pub struct StatusSnapshot {
    pub host: String,
    pub uptime: Duration,
    pub connections_current: i64,
    pub connections_available: i64,
    pub connections_total: u64,
    /// Every command that ran, with its counts (`metrics.commands`).
    pub commands: Vec<CommandCount>,
    pub ops: OpCounts,
    pub network: NetworkCounts,
    pub cursors: crate::cursors::CursorCounts,
    pub now: bson::DateTime,
}

pub fn server_status_reply(s: &StatusSnapshot) -> RawDocumentBuf {
    let uptime_ms = i64::try_from(s.uptime.as_millis()).unwrap_or(i64::MAX);
    let total = i64::try_from(s.connections_total).unwrap_or(i64::MAX);
    let commands: u64 = s.commands.iter().map(|c| c.total).sum();
    let failed: u64 = s.commands.iter().map(|c| c.failed).sum();
    let mut by_name = RawDocumentBuf::new();
    for c in &s.commands {
        // Command names are the table's (no NUL byte): every one converts.
        if let Ok(key) = <&CStr>::try_from(c.name) {
            by_name.append(key, rawdoc! { "failed": long(c.failed), "total": long(c.total) });
        }
    }
    let mut mem = rawdoc! { "bits": 64 };
    match process_memory_mb() {
        Some((resident, virt)) => {
            mem.append(cstr!("resident"), resident);
            mem.append(cstr!("virtual"), virt);
            mem.append(cstr!("supported"), true);
        }
        None => mem.append(cstr!("supported"), false),
    }
    rawdoc! {
        "host": s.host.as_str(),
        "version": MONGODB_VERSION,
        "process": "mongos",
        "pid": i64::from(std::process::id()),
        "uptime": s.uptime.as_secs_f64(),
        "uptimeMillis": uptime_ms,
        "uptimeEstimate": uptime_ms / 1000,
        "localTime": s.now,
        "connections": {
            "current": s.connections_current,
            "available": s.connections_available,
            "totalCreated": total,
        },
        "opcounters": {
            "insert": long(s.ops.insert),
            "query": long(s.ops.query),
            "update": long(s.ops.update),
            "delete": long(s.ops.delete),
            "getmore": long(s.ops.getmore),
            "command": long(s.ops.command),
        },
        // No wire compression: the physical bytes are the logical ones.
        "network": {
            "bytesIn": long(s.network.bytes_in),
            "bytesOut": long(s.network.bytes_out),
            "physicalBytesIn": long(s.network.bytes_in),
            "physicalBytesOut": long(s.network.bytes_out),
            "numRequests": long(s.network.requests),
        },
        "mem": mem,
        "opLatencies": op_latencies(&s.commands),
        // Shoal has no internal assertions of MongoDB's kinds; `user` counts the commands that
        // failed with an error the client caused or was told about, as MongoDB's user asserts do.
        "asserts": { "regular": 0, "warning": 0, "msg": 0, "user": long(failed), "tripwire": 0, "rollovers": 0 },
        "metrics": {
            "commands": by_name,
            "cursor": {
                "timedOut": long(s.cursors.timed_out),
                "totalOpened": long(s.cursors.opened),
                "open": {
                    "noTimeout": 0_i64,
                    "pinned": 0_i64,
                    "multiTarget": long(s.cursors.multi_target),
                    "singleTarget": long(s.cursors.single_target + s.cursors.buffered),
                    "total": long(s.cursors.multi_target + s.cursors.single_target + s.cursors.buffered),
                },
            },
        },
        "shoal": { "version": env!("CARGO_PKG_VERSION"), "commandsTotal": long(commands), "commandsFailed": long(failed) },
    }
}

/// `opLatencies`: time and count of the reads, the writes and every other command, by the kind
/// the command table gives each (transactions: none run).
fn op_latencies(commands: &[CommandCount]) -> RawDocumentBuf {
    use crate::commands::{Kind, lookup};
    let (mut reads, mut writes, mut other) = ((0, 0), (0, 0), (0, 0));
    for c in commands {
        let sum = match lookup(c.name).map(|s| s.kind) {
            Some(Kind::Read) => &mut reads,
            Some(Kind::Write) => &mut writes,
            _ => &mut other,
        };
        sum.0 += c.latency_micros;
        sum.1 += c.total;
    }
    let entry = |(latency, ops): (u64, u64)| rawdoc! { "latency": long(latency), "ops": long(ops) };
    rawdoc! {
        "reads": entry(reads),
        "writes": entry(writes),
        "commands": entry(other),
        "transactions": entry((0, 0)),
    }
}

fn long(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Resident and virtual size in MiB from `/proc/self/status`; `None` off Linux.
fn process_memory_mb() -> Option<(i64, i64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = |field: &str| -> Option<i64> {
        let line = status.lines().find(|l| l.starts_with(field))?;
        line[field.len()..].split_whitespace().next()?.parse::<i64>().ok()
    };
    Some((kb("VmRSS:")? / 1024, kb("VmSize:")? / 1024))
}

/// Parameters `getParameter` knows, with their values.
fn parameters() -> Vec<(&'static CStr, RawBson)> {
    vec![
        (cstr!("featureCompatibilityVersion"), rawdoc! { "version": FEATURE_COMPATIBILITY_VERSION }.into()),
        (cstr!("logLevel"), RawBson::Int32(0)),
        (cstr!("quiet"), RawBson::Boolean(false)),
    ]
}

/// `{getParameter: 1 | "*" | {allParameters, showDetails}, <name>: 1, ...}`. As in MongoDB,
/// unknown names are ignored, and asking for nothing known is an error.
pub fn get_parameter_reply(body: &RawDocument) -> HandlerResult {
    let (all, details) = match body.iter().next().transpose()? {
        Some((_, RawBsonRef::String("*"))) => (true, false),
        Some((_, RawBsonRef::Document(opts))) => {
            (opts.get("allParameters")?.is_some_and(truthy), opts.get("showDetails")?.is_some_and(truthy))
        }
        _ => (false, false),
    };
    let mut out = RawDocumentBuf::new();
    for (name, value) in parameters() {
        if all || body.get(name.as_str())?.is_some() {
            if details {
                let mut d = RawDocumentBuf::new();
                d.append(cstr!("value"), value);
                d.append(cstr!("settableAtRuntime"), false);
                d.append(cstr!("settableAtStartup"), false);
                out.append(name, d);
            } else {
                out.append(name, value);
            }
        }
    }
    if out.is_empty() && !all {
        return Err(CommandError::new(ErrorCode::InvalidOptions, "no option found to get"));
    }
    Ok(out)
}

/// `{getLog: "*" | "global" | "startupWarnings"}`.
pub fn get_log_reply(body: &RawDocument) -> HandlerResult {
    match body.iter().next().transpose()? {
        Some((_, RawBsonRef::String("*"))) => {
            let names: RawArrayBuf = LOG_NAMES.iter().copied().collect();
            Ok(rawdoc! { "names": names })
        }
        Some((_, RawBsonRef::String(name))) if LOG_NAMES.contains(&name) => {
            let log = match name {
                "startupWarnings" => shoal_telemetry::log::startup_warnings(),
                _ => shoal_telemetry::log::global(),
            };
            let lines: RawArrayBuf = log.lines.iter().map(String::as_str).collect();
            Ok(
                rawdoc! { "totalLinesWritten": i64::try_from(log.total_lines_written).unwrap_or(i64::MAX), "log": lines },
            )
        }
        Some((_, RawBsonRef::String(name))) => Err(CommandError::bad_value(format!("No log named '{name}'"))),
        _ => Err(CommandError::type_mismatch("Argument to getLog must be of type String")),
    }
}

/// `authInfo`: the connection's user (if it authenticated and still exists), every role it holds
/// (inherited ones included), and with `showPrivileges` what they grant.
pub fn connection_status_reply(
    body: &RawDocument,
    user: Option<&shoal_proto::catalog::User>,
    security: &shoal_proto::catalog::SecurityCatalog,
) -> HandlerResult {
    use crate::cmd::user_admin::{privilege_docs, role_docs};
    let users: Vec<bson::Document> =
        user.map(|u| bson::doc! { "user": &u.name.user, "db": &u.name.db }).into_iter().collect();
    let roles = user.map(|u| shoal_auth::graph::closure(security, &u.roles)).unwrap_or_default();
    let mut auth_info = bson::doc! { "authenticatedUsers": users, "authenticatedUserRoles": role_docs(&roles) };
    if body.get("showPrivileges")?.is_some_and(truthy) {
        let privileges = user.map(|u| shoal_auth::graph::resolve(security, &u.roles).sorted()).unwrap_or_default();
        auth_info.insert("authenticatedUserPrivileges", privilege_docs(privileges));
    }
    Ok(RawDocumentBuf::try_from(&bson::doc! { "authInfo": auth_info })?)
}

/// Sessions are not tracked yet, so ending them is a no-op; the shape is still checked so a
/// broken client hears about it.
pub fn end_sessions_reply(body: &RawDocument) -> HandlerResult {
    match body.iter().next().transpose()? {
        Some((_, RawBsonRef::Array(ids))) => {
            for id in ids {
                if !matches!(id?, RawBsonRef::Document(_)) {
                    return Err(CommandError::type_mismatch(
                        "endSessions expects an array of session ids ({id: UUID})",
                    ));
                }
            }
            Ok(RawDocumentBuf::new())
        }
        _ => Err(CommandError::type_mismatch("endSessions expects an array of session ids")),
    }
}

pub fn host_info_reply(hostname: &str, now: bson::DateTime) -> RawDocumentBuf {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let os_type = if cfg!(target_os = "linux") { "Linux" } else { std::env::consts::OS };
    rawdoc! {
        "system": {
            "currentTime": now,
            "hostname": hostname,
            "cpuAddrSize": 64,
            "numCores": i32::try_from(cores).unwrap_or(i32::MAX),
            "cpuArch": std::env::consts::ARCH,
        },
        "os": { "type": os_type },
        "extra": {},
    }
}

pub fn list_commands_reply() -> HandlerResult {
    let mut commands = RawDocumentBuf::new();
    for spec in COMMANDS {
        let key: &CStr = spec.name.try_into()?;
        commands.append(
            key,
            rawdoc! {
                "help": "",
                "requiresAuth": spec.requires_auth(),
                "secondaryOk": spec.secondary_ok,
                "adminOnly": spec.admin_only,
                "apiVersions": [],
                "deprecatedApiVersions": [],
            },
        );
    }
    Ok(rawdoc! { "commands": commands })
}

pub fn hostname() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_has_what_mongosh_reads() {
        let reply = build_info_reply();
        assert_eq!(reply.get_str("version").expect("version"), "7.0.0");
        let va: Vec<i32> = reply
            .get_array("versionArray")
            .expect("array")
            .into_iter()
            .map(|v| v.expect("ok").as_i32().expect("i32"))
            .collect();
        assert_eq!(va, [7, 0, 0, 0]);
        for key in [
            "gitVersion",
            "modules",
            "allocator",
            "javascriptEngine",
            "sysInfo",
            "openssl",
            "buildEnvironment",
            "bits",
            "debug",
            "maxBsonObjectSize",
            "storageEngines",
            "shoal",
        ] {
            assert!(reply.get(key).expect("valid").is_some(), "{key}");
        }
        assert!(reply.get("ferretdb").expect("valid").is_none(), "mongosh would call us non-genuine");
    }

    #[test]
    fn get_parameter_fcv_and_star_and_unknown() {
        let fcv = get_parameter_reply(&rawdoc! { "getParameter": 1, "featureCompatibilityVersion": 1, "$db": "admin" })
            .expect("known");
        assert_eq!(fcv, rawdoc! { "featureCompatibilityVersion": { "version": "7.0" } });
        let all = get_parameter_reply(&rawdoc! { "getParameter": "*" }).expect("all");
        assert!(
            all.get("featureCompatibilityVersion").expect("valid").is_some()
                && all.get("logLevel").expect("valid").is_some()
        );
        let err = get_parameter_reply(&rawdoc! { "getParameter": "foo", "$db": "admin" }).expect_err("nothing known");
        assert_eq!((err.code, err.errmsg.as_str()), (72, "no option found to get"));
        let err = get_parameter_reply(&rawdoc! { "getParameter": 1, "noSuchParameter": 1 }).expect_err("unknown");
        assert_eq!(err.code, 72);
        let details =
            get_parameter_reply(&rawdoc! { "getParameter": { "showDetails": true }, "logLevel": 1 }).expect("details");
        assert_eq!(details.get_document("logLevel").expect("doc").get_i32("value").expect("value"), 0);
    }

    #[test]
    fn get_log() {
        // No subscriber keeps lines in this test: both logs are empty.
        assert_eq!(
            get_log_reply(&rawdoc! { "getLog": "startupWarnings" }).expect("ok"),
            rawdoc! { "totalLinesWritten": 0_i64, "log": [] }
        );
        assert_eq!(
            get_log_reply(&rawdoc! { "getLog": "*" }).expect("ok"),
            rawdoc! { "names": ["global", "startupWarnings"] }
        );
        assert_eq!(get_log_reply(&rawdoc! { "getLog": "nope" }).expect_err("unknown").code, 2);
        assert_eq!(get_log_reply(&rawdoc! { "getLog": 1 }).expect_err("type").code, 14);
    }

    #[test]
    fn connection_status_privileges_only_when_asked() {
        let none = shoal_proto::catalog::SecurityCatalog::default();
        let plain = connection_status_reply(&rawdoc! { "connectionStatus": 1 }, None, &none).expect("ok");
        let auth = plain.get_document("authInfo").expect("authInfo");
        assert!(auth.get("authenticatedUserPrivileges").expect("valid").is_none());
        assert!(auth.get_array("authenticatedUsers").expect("users").is_empty());
        let with = connection_status_reply(&rawdoc! { "connectionStatus": 1, "showPrivileges": true }, None, &none)
            .expect("ok");
        assert!(with.get_document("authInfo").expect("doc").get_array("authenticatedUserPrivileges").is_ok());
    }

    #[test]
    fn end_sessions_validates_its_argument() {
        let lsid = rawdoc! { "id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![0; 16] } };
        assert!(end_sessions_reply(&rawdoc! { "endSessions": [lsid] }).expect("ok").is_empty());
        assert!(end_sessions_reply(&rawdoc! { "endSessions": [] }).is_ok());
        assert_eq!(end_sessions_reply(&rawdoc! { "endSessions": 1 }).expect_err("type").code, 14);
        assert_eq!(end_sessions_reply(&rawdoc! { "endSessions": [1] }).expect_err("type").code, 14);
    }

    #[test]
    fn server_status_shape() {
        let reply = server_status_reply(&StatusSnapshot {
            host: "h:27017".into(),
            uptime: Duration::from_millis(2500),
            connections_current: 3,
            connections_available: 97,
            connections_total: 10,
            commands: vec![
                CommandCount { name: "find", total: 40, failed: 0, latency_micros: 4000 },
                CommandCount { name: "insert", total: 2, failed: 1, latency_micros: 300 },
                CommandCount { name: "ping", total: 1, failed: 0, latency_micros: 7 },
            ],
            ops: OpCounts { insert: 1, query: 2, update: 3, delete: 4, getmore: 5, command: 6 },
            network: NetworkCounts { bytes_in: 100, bytes_out: 200, requests: 3 },
            cursors: crate::cursors::CursorCounts {
                single_target: 2,
                multi_target: 1,
                buffered: 1,
                opened: 9,
                timed_out: 3,
            },
            now: bson::DateTime::now(),
        });
        assert_eq!(reply.get_str("process").expect("process"), "mongos");
        assert_eq!(reply.get_i64("uptimeMillis").expect("ms"), 2500);
        assert_eq!(reply.get_i64("uptimeEstimate").expect("s"), 2);
        let conns = reply.get_document("connections").expect("connections");
        assert_eq!(conns.get_i64("current").expect("current"), 3);
        assert_eq!(conns.get_i64("totalCreated").expect("total"), 10);
        let ops = reply.get_document("opcounters").expect("ops");
        let names = ["insert", "query", "update", "delete", "getmore", "command"];
        for (i, name) in names.into_iter().enumerate() {
            assert_eq!(ops.get_i64(name).expect(name), i as i64 + 1, "{name}");
        }
        let net = reply.get_document("network").expect("network");
        assert_eq!(net.get_i64("bytesIn").expect("in"), 100);
        assert_eq!(net.get_i64("physicalBytesOut").expect("out"), 200);
        assert_eq!(net.get_i64("numRequests").expect("requests"), 3);
        assert_eq!(reply.get_document("mem").expect("mem").get_i32("bits").expect("bits"), 64);
        let commands = reply.get_document("metrics").and_then(|m| m.get_document("commands")).expect("commands");
        let insert = commands.get_document("insert").expect("insert");
        assert_eq!((insert.get_i64("total").expect("t"), insert.get_i64("failed").expect("f")), (2, 1));
        assert_eq!(reply.get_document("shoal").expect("shoal").get_i64("commandsTotal").expect("total"), 43);
        let latencies = reply.get_document("opLatencies").expect("opLatencies");
        let of = |kind: &str| {
            let d = latencies.get_document(kind).expect(kind);
            (d.get_i64("latency").expect("latency"), d.get_i64("ops").expect("ops"))
        };
        assert_eq!((of("reads"), of("writes"), of("commands")), ((4000, 40), (300, 2), (7, 1)));
        assert_eq!(reply.get_document("asserts").expect("asserts").get_i64("user").expect("user"), 1);
        let cursor = reply.get_document("metrics").and_then(|m| m.get_document("cursor")).expect("cursor");
        assert_eq!(cursor.get_i64("timedOut").expect("timedOut"), 3);
        assert_eq!(cursor.get_i64("totalOpened").expect("opened"), 9);
        let open = cursor.get_document("open").expect("open");
        let n = |k: &str| open.get_i64(k).expect(k);
        assert_eq!((n("singleTarget"), n("multiTarget"), n("total")), (3, 1, 4));
    }

    #[test]
    fn get_log_returns_the_kept_lines() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let subscriber = tracing_subscriber::registry().with(shoal_telemetry::log::RingLayer);
        tracing::subscriber::with_default(subscriber, || tracing::info!(shard = "s9", "getLog test line"));
        let reply = get_log_reply(&rawdoc! { "getLog": "global" }).expect("ok");
        assert!(reply.get_i64("totalLinesWritten").expect("total") >= 1, "{reply:?}");
        let log = reply.get_array("log").expect("log");
        let line =
            log.into_iter().filter_map(|l| l.ok()?.as_str()).find(|l| l.contains("getLog test line")).expect("kept");
        let line: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(line["attr"]["shard"], "s9");
    }

    #[test]
    fn host_info_and_list_commands() {
        let host = host_info_reply("box", bson::DateTime::now());
        let system = host.get_document("system").expect("system");
        assert_eq!(system.get_str("hostname").expect("hostname"), "box");
        assert!(system.get_i32("numCores").expect("cores") >= 1);
        let commands = list_commands_reply().expect("ok");
        let commands = commands.get_document("commands").expect("commands");
        for name in ["hello", "isMaster", "ping", "find", "insert"] {
            assert_eq!(commands.get_document(name).expect(name).get_str("help").expect("help"), "");
        }
    }

    #[test]
    fn truthiness_is_mongodbs() {
        let doc: &RawDocument = &rawdoc! { "t": true, "z": 0, "one": 1i64, "n": null, "s": "" };
        let get = |k: &str| truthy(doc.get(k).expect("valid").expect("present"));
        assert!(get("t") && !get("z") && get("one") && !get("n") && get("s"));
    }
}
