//! The YAML cluster spec read by `shoal up`: its schema, where it is loaded from, and its validation.
//!
//! Invariants of a spec that passed [`ClusterSpec::validate`]: at least one shard and one router;
//! no config servers (no catalog) or an odd number of them; process names are unique and safe as
//! file names (they name data dirs and log files); ports are non-zero and unique on each host; every
//! shard has 1..=[`SHARD_MEMBERS_MAX`] members, several only with config servers (they arbitrate the
//! group); and every listener is on loopback unless authorization and cluster authentication are on
//! (or the caller passed `--insecure`).
//!
//! Hosts: every process may name its `host` (an address or a DNS name, as tiup's topology files
//! do). [`ClusterSpec::endpoint`] is the one rule for where a process listens and how the others
//! reach it; `shoal up --host H` starts the processes whose [`Endpoint::host`] is `H`.
//!
//! Every struct denies unknown fields so a typo fails loudly instead of being ignored. The schema
//! grows by adding fields (config servers, more shard members, settings), not by renaming them.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where `shoal up` looks for its spec when `-f` is not given, relative to the current dir.
pub const DEFAULT_SPEC_PATH: &str = "deploy/local.yaml";

/// A copy of `deploy/local.yaml` built into the binary, so `cargo run --release -- up` works from
/// any directory and an installed binary needs no file next to it.
pub const EMBEDDED_LOCAL_SPEC: &str = include_str!("../local.yaml");

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Names the cluster in messages; not used for addressing.
    pub name: String,
    /// Address every listener binds. Absent: a process's `host` when that is an address, the
    /// wildcard address when it is a DNS name, else 127.0.0.1.
    #[serde(default)]
    pub bind_ip: Option<IpAddr>,
    /// What `shoal up` does when one of its processes exits: `on-failure` (default) restarts it
    /// with backoff unless it exited with status 0; `never` leaves it down.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// The Raft group holding the catalog; node ids are 1..=n in list order. Empty (or absent):
    /// no config service, shards and routers run without a catalog.
    #[serde(default)]
    pub config_servers: Vec<ConfigServerSpec>,
    pub routers: Vec<RouterSpec>,
    pub shards: Vec<ShardSpec>,
    /// MongoDB's `security.*` settings.
    #[serde(default)]
    pub security: SecuritySpec,
    /// MongoDB's `net.*` settings (`net.tls`).
    #[serde(default)]
    pub net: NetSpec,
    /// MongoDB's `auditLog.*`: `{destination: file}` makes every router write
    /// `<data-dir>/<router>.audit.json`.
    #[serde(default, rename = "auditLog")]
    pub audit_log: Option<AuditLogSpec>,
    /// Where every process exports its request spans (docs/operations.md, "Tracing").
    #[serde(default)]
    pub tracing: TracingSpec,
}

/// `tracing: {otlp_endpoint: http://collector:4317}`: every process started from the spec sends
/// its spans to that OpenTelemetry collector (OTLP over gRPC). Absent: nothing is exported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingSpec {
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditLogSpec {
    pub destination: AuditDestinationSpec,
    /// Only `JSON` (MongoDB's other format, BSON, is not offered).
    #[serde(default)]
    pub format: Option<AuditFormatSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditDestinationSpec {
    File,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AuditFormatSpec {
    #[serde(rename = "JSON")]
    Json,
}

/// `security:` in MongoDB's names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecuritySpec {
    /// `enabled`: clients authenticate and every command checks the user's privileges.
    #[serde(default)]
    pub authorization: Switch,
    /// How the cluster's processes authenticate each other. Absent: `keyFile` when
    /// `authorization` is enabled or a `keyFile` is named, else none.
    #[serde(default)]
    pub cluster_auth_mode: Option<ClusterAuthMode>,
    /// The shared key; absent under `keyFile`, `shoal up` generates `<data-dir>/cluster.key`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ClusterAuthMode {
    #[serde(rename = "keyFile")]
    KeyFile,
    #[serde(rename = "x509")]
    X509,
}

impl SecuritySpec {
    /// The cluster authentication in effect (see [`SecuritySpec::cluster_auth_mode`]).
    pub fn effective_cluster_auth(&self) -> Option<ClusterAuthMode> {
        self.cluster_auth_mode.or_else(|| {
            (self.authorization.is_enabled() || self.key_file.is_some()).then_some(ClusterAuthMode::KeyFile)
        })
    }
}

/// `net:` in MongoDB's names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetSpec {
    #[serde(default)]
    pub tls: TlsSpec,
}

/// `net.tls:` in MongoDB's names. Certificates absent here are issued by the cluster's own CA,
/// which `shoal up` creates under `<data-dir>/pki/` on first start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSpec {
    /// The routers' client port: `disabled` (default), `allowTLS`, `preferTLS` or `requireTLS`.
    #[serde(default)]
    pub mode: TlsModeSpec,
    /// One certificate and key (PEM) for every process; needs `CAFile`.
    #[serde(default)]
    pub certificate_key_file: Option<PathBuf>,
    /// The CA that signed the certificates (and clients' certificates).
    #[serde(default, rename = "CAFile")]
    pub ca_file: Option<PathBuf>,
    /// Accept clients without a certificate when a CA file is in use (default: false with an
    /// operator's CA, as MongoDB; true with the cluster's own CA).
    #[serde(default)]
    pub allow_connections_without_certificates: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum TlsModeSpec {
    #[default]
    #[serde(rename = "disabled")]
    Disabled,
    #[serde(rename = "allowTLS")]
    AllowTls,
    #[serde(rename = "preferTLS")]
    PreferTls,
    #[serde(rename = "requireTLS")]
    RequireTls,
}

impl TlsModeSpec {
    /// MongoDB's name (the `--tlsMode` value).
    pub fn as_str(self) -> &'static str {
        match self {
            TlsModeSpec::Disabled => "disabled",
            TlsModeSpec::AllowTls => "allowTLS",
            TlsModeSpec::PreferTls => "preferTLS",
            TlsModeSpec::RequireTls => "requireTLS",
        }
    }
}

/// MongoDB's `enabled` / `disabled` settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    Enabled,
    #[default]
    Disabled,
}

impl Switch {
    pub fn is_enabled(self) -> bool {
        self == Switch::Enabled
    }
}

/// `restart:` of the spec, in systemd's words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum RestartPolicy {
    #[default]
    #[serde(rename = "on-failure")]
    OnFailure,
    #[serde(rename = "never")]
    Never,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigServerSpec {
    pub name: String,
    pub port: u16,
    /// The machine it runs on (address or DNS name); see [`ClusterSpec::endpoint`].
    #[serde(default)]
    pub host: Option<String>,
    /// Where it serves `/metrics` over HTTP; absent: `port` + 1000 ([`ClusterSpec::metrics_port`]).
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    pub name: String,
    pub port: u16,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

/// Members one shard's replica group may have in a spec (MongoDB allows 7 voting members).
pub const SHARD_MEMBERS_MAX: usize = 7;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardSpec {
    pub name: String,
    pub members: Vec<MemberSpec>,
    /// Each member's oplog size cap in MiB (MongoDB's `oplogSizeMB`); absent: the shard's default.
    #[serde(default, rename = "oplogSizeMB")]
    pub oplog_size_mb: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberSpec {
    pub port: u16,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

/// Where one process listens and how the rest of the cluster reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The machine it belongs to: its `host`, else `bind_ip` (what `shoal up --host` selects by).
    pub host: String,
    /// The socket it binds.
    pub listen: SocketAddr,
    /// `host:port` others dial and the catalog lists (a DNS name stays a name).
    pub advertise: String,
}

/// A process of the spec, whatever its role: its name and endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub role: ProcessRole,
    /// The shard a member belongs to.
    pub shard: Option<String>,
    pub endpoint: Endpoint,
    /// Its HTTP metrics port, on the same host ([`ClusterSpec::metrics_port`]).
    pub metrics: Endpoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessRole {
    ConfigServer,
    Shard,
    Router,
}

impl ProcessRole {
    /// The name Prometheus jobs and dashboards use.
    pub fn job(self) -> &'static str {
        match self {
            ProcessRole::ConfigServer => "shoal-configsvr",
            ProcessRole::Shard => "shoal-shard",
            ProcessRole::Router => "shoal-router",
        }
    }
}

/// One process as the spec lists it, before addressing.
struct Declared<'a> {
    name: String,
    role: ProcessRole,
    shard: Option<&'a str>,
    host: Option<&'a str>,
    port: u16,
    metrics_port: Option<u16>,
}

/// Where a spec came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    File(PathBuf),
    Embedded,
}

impl std::fmt::Display for SpecSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecSource::File(path) => write!(f, "{}", path.display()),
            SpecSource::Embedded => write!(f, "built-in copy of {DEFAULT_SPEC_PATH}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read spec {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid spec {source_name}: {error}")]
    Yaml { source_name: String, error: serde_yaml::Error },
    #[error("the cluster name must not be empty")]
    EmptyClusterName,
    #[error("the spec names no shard; at least one is needed")]
    NoShards,
    #[error("the spec names no router; at least one is needed")]
    NoRouters,
    #[error(
        "the spec names {count} config servers; use an odd number (1, 3, 5, ...) or none: a majority \
         of an even group tolerates no more failures than the odd group one smaller, and needs one \
         more server to answer"
    )]
    EvenConfigServers { count: usize },
    #[error(
        "process name {name:?} is not usable: names must be 1 to 64 characters of A-Z a-z 0-9 _ - \
         (they name data dirs and log files)"
    )]
    BadName { name: String },
    #[error("process name {name:?} is used twice; names must be unique")]
    DuplicateName { name: String },
    #[error("{name}: port 0 is not allowed; ports must be in 1..=65535")]
    ZeroPort { name: String },
    #[error("{name}: port {port} + 1000 is not a port; give it a metrics_port")]
    NoMetricsPort { name: String, port: u16 },
    #[error("port {port} is used by both {first} and {second} on host {host}; ports must be unique on a host")]
    DuplicatePort { host: String, port: u16, first: String, second: String },
    #[error("{name}: host {host:?} is not an address or a DNS name")]
    BadHost { name: String, host: String },
    #[error("shard {name} has {members} members; a replica group has 1 to {max}", max = SHARD_MEMBERS_MAX)]
    ShardMembers { name: String, members: usize },
    #[error(
        "shard {name} has {members} members but the spec has no config servers; a replica group \
         needs the config service to arbitrate its primary"
    )]
    MembersWithoutConfig { name: String, members: usize },
    #[error("shard {name}: oplogSizeMB must be at least 1")]
    ZeroOplogSize { name: String },
    #[error(
        "{name} listens on {listen}, not a loopback address: a cluster reachable from the network \
         needs security.authorization: enabled and cluster authentication \
         (security.clusterAuthMode); pass --insecure to start it unprotected anyway"
    )]
    NonLoopback { name: String, listen: SocketAddr },
    #[error("net.tls.certificateKeyFile needs net.tls.CAFile (the CA that signed it)")]
    CertificateWithoutCa,
}

impl ClusterSpec {
    /// Parses YAML text; `source_name` only labels errors. Does not validate.
    pub fn parse(yaml: &str, source_name: &str) -> Result<Self, SpecError> {
        serde_yaml::from_str(yaml).map_err(|error| SpecError::Yaml { source_name: source_name.to_owned(), error })
    }

    /// Reads `path` if given (a missing explicit file is an error, never silently replaced);
    /// otherwise [`DEFAULT_SPEC_PATH`] if it exists in the current dir, else the embedded copy.
    pub fn load(path: Option<&Path>) -> Result<(Self, SpecSource), SpecError> {
        let default = Path::new(DEFAULT_SPEC_PATH);
        let path = match path {
            Some(path) => path,
            None if default.is_file() => default,
            None => return Ok((Self::parse(EMBEDDED_LOCAL_SPEC, "(built-in)")?, SpecSource::Embedded)),
        };
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read { path: path.to_owned(), source })?;
        let spec = Self::parse(&text, &path.display().to_string())?;
        Ok((spec, SpecSource::File(path.to_owned())))
    }

    /// Replaces the first router's port (the `--port` flag). Call before [`Self::validate`] so the
    /// new port is checked against the others.
    pub fn override_first_router_port(&mut self, port: u16) {
        if let Some(router) = self.routers.first_mut() {
            router.port = port;
        }
    }

    /// Checks the invariants listed in the module header; the first violation found is returned.
    /// `insecure` allows a non-loopback `bind_ip` without authorization and cluster authentication.
    pub fn validate(&self, insecure: bool) -> Result<(), SpecError> {
        if self.name.trim().is_empty() {
            return Err(SpecError::EmptyClusterName);
        }
        if self.shards.is_empty() {
            return Err(SpecError::NoShards);
        }
        if self.routers.is_empty() {
            return Err(SpecError::NoRouters);
        }
        if !self.config_servers.is_empty() && self.config_servers.len().is_multiple_of(2) {
            return Err(SpecError::EvenConfigServers { count: self.config_servers.len() });
        }
        let secured = self.security.authorization.is_enabled() && self.security.effective_cluster_auth().is_some();
        if self.net.tls.certificate_key_file.is_some() && self.net.tls.ca_file.is_none() {
            return Err(SpecError::CertificateWithoutCa);
        }
        for shard in &self.shards {
            let members = shard.members.len();
            if !(1..=SHARD_MEMBERS_MAX).contains(&members) {
                return Err(SpecError::ShardMembers { name: shard.name.clone(), members });
            }
            if members > 1 && self.config_servers.is_empty() {
                return Err(SpecError::MembersWithoutConfig { name: shard.name.clone(), members });
            }
            if shard.oplog_size_mb == Some(0) {
                return Err(SpecError::ZeroOplogSize { name: shard.name.clone() });
            }
        }
        let mut names = HashSet::new();
        let mut ports: HashMap<(String, u16), String> = HashMap::new();
        for p in self.processes() {
            let (name, host, port) = (p.name, p.host, p.port);
            if !is_usable_name(&name) {
                return Err(SpecError::BadName { name });
            }
            if !names.insert(name.clone()) {
                return Err(SpecError::DuplicateName { name });
            }
            if port == 0 || p.metrics_port == Some(0) {
                return Err(SpecError::ZeroPort { name });
            }
            let Some(metrics_port) = Self::metrics_port(port, p.metrics_port) else {
                return Err(SpecError::NoMetricsPort { name, port });
            };
            if let Some(host) = host
                && !is_usable_host(host)
            {
                return Err(SpecError::BadHost { name, host: host.to_owned() });
            }
            let endpoint = self.endpoint(host, port);
            if !insecure && !secured && !endpoint.listen.ip().is_loopback() {
                return Err(SpecError::NonLoopback { name, listen: endpoint.listen });
            }
            for port in [port, metrics_port] {
                if let Some(first) = ports.insert((endpoint.host.clone(), port), name.clone()) {
                    return Err(SpecError::DuplicatePort { host: endpoint.host, port, first, second: name });
                }
            }
        }
        Ok(())
    }

    /// A process's metrics port: the one it names, else its own port + 1000 (as mongod's HTTP
    /// status port was); None when neither is a port.
    pub fn metrics_port(port: u16, named: Option<u16>) -> Option<u16> {
        named.or_else(|| shoal_telemetry::http::default_port(port))
    }

    /// Every process, in start order: config servers, shard members, routers.
    fn processes(&self) -> impl Iterator<Item = Declared<'_>> + '_ {
        let config_servers = self.config_servers.iter().map(|server| Declared {
            name: server.name.clone(),
            role: ProcessRole::ConfigServer,
            shard: None,
            host: server.host.as_deref(),
            port: server.port,
            metrics_port: server.metrics_port,
        });
        let shards = self.shards.iter().flat_map(|shard| {
            shard.members.iter().enumerate().map(move |(i, member)| Declared {
                name: shard.member_name(i),
                role: ProcessRole::Shard,
                shard: Some(shard.name.as_str()),
                host: member.host.as_deref(),
                port: member.port,
                metrics_port: member.metrics_port,
            })
        });
        let routers = self.routers.iter().map(|router| Declared {
            name: router.name.clone(),
            role: ProcessRole::Router,
            shard: None,
            host: router.host.as_deref(),
            port: router.port,
            metrics_port: router.metrics_port,
        });
        config_servers.chain(shards).chain(routers)
    }

    /// Every process with its endpoints, in start order (of a validated spec: every process has
    /// a metrics port).
    pub fn listeners(&self) -> Vec<Listener> {
        self.processes()
            .map(|p| {
                let metrics_port = Self::metrics_port(p.port, p.metrics_port).unwrap_or(0);
                Listener {
                    endpoint: self.endpoint(p.host, p.port),
                    metrics: self.endpoint(p.host, metrics_port),
                    name: p.name,
                    role: p.role,
                    shard: p.shard.map(str::to_owned),
                }
            })
            .collect()
    }

    /// The hosts of the spec, each once, in the order their first process appears.
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = Vec::new();
        for listener in self.listeners() {
            if !hosts.contains(&listener.endpoint.host) {
                hosts.push(listener.endpoint.host);
            }
        }
        hosts
    }

    /// The one rule for addresses. A process listens on `bind_ip` when the spec sets it; else on
    /// its `host` when that is an address, on the wildcard address when `host` is a DNS name
    /// (whatever interface resolves to it), else on 127.0.0.1. Others dial its `host` when it
    /// has one, else the address it listens on (loopback for a wildcard `bind_ip`).
    pub fn endpoint(&self, host: Option<&str>, port: u16) -> Endpoint {
        let host_ip = host.and_then(|h| h.parse::<IpAddr>().ok());
        let listen_ip = match (self.bind_ip, host, host_ip) {
            (Some(ip), _, _) => ip,
            (None, _, Some(ip)) => ip,
            (None, Some(_), None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            (None, None, None) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let listen = SocketAddr::new(listen_ip, port);
        let advertise = match (host, host_ip) {
            (_, Some(ip)) => SocketAddr::new(ip, port).to_string(),
            (Some(name), None) => format!("{name}:{port}"),
            (None, None) => SocketAddr::new(connect_ip(listen_ip), port).to_string(),
        };
        let host = host.map_or_else(|| listen_ip.to_string(), str::to_owned);
        Endpoint { host, listen, advertise }
    }
}

/// A wildcard bind (0.0.0.0, ::) is not an address to dial; loopback of the same family is.
pub fn connect_ip(bind_ip: IpAddr) -> IpAddr {
    match bind_ip {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    }
}

/// An IP address, or a DNS name (RFC 1123 labels of letters, digits and hyphens).
fn is_usable_host(host: &str) -> bool {
    if host.parse::<IpAddr>().is_ok() {
        return true;
    }
    (1..=253).contains(&host.len())
        && host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

impl ShardSpec {
    /// The process name of member `index`: the shard's name when it has one member (so a data
    /// dir from before replica groups is found again), else `<shard>-<index + 1>`.
    pub fn member_name(&self, index: usize) -> String {
        if self.members.len() == 1 { self.name.clone() } else { format!("{}-{}", self.name, index + 1) }
    }
}

fn is_usable_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(yaml: &str) -> ClusterSpec {
        match ClusterSpec::parse(yaml, "test") {
            Ok(spec) => spec,
            Err(e) => panic!("spec should parse: {e}"),
        }
    }

    fn validate_err(yaml: &str) -> SpecError {
        match parse_ok(yaml).validate(false) {
            Ok(()) => panic!("spec should be rejected:\n{yaml}"),
            Err(e) => e,
        }
    }

    const TWO_SHARDS: &str = "
name: two
routers:
  - name: router0
    port: 27017
shards:
  - name: shard0
    members: [{ port: 27101 }]
  - name: shard1
    members: [{ port: 27102 }]
";

    #[test]
    fn embedded_local_spec_is_valid() {
        let spec = parse_ok(EMBEDDED_LOCAL_SPEC);
        assert_eq!(spec.validate(false).ok(), Some(()));
        assert_eq!(spec.name, "local");
        assert_eq!(spec.bind_ip, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let cfg = |name: &str, port| ConfigServerSpec { name: name.into(), port, host: None, metrics_port: None };
        assert_eq!(spec.config_servers, vec![cfg("cfg1", 27019), cfg("cfg2", 27020), cfg("cfg3", 27021)]);
        assert_eq!(
            spec.routers,
            vec![RouterSpec { name: "router0".into(), port: 27017, host: None, metrics_port: None }]
        );
        let shard = |name: &str, port: u16| ShardSpec {
            name: name.into(),
            members: [port, port + 10, port + 20]
                .map(|port| MemberSpec { port, host: None, metrics_port: None })
                .to_vec(),
            oplog_size_mb: None,
        };
        assert_eq!(spec.shards, vec![shard("shard0", 27101), shard("shard1", 27102)]);
    }

    #[test]
    fn good_spec_with_two_shards_and_default_bind_ip() {
        let spec = parse_ok(TWO_SHARDS);
        assert!(spec.validate(false).is_ok());
        assert_eq!(spec.bind_ip, None);
        assert!(spec.listeners().iter().all(|l| l.endpoint.listen.ip().is_loopback()));
        assert_eq!(spec.shards.len(), 2);
        // No config servers is still a valid cluster: no catalog, the behaviour before issue 3.
        assert!(spec.config_servers.is_empty());
        let empty = parse_ok(&format!("config_servers: []\n{TWO_SHARDS}"));
        assert_eq!(empty.validate(false).ok(), Some(()));
    }

    fn with_config_servers(ports: &[u16]) -> String {
        let mut yaml = String::from("config_servers:\n");
        for (i, port) in ports.iter().enumerate() {
            yaml.push_str(&format!("  - {{ name: cfg{}, port: {port} }}\n", i + 1));
        }
        yaml.push_str(TWO_SHARDS);
        yaml
    }

    #[test]
    fn config_server_count_must_be_odd() {
        for ports in [&[27019][..], &[27019, 27020, 27021], &[1, 2, 3, 4, 5]] {
            assert_eq!(parse_ok(&with_config_servers(ports)).validate(false).ok(), Some(()), "{ports:?}");
        }
        for ports in [&[27019, 27020][..], &[1, 2, 3, 4]] {
            let e = validate_err(&with_config_servers(ports));
            assert!(matches!(e, SpecError::EvenConfigServers { count } if count == ports.len()), "{e}");
            assert!(e.to_string().contains("odd number"), "{e}");
        }
    }

    #[test]
    fn config_server_ports_and_names_are_unique_across_roles() {
        let e = validate_err(&with_config_servers(&[27019, 27101, 27021]));
        assert!(
            matches!(&e, SpecError::DuplicatePort { port: 27101, first, second, .. } if first == "cfg2" && second == "shard0"),
            "{e}"
        );
        let e = validate_err(&with_config_servers(&[27019, 27020, 27017]));
        assert!(matches!(&e, SpecError::DuplicatePort { port: 27017, .. }), "{e}");
        let e = validate_err(&with_config_servers(&[27019, 27020, 27021]).replace("router0", "cfg3"));
        assert!(matches!(&e, SpecError::DuplicateName { name } if name == "cfg3"), "{e}");
        let e = validate_err(&with_config_servers(&[27019, 27020, 27019]));
        assert!(matches!(&e, SpecError::DuplicatePort { port: 27019, .. }), "{e}");
        let bad = with_config_servers(&[27019]).replace("port: 27019 }", "port: 27019, id: 4 }");
        assert!(ClusterSpec::parse(&bad, "test").is_err());
    }

    #[test]
    fn duplicate_port_names_both_processes() {
        let e = validate_err(&TWO_SHARDS.replace("27102", "27017"));
        assert!(
            matches!(&e, SpecError::DuplicatePort { port: 27017, first, second, .. } if first == "shard1" && second == "router0"),
            "{e}"
        );
    }

    #[test]
    fn port_override_is_checked_against_other_ports() {
        let mut spec = parse_ok(TWO_SHARDS);
        spec.override_first_router_port(27101);
        assert!(matches!(spec.validate(false), Err(SpecError::DuplicatePort { port: 27101, .. })));
        spec.override_first_router_port(28000);
        assert!(spec.validate(false).is_ok());
    }

    #[test]
    fn duplicate_name_across_roles() {
        let e = validate_err(&TWO_SHARDS.replace("router0", "shard1"));
        assert!(matches!(&e, SpecError::DuplicateName { name } if name == "shard1"), "{e}");
    }

    #[test]
    fn unknown_field_is_rejected_with_its_name() {
        let yaml = TWO_SHARDS.replace("    port: 27017", "    port: 27017\n    prot: 1");
        let e = ClusterSpec::parse(&yaml, "test").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("unknown field `prot`"), "{e}");
        let top = format!("{TWO_SHARDS}configsvrs: []\n");
        assert!(ClusterSpec::parse(&top, "test").is_err());
    }

    #[test]
    fn zero_shards_and_zero_routers_are_rejected() {
        let no_shards = "name: x\nrouters: [{ name: r, port: 1 }]\nshards: []\n";
        assert!(matches!(validate_err(no_shards), SpecError::NoShards));
        let no_routers = "name: x\nrouters: []\nshards: [{ name: s, members: [{ port: 2 }] }]\n";
        assert!(matches!(validate_err(no_routers), SpecError::NoRouters));
        let missing = "name: x\nrouters: [{ name: r, port: 1 }]\n";
        assert!(ClusterSpec::parse(missing, "test").is_err());
    }

    #[test]
    fn shards_have_one_to_seven_members() {
        let none = TWO_SHARDS.replace("[{ port: 27102 }]", "[]");
        assert!(matches!(validate_err(&none), SpecError::ShardMembers { members: 0, .. }));
        let ports: Vec<String> = (0..8).map(|i| format!("{{ port: {} }}", 28000 + i)).collect();
        let eight = TWO_SHARDS.replace("[{ port: 27102 }]", &format!("[{}]", ports.join(", ")));
        let e = validate_err(&eight);
        assert!(matches!(&e, SpecError::ShardMembers { name, members: 8 } if name == "shard1"), "{e}");
        let three = TWO_SHARDS.replace("[{ port: 27102 }]", "[{ port: 27102 }, { port: 27112 }, { port: 27122 }]");
        assert!(matches!(validate_err(&three), SpecError::MembersWithoutConfig { members: 3, .. }));
        let with_config = format!("{three}config_servers: [{{ name: cfg1, port: 27019 }}]\n");
        let spec = parse_ok(&with_config);
        assert_eq!(spec.validate(false).ok(), Some(()));
        assert_eq!(spec.shards[1].member_name(2), "shard1-3");
        assert_eq!(spec.shards[0].member_name(0), "shard0");
    }

    #[test]
    fn oplog_size_is_per_shard_and_at_least_one_mb() {
        let capped = TWO_SHARDS.replace("[{ port: 27102 }]", "[{ port: 27102 }]\n    oplogSizeMB: 64");
        let spec = parse_ok(&capped);
        assert_eq!(spec.validate(false).ok(), Some(()));
        assert_eq!((spec.shards[0].oplog_size_mb, spec.shards[1].oplog_size_mb), (None, Some(64)));
        let zero = TWO_SHARDS.replace("[{ port: 27102 }]", "[{ port: 27102 }]\n    oplogSizeMB: 0");
        assert!(matches!(validate_err(&zero), SpecError::ZeroOplogSize { .. }));
    }

    #[test]
    fn ports_must_be_in_range() {
        assert!(matches!(validate_err(&TWO_SHARDS.replace("27102", "0")), SpecError::ZeroPort { .. }));
        assert!(ClusterSpec::parse(&TWO_SHARDS.replace("27102", "65536"), "test").is_err());
    }

    #[test]
    fn non_loopback_needs_permission() {
        let spec = parse_ok(&format!("bind_ip: 0.0.0.0\n{TWO_SHARDS}"));
        assert!(matches!(spec.validate(false), Err(SpecError::NonLoopback { .. })));
        assert!(spec.validate(true).is_ok());
        assert!(parse_ok(&format!("bind_ip: \"::1\"\n{TWO_SHARDS}")).validate(false).is_ok());
        assert!(ClusterSpec::parse(&format!("bind_ip: localhost\n{TWO_SHARDS}"), "test").is_err());
    }

    #[test]
    fn names_must_be_safe_file_names() {
        for bad in ["\"../x\"", "\"a b\"", "\"\""] {
            let e = validate_err(&TWO_SHARDS.replace("router0", bad));
            assert!(matches!(e, SpecError::BadName { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn explicit_missing_file_is_an_error_not_the_default() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nope.yaml");
        assert!(matches!(ClusterSpec::load(Some(&missing)), Err(SpecError::Read { .. })));
        let file = dir.path().join("two.yaml");
        std::fs::write(&file, TWO_SHARDS).expect("write spec");
        let (spec, source) = ClusterSpec::load(Some(&file)).expect("load spec");
        assert_eq!(spec.shards.len(), 2);
        assert_eq!(source, SpecSource::File(file));
    }

    const HOSTS: &str = "
name: spread
security: { authorization: enabled }
config_servers:
  - { name: cfg1, port: 27019, host: 10.1.0.1 }
routers:
  - { name: router0, port: 27017, host: 10.1.0.1 }
  - { name: router1, port: 27017, host: db2.example.net }
shards:
  - name: shard0
    members: [{ port: 27018, host: 10.1.0.1 }, { port: 27018, host: db2.example.net }]
";

    #[test]
    fn ports_are_unique_per_host_and_hosts_are_listed_once() {
        let spec = parse_ok(HOSTS);
        assert_eq!(spec.validate(false).ok(), Some(()));
        assert_eq!(spec.hosts(), ["10.1.0.1", "db2.example.net"]);
        let e = validate_err(&HOSTS.replace(
            "{ name: router1, port: 27017, host: db2.example.net }",
            "{ name: router1, port: 27019, host: 10.1.0.1 }",
        ));
        assert!(matches!(&e, SpecError::DuplicatePort { host, port: 27019, .. } if host == "10.1.0.1"), "{e}");
    }

    #[test]
    fn a_host_off_loopback_needs_security_and_names_must_be_hosts() {
        let open = HOSTS.replace("security: { authorization: enabled }\n", "");
        let e = validate_err(&open);
        assert!(matches!(&e, SpecError::NonLoopback { name, .. } if name == "cfg1"), "{e}");
        assert_eq!(parse_ok(&open).validate(true).ok(), Some(()));
        let loopback = "name: l\nrouters: [{ name: r, port: 1, host: 127.0.0.2 }]\nshards: [{ name: s, members: [{ port: 2, host: \"::1\" }] }]\n";
        assert_eq!(parse_ok(loopback).validate(false).ok(), Some(()));
        for bad in ["\"-x.example\"", "\"a b\"", "\"x..y\"", "\"\""] {
            let e = validate_err(&HOSTS.replace("db2.example.net", bad));
            assert!(matches!(e, SpecError::BadHost { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn endpoints_follow_one_rule() {
        let spec = parse_ok(HOSTS);
        let ip = spec.endpoint(Some("10.1.0.1"), 5);
        assert_eq!(
            (ip.host.as_str(), ip.listen.to_string(), ip.advertise.as_str()),
            ("10.1.0.1", "10.1.0.1:5".into(), "10.1.0.1:5")
        );
        let name = spec.endpoint(Some("db2.example.net"), 5);
        assert_eq!((name.listen.to_string(), name.advertise.as_str()), ("0.0.0.0:5".into(), "db2.example.net:5"));
        let v6 = spec.endpoint(Some("fd00::2"), 5);
        assert_eq!(v6.advertise, "[fd00::2]:5");
        let none = spec.endpoint(None, 5);
        assert_eq!((none.host.as_str(), none.advertise.as_str()), ("127.0.0.1", "127.0.0.1:5"));
        let bound = parse_ok(&format!("bind_ip: 0.0.0.0\n{HOSTS}"));
        let e = bound.endpoint(Some("10.1.0.1"), 5);
        assert_eq!((e.listen.to_string(), e.advertise.as_str()), ("0.0.0.0:5".into(), "10.1.0.1:5"));
    }
}
