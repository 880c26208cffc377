//! What `shoal up` starts, decided without I/O: the ordered list of processes a validated spec
//! names, each with its command line, data dir and log file, plus what to register in the catalog.
//!
//! Order is the start order: config servers (everyone else takes their addresses), shards, then
//! routers. The launcher stops them in reverse, so routers stop taking clients before the shards go
//! and the catalog goes last.
//!
//! Config servers: node ids 1..=n in spec order, every one with `--peers` naming all of them. Node 1
//! also gets `--init` and starts last of them, so its "does anyone already have Raft state?" probe
//! hears from every peer at once: a fresh group forms without waiting out the probe, and a restart
//! (or a node 1 whose data dir was wiped beside peers that kept theirs) never forms a second group.
//!
//! With config servers (every spec with `config_servers`, the default) routers find the shards in
//! the catalog and route by chunk. A spec without config servers is the legacy single-shard mode:
//! every router is pointed at the first shard with `--shard`, and other shards receive no traffic.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::secrets::Secrets;
use crate::spec::{ClusterSpec, Endpoint, TlsModeSpec};

/// Servers started by the launcher stop when it goes away (see `cli::ChildArgs`).
const EXIT_WITH_LAUNCHER: &str = "--exit-on-stdin-eof";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    ConfigServer,
    Shard,
    Router,
}

impl Role {
    /// The subcommand that runs this role, and the role word of its `SHOAL_READY` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::ConfigServer => "configsvr",
            Role::Shard => "shard",
            Role::Router => "router",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    pub name: String,
    pub role: Role,
    /// The machine it runs on (`shoal up --host` starts the processes of one host).
    pub host: String,
    /// `host:port` where clients (routers, drivers, the ping probe) reach it.
    pub connect: String,
    /// Created before start; `None` for stateless processes.
    pub data_dir: Option<PathBuf>,
    /// Receives the process's stderr (its logs) and any stray stdout lines.
    pub log_path: PathBuf,
    /// Arguments after the executable, starting with the subcommand.
    pub args: Vec<OsString>,
}

/// A shard as `shoal up` registers it in the catalog (`AddShard`) once it is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRegistration {
    pub shard: String,
    pub replica_set: String,
    /// `host:port` of each member, as routers and peers dial it.
    pub members: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPlan {
    /// In start order: config servers, shards, routers.
    pub processes: Vec<ProcessPlan>,
    /// `host:port` of every config server in node-id order (what `--config` says); empty when the
    /// spec has no config service.
    pub config_servers: Vec<String>,
    /// Registered after the shards are up; empty when there is no config service.
    pub shards: Vec<ShardRegistration>,
}

impl ClusterPlan {
    pub fn of_role(&self, role: Role) -> impl Iterator<Item = &ProcessPlan> {
        self.processes.iter().filter(move |process| process.role == role)
    }

    /// Keeps only the processes of `host`, in the same order; the catalog facts (config
    /// servers, shard registrations) stay whole, since every host needs them.
    pub fn on_host(mut self, host: &str) -> ClusterPlan {
        self.processes.retain(|process| process.host == host);
        self
    }
}

/// Who keeps the planned processes running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supervisor {
    /// `shoal up`: its children exit when it goes away (`--exit-on-stdin-eof`).
    Launcher,
    /// Kubernetes, Compose or systemd (`shoal deploy render`): processes run on their own.
    External,
}

/// `--metrics-port N` of a process listening on `port` (the spec's rule: [`ClusterSpec::metrics_port`]).
fn metrics_args(port: u16, named: Option<u16>) -> Vec<OsString> {
    ClusterSpec::metrics_port(port, named)
        .map(|p| vec!["--metrics-port".into(), p.to_string().into()])
        .unwrap_or_default()
}

/// Lays out the processes of `spec` (already validated) under `data_dir`, with the credentials in
/// `secrets` on their command lines, as `shoal up` runs them.
pub fn plan(spec: &ClusterSpec, data_dir: &Path, secrets: &Secrets) -> ClusterPlan {
    plan_for(spec, data_dir, secrets, Supervisor::Launcher)
}

/// [`plan`] for the given supervisor.
pub fn plan_for(spec: &ClusterSpec, data_dir: &Path, secrets: &Secrets, supervisor: Supervisor) -> ClusterPlan {
    // Flags every server gets: its trace export, and under `shoal up` an end with the launcher.
    let supervised = |args: &mut Vec<OsString>| {
        if let Some(endpoint) = &spec.tracing.otlp_endpoint {
            args.extend(["--otlp-endpoint".into(), endpoint.into()]);
        }
        if supervisor == Supervisor::Launcher {
            args.push(EXIT_WITH_LAUNCHER.into());
        }
    };
    let config_endpoints: Vec<Endpoint> =
        spec.config_servers.iter().map(|server| spec.endpoint(server.host.as_deref(), server.port)).collect();
    let config_servers: Vec<String> = config_endpoints.iter().map(|e| e.advertise.clone()).collect();
    let peers: Vec<String> = config_servers.iter().enumerate().map(|(i, addr)| format!("{}={addr}", i + 1)).collect();
    let peers = peers.join(",");
    let config_flag: Vec<OsString> =
        if config_servers.is_empty() { Vec::new() } else { vec!["--config".into(), config_servers.join(",").into()] };

    let mut processes = Vec::with_capacity(spec.config_servers.len() + spec.shards.len() + spec.routers.len());
    let mut config_plans = Vec::with_capacity(spec.config_servers.len());
    for (index, (server, endpoint)) in spec.config_servers.iter().zip(config_endpoints).enumerate() {
        let id = index + 1;
        let dir = data_dir.join(&server.name);
        let listen = endpoint.listen;
        let mut args: Vec<OsString> = vec![
            "configsvr".into(),
            "--id".into(),
            id.to_string().into(),
            "--listen".into(),
            listen.to_string().into(),
            "--data-dir".into(),
            dir.clone().into(),
            "--peers".into(),
            peers.clone().into(),
        ];
        args.extend(metrics_args(server.port, server.metrics_port));
        if id == 1 {
            args.push("--init".into());
        }
        args.extend(secrets.cluster_args(&server.name).to_args());
        supervised(&mut args);
        config_plans.push(ProcessPlan {
            name: server.name.clone(),
            role: Role::ConfigServer,
            host: endpoint.host,
            connect: endpoint.advertise,
            data_dir: Some(dir),
            log_path: data_dir.join(format!("{}.log", server.name)),
            args,
        });
    }
    // Node 1 (the one with --init) last; see the module doc.
    if !config_plans.is_empty() {
        config_plans.rotate_left(1);
    }
    processes.extend(config_plans);

    let mut shards = Vec::new();
    let mut first_shard = None;
    for shard in &spec.shards {
        let mut members = Vec::with_capacity(shard.members.len());
        for (index, member) in shard.members.iter().enumerate() {
            let member_name = shard.member_name(index);
            let dir = data_dir.join(&member_name);
            let endpoint = spec.endpoint(member.host.as_deref(), member.port);
            let (listen, connect) = (endpoint.listen, endpoint.advertise);
            let mut args: Vec<OsString> = vec![
                "shard".into(),
                "--name".into(),
                shard.name.clone().into(),
                "--listen".into(),
                listen.to_string().into(),
                "--advertise".into(),
                connect.clone().into(),
                "--data-dir".into(),
                dir.clone().into(),
            ];
            args.extend(metrics_args(member.port, member.metrics_port));
            args.extend(config_flag.iter().cloned());
            if let Some(mb) = shard.oplog_size_mb {
                args.extend(["--oplog-size-mb".into(), mb.to_string().into()]);
            }
            args.extend(secrets.cluster_args(&member_name).to_args());
            supervised(&mut args);
            first_shard.get_or_insert_with(|| connect.clone());
            members.push(connect.clone());
            processes.push(ProcessPlan {
                name: member_name.clone(),
                role: Role::Shard,
                host: endpoint.host,
                connect,
                data_dir: Some(dir),
                log_path: data_dir.join(format!("{member_name}.log")),
                args,
            });
        }
        if !config_servers.is_empty() {
            shards.push(ShardRegistration { shard: shard.name.clone(), replica_set: shard.name.clone(), members });
        }
    }
    // Validation guarantees a shard; without one there is nothing a router could forward to.
    let Some(first_shard) = first_shard else {
        return ClusterPlan { processes, config_servers, shards };
    };
    for router in &spec.routers {
        let endpoint = spec.endpoint(router.host.as_deref(), router.port);
        let listen = endpoint.listen;
        let mut args: Vec<OsString> = vec!["router".into(), "--listen".into(), listen.to_string().into()];
        args.extend(metrics_args(router.port, router.metrics_port));
        // With config servers the router finds every shard in the catalog; `--shard` is the
        // legacy single-shard mode.
        if config_flag.is_empty() {
            args.extend(["--shard".into(), shoal_proto::endpoint::uri(&first_shard).into()]);
        }
        args.extend(config_flag.iter().cloned());
        if spec.security.authorization.is_enabled() {
            args.push("--auth".into());
        }
        if spec.audit_log.is_some() {
            let path = data_dir.join(format!("{}.audit.json", router.name));
            args.extend(["--auditDestination".into(), "file".into(), "--auditPath".into(), path.into()]);
        }
        let cluster_args = secrets.cluster_args(&router.name).to_args();
        let tls = &spec.net.tls;
        if tls.mode != TlsModeSpec::Disabled {
            args.extend(["--tlsMode".into(), tls.mode.as_str().into()]);
            // x509 cluster authentication already names the certificate and the CA.
            if !cluster_args.iter().any(|a| a == "--tlsCertificateKeyFile") {
                if let Some(certificate) = secrets.certificate(&router.name) {
                    args.extend(["--tlsCertificateKeyFile".into(), certificate.into()]);
                }
                if let Some(ca) = &secrets.ca_file {
                    args.extend(["--tlsCAFile".into(), ca.into()]);
                }
            }
            if tls.allow_connections_without_certificates.unwrap_or(secrets.ca_generated) {
                args.push("--tlsAllowConnectionsWithoutCertificates".into());
            }
        }
        args.extend(cluster_args);
        supervised(&mut args);
        processes.push(ProcessPlan {
            name: router.name.clone(),
            role: Role::Router,
            host: endpoint.host,
            connect: endpoint.advertise,
            data_dir: None,
            log_path: data_dir.join(format!("{}.log", router.name)),
            args,
        });
    }
    ClusterPlan { processes, config_servers, shards }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ClusterSpec {
        let spec = ClusterSpec::parse(yaml, "test").expect("test spec parses");
        spec.validate(true).expect("test spec is valid");
        spec
    }

    const TWO_ROUTERS_TWO_SHARDS: &str = "
name: t
routers: [{ name: r0, port: 27017 }, { name: r1, port: 27018 }]
shards:
  - { name: s0, members: [{ port: 27101 }] }
  - { name: s1, members: [{ port: 27102 }] }
";

    #[test]
    fn a_shards_oplog_size_is_passed_to_each_of_its_members() {
        let yaml = TWO_ROUTERS_TWO_SHARDS
            .replace("members: [{ port: 27102 }] }", "members: [{ port: 27102 }], oplogSizeMB: 5 }");
        let plans = plan(&spec(&yaml), Path::new("/d"), &Secrets::default()).processes;
        let flag = |name: &str| {
            let p = plans.iter().find(|p| p.name == name).expect("planned");
            p.args.windows(2).find(|w| w[0] == "--oplog-size-mb").map(|w| w[1].clone())
        };
        assert_eq!(flag("s0"), None);
        assert_eq!(flag("s1"), Some("5".into()));
    }

    #[test]
    fn a_tracing_endpoint_reaches_every_server() {
        let yaml = format!("{TWO_ROUTERS_TWO_SHARDS}tracing: {{ otlp_endpoint: 'http://collector:4317' }}\n");
        let plans = plan(&spec(&yaml), Path::new("/d"), &Secrets::default()).processes;
        assert_eq!(plans.len(), 4);
        for p in &plans {
            let flag = p.args.windows(2).find(|w| w[0] == "--otlp-endpoint").map(|w| w[1].clone());
            assert_eq!(flag, Some("http://collector:4317".into()), "{}", p.name);
        }
        let plain = plan(&spec(TWO_ROUTERS_TWO_SHARDS), Path::new("/d"), &Secrets::default()).processes;
        assert!(plain.iter().all(|p| !p.args.iter().any(|a| a == "--otlp-endpoint")));
    }

    #[test]
    fn shards_start_first_and_routers_point_at_the_first_shard() {
        let plans = plan(&spec(TWO_ROUTERS_TWO_SHARDS), Path::new("/d"), &Secrets::default()).processes;
        let order: Vec<_> = plans.iter().map(|p| (p.name.as_str(), p.role)).collect();
        assert_eq!(order, [("s0", Role::Shard), ("s1", Role::Shard), ("r0", Role::Router), ("r1", Role::Router)]);
        let r1 = &plans[3];
        assert_eq!(
            r1.args,
            [
                "router",
                "--listen",
                "127.0.0.1:27018",
                "--metrics-port",
                "28018",
                "--shard",
                "http://127.0.0.1:27101",
                "--exit-on-stdin-eof"
            ]
        );
        assert_eq!(r1.data_dir, None);
        assert_eq!(r1.log_path, Path::new("/d/r1.log"));
    }

    #[test]
    fn shard_gets_its_own_data_dir_and_log() {
        let plans = plan(&spec(TWO_ROUTERS_TWO_SHARDS), Path::new("data"), &Secrets::default()).processes;
        let s1 = &plans[1];
        assert_eq!(
            s1.args,
            [
                "shard",
                "--name",
                "s1",
                "--listen",
                "127.0.0.1:27102",
                "--advertise",
                "127.0.0.1:27102",
                "--data-dir",
                "data/s1",
                "--metrics-port",
                "28102",
                "--exit-on-stdin-eof"
            ]
        );
        assert_eq!(s1.data_dir.as_deref(), Some(Path::new("data/s1")));
        assert_eq!(s1.log_path, Path::new("data/s1.log"));
        assert_eq!(s1.connect, "127.0.0.1:27102");
        assert_eq!(s1.host, "127.0.0.1");
    }

    #[test]
    fn wildcard_bind_is_dialed_on_loopback() {
        let plans =
            plan(&spec(&format!("bind_ip: 0.0.0.0\n{TWO_ROUTERS_TWO_SHARDS}")), Path::new("d"), &Secrets::default())
                .processes;
        assert_eq!(plans[0].args[4], "0.0.0.0:27101");
        assert_eq!(plans[0].connect, "127.0.0.1:27101");
        assert_eq!(plans[2].args[6], "http://127.0.0.1:27101");
        let v6 =
            plan(&spec(&format!("bind_ip: \"::\"\n{TWO_ROUTERS_TWO_SHARDS}")), Path::new("d"), &Secrets::default())
                .processes;
        assert_eq!(v6[2].connect, "[::1]:27017");
    }

    #[test]
    fn without_config_servers_nothing_is_registered_and_nobody_gets_config() {
        let cluster = plan(&spec(TWO_ROUTERS_TWO_SHARDS), Path::new("/d"), &Secrets::default());
        assert!(cluster.config_servers.is_empty() && cluster.shards.is_empty());
        assert_eq!(cluster.of_role(Role::ConfigServer).count(), 0);
        assert!(cluster.processes.iter().all(|p| !p.args.iter().any(|a| a == "--config")));
    }

    const WITH_CONFIG: &str = "
name: t
config_servers:
  - { name: c1, port: 27019 }
  - { name: c2, port: 27020 }
  - { name: c3, port: 27021 }
routers: [{ name: r0, port: 27017 }]
shards:
  - { name: s0, members: [{ port: 27101 }] }
  - { name: s1, members: [{ port: 27102 }] }
";

    #[test]
    fn config_servers_start_first_with_all_peers_and_node_1_initializes_last() {
        let cluster = plan(&spec(WITH_CONFIG), Path::new("/d"), &Secrets::default());
        let order: Vec<_> = cluster.processes.iter().map(|p| (p.name.as_str(), p.role)).collect();
        assert_eq!(
            order,
            [
                ("c2", Role::ConfigServer),
                ("c3", Role::ConfigServer),
                ("c1", Role::ConfigServer),
                ("s0", Role::Shard),
                ("s1", Role::Shard),
                ("r0", Role::Router)
            ]
        );
        let peers = "1=127.0.0.1:27019,2=127.0.0.1:27020,3=127.0.0.1:27021";
        let c1 = &cluster.processes[2];
        assert_eq!(
            c1.args,
            [
                "configsvr",
                "--id",
                "1",
                "--listen",
                "127.0.0.1:27019",
                "--data-dir",
                "/d/c1",
                "--peers",
                peers,
                "--metrics-port",
                "28019",
                "--init",
                "--exit-on-stdin-eof"
            ]
        );
        assert_eq!(c1.data_dir.as_deref(), Some(Path::new("/d/c1")));
        assert_eq!(c1.log_path, Path::new("/d/c1.log"));
        let c3 = &cluster.processes[1];
        assert_eq!(
            c3.args,
            [
                "configsvr",
                "--id",
                "3",
                "--listen",
                "127.0.0.1:27021",
                "--data-dir",
                "/d/c3",
                "--peers",
                peers,
                "--metrics-port",
                "28021",
                "--exit-on-stdin-eof"
            ]
        );
        let inits = cluster.processes.iter().filter(|p| p.args.iter().any(|a| a == "--init")).count();
        assert_eq!(inits, 1);
        assert_eq!(cluster.config_servers, ["127.0.0.1:27019", "127.0.0.1:27020", "127.0.0.1:27021"]);
    }

    #[test]
    fn shards_and_routers_get_every_config_server_and_shards_are_registered() {
        let cluster = plan(&spec(WITH_CONFIG), Path::new("/d"), &Secrets::default());
        let config = "127.0.0.1:27019,127.0.0.1:27020,127.0.0.1:27021";
        let s1 = &cluster.processes[4];
        assert_eq!(
            s1.args,
            [
                "shard",
                "--name",
                "s1",
                "--listen",
                "127.0.0.1:27102",
                "--advertise",
                "127.0.0.1:27102",
                "--data-dir",
                "/d/s1",
                "--metrics-port",
                "28102",
                "--config",
                config,
                "--exit-on-stdin-eof"
            ]
        );
        let r0 = &cluster.processes[5];
        assert_eq!(
            r0.args,
            [
                "router",
                "--listen",
                "127.0.0.1:27017",
                "--metrics-port",
                "28017",
                "--config",
                config,
                "--exit-on-stdin-eof"
            ]
        );
        let registration = |name: &str, member: &str| ShardRegistration {
            shard: name.into(),
            replica_set: name.into(),
            members: vec![member.into()],
        };
        assert_eq!(cluster.shards, [registration("s0", "127.0.0.1:27101"), registration("s1", "127.0.0.1:27102")]);
    }

    #[test]
    fn one_config_server_initializes_itself_and_wildcard_peers_are_dialed_on_loopback() {
        let yaml = "
name: t
bind_ip: 0.0.0.0
config_servers: [{ name: c1, port: 27019 }]
routers: [{ name: r0, port: 27017 }]
shards: [{ name: s0, members: [{ port: 27101 }] }]
";
        let cluster = plan(&spec(yaml), Path::new("d"), &Secrets::default());
        let c1 = &cluster.processes[0];
        assert_eq!(c1.role, Role::ConfigServer);
        assert_eq!(c1.args[4], "0.0.0.0:27019");
        assert_eq!(c1.args[8], "1=127.0.0.1:27019");
        assert_eq!(c1.args[9..12], ["--metrics-port", "28019", "--init"]);
        assert_eq!(cluster.config_servers, ["127.0.0.1:27019"]);
        assert_eq!(cluster.shards[0].members, ["127.0.0.1:27101"]);
    }

    const THREE_HOSTS: &str = "
name: t
security: { authorization: enabled }
config_servers:
  - { name: c1, port: 27019, host: 10.0.0.1 }
  - { name: c2, port: 27019, host: 10.0.0.2 }
  - { name: c3, port: 27019, host: db3.example.net }
routers: [{ name: r0, port: 27017, host: 10.0.0.1 }]
shards:
  - name: s0
    members: [{ port: 27018, host: 10.0.0.1 }, { port: 27018, host: 10.0.0.2 }, { port: 27018, host: db3.example.net }]
";

    #[test]
    fn hosts_listen_on_their_address_and_advertise_their_name() {
        let cluster = plan(&spec(THREE_HOSTS), Path::new("/d"), &Secrets::default());
        assert_eq!(cluster.config_servers, ["10.0.0.1:27019", "10.0.0.2:27019", "db3.example.net:27019"]);
        assert_eq!(cluster.shards[0].members, ["10.0.0.1:27018", "10.0.0.2:27018", "db3.example.net:27018"]);
        let third = cluster.processes.iter().find(|p| p.name == "s0-3").expect("planned");
        assert_eq!(third.host, "db3.example.net");
        let arg = |p: &ProcessPlan, flag: &str| p.args.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone());
        // A DNS name is not an address to bind: the wildcard is, and the name is advertised.
        assert_eq!(arg(third, "--listen"), Some("0.0.0.0:27018".into()));
        assert_eq!(arg(third, "--advertise"), Some("db3.example.net:27018".into()));
        let hosts: Vec<&str> = cluster.processes.iter().map(|p| p.host.as_str()).collect();
        assert!(hosts.iter().all(|h| ["10.0.0.1", "10.0.0.2", "db3.example.net"].contains(h)), "{hosts:?}");

        let first = plan(&spec(THREE_HOSTS), Path::new("/d"), &Secrets::default()).on_host("10.0.0.1");
        let names: Vec<&str> = first.processes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["c1", "s0-1", "r0"]);
        assert_eq!(arg(&first.processes[0], "--listen"), Some("10.0.0.1:27019".into()));
        // Every host still knows the whole catalog: all config servers, all shards to register.
        assert_eq!(first.config_servers.len(), 3);
        assert_eq!(first.shards[0].members.len(), 3);
    }
}
