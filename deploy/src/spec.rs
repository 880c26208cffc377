//! The YAML cluster spec read by `shoal up`: its schema, where it is loaded from, and its validation.
//!
//! Invariants of a spec that passed [`ClusterSpec::validate`]: at least one shard and one router;
//! no config servers (no catalog) or an odd number of them; process names are unique and safe as
//! file names (they name data dirs and log files); ports are unique and non-zero; every shard has
//! 1..=[`SHARD_MEMBERS_MAX`] members, several only with config servers (they arbitrate the group);
//! and `bind_ip` is loopback unless authorization and cluster authentication are on (or the caller
//! passed `--insecure`).
//!
//! Every struct denies unknown fields so a typo fails loudly instead of being ignored. The schema
//! grows by adding fields (config servers, more shard members, settings), not by renaming them.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
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
    /// Address every listener binds.
    #[serde(default = "default_bind_ip")]
    pub bind_ip: IpAddr,
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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigServerSpec {
    pub name: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    pub name: String,
    pub port: u16,
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
}

fn default_bind_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
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
    #[error("port {port} is used by both {first} and {second}; ports must be unique")]
    DuplicatePort { port: u16, first: String, second: String },
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
        "bind_ip {ip} is not a loopback address: a cluster reachable from the network needs \
         security.authorization: enabled and cluster authentication (security.clusterAuthMode); \
         pass --insecure to start it unprotected anyway"
    )]
    NonLoopback { ip: IpAddr },
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
        if !insecure && !secured && !self.bind_ip.is_loopback() {
            return Err(SpecError::NonLoopback { ip: self.bind_ip });
        }
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
        let mut ports: HashMap<u16, String> = HashMap::new();
        for (name, port) in self.listeners() {
            if !is_usable_name(&name) {
                return Err(SpecError::BadName { name });
            }
            if !names.insert(name.clone()) {
                return Err(SpecError::DuplicateName { name });
            }
            if port == 0 {
                return Err(SpecError::ZeroPort { name });
            }
            if let Some(first) = ports.insert(port, name.clone()) {
                return Err(SpecError::DuplicatePort { port, first, second: name });
            }
        }
        Ok(())
    }

    /// Every listening process as (name, port): config servers, shard members, routers.
    fn listeners(&self) -> impl Iterator<Item = (String, u16)> + '_ {
        let config_servers = self.config_servers.iter().map(|server| (server.name.clone(), server.port));
        let shards = self.shards.iter().flat_map(|shard| {
            shard.members.iter().enumerate().map(move |(i, member)| (shard.member_name(i), member.port))
        });
        let routers = self.routers.iter().map(|router| (router.name.clone(), router.port));
        config_servers.chain(shards).chain(routers)
    }
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
        assert_eq!(spec.bind_ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let cfg = |name: &str, port| ConfigServerSpec { name: name.into(), port };
        assert_eq!(spec.config_servers, vec![cfg("cfg1", 27019), cfg("cfg2", 27020), cfg("cfg3", 27021)]);
        assert_eq!(spec.routers, vec![RouterSpec { name: "router0".into(), port: 27017 }]);
        let shard = |name: &str, port: u16| ShardSpec {
            name: name.into(),
            members: vec![MemberSpec { port }, MemberSpec { port: port + 10 }, MemberSpec { port: port + 20 }],
            oplog_size_mb: None,
        };
        assert_eq!(spec.shards, vec![shard("shard0", 27101), shard("shard1", 27102)]);
    }

    #[test]
    fn good_spec_with_two_shards_and_default_bind_ip() {
        let spec = parse_ok(TWO_SHARDS);
        assert!(spec.validate(false).is_ok());
        assert!(spec.bind_ip.is_loopback());
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
            matches!(&e, SpecError::DuplicatePort { port: 27101, first, second } if first == "cfg2" && second == "shard0"),
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
            matches!(&e, SpecError::DuplicatePort { port: 27017, first, second } if first == "shard1" && second == "router0"),
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
}
