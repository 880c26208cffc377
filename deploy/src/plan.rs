//! What `shoal up` starts, decided without I/O: the ordered list of processes a validated spec
//! names, each with its command line, data dir and log file.
//!
//! Order is the start order: shards first (routers need their endpoints), then routers. The
//! launcher stops them in reverse, so routers stop taking clients before the shards go.
//!
//! Until the config service exists (issue 3) a router forwards to exactly one shard: every router
//! is pointed at the first shard, and the others run but receive no traffic.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::spec::ClusterSpec;

/// Servers started by the launcher stop when it goes away (see `cli::ChildArgs`).
const EXIT_WITH_LAUNCHER: &str = "--exit-on-stdin-eof";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Shard,
    Router,
}

impl Role {
    /// The subcommand that runs this role, and the role word of its `SHOAL_READY` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Shard => "shard",
            Role::Router => "router",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    pub name: String,
    pub role: Role,
    /// Where clients (routers, drivers, the ping probe) reach it; loopback when it binds a
    /// wildcard address.
    pub connect: SocketAddr,
    /// Created before start; `None` for stateless processes.
    pub data_dir: Option<PathBuf>,
    /// Receives the process's stderr (its logs) and any stray stdout lines.
    pub log_path: PathBuf,
    /// Arguments after the executable, starting with the subcommand.
    pub args: Vec<OsString>,
}

/// Lays out the processes of `spec` (already validated) under `data_dir`.
pub fn plan(spec: &ClusterSpec, data_dir: &Path) -> Vec<ProcessPlan> {
    let connect_ip = connect_ip(spec.bind_ip);
    let mut plans = Vec::with_capacity(spec.shards.len() + spec.routers.len());
    for shard in &spec.shards {
        for member in &shard.members {
            let dir = data_dir.join(&shard.name);
            let listen = SocketAddr::new(spec.bind_ip, member.port);
            let args = vec![
                "shard".into(),
                "--name".into(),
                shard.name.clone().into(),
                "--listen".into(),
                listen.to_string().into(),
                "--data-dir".into(),
                dir.clone().into(),
                EXIT_WITH_LAUNCHER.into(),
            ];
            plans.push(ProcessPlan {
                name: shard.name.clone(),
                role: Role::Shard,
                connect: SocketAddr::new(connect_ip, member.port),
                data_dir: Some(dir),
                log_path: data_dir.join(format!("{}.log", shard.name)),
                args,
            });
        }
    }
    // Validation guarantees a shard; without one there is nothing a router could forward to.
    let Some(first_shard) = plans.first().map(|shard| shard.connect) else {
        return plans;
    };
    for router in &spec.routers {
        let listen = SocketAddr::new(spec.bind_ip, router.port);
        let args = vec![
            "router".into(),
            "--listen".into(),
            listen.to_string().into(),
            "--shard".into(),
            format!("http://{first_shard}").into(),
            EXIT_WITH_LAUNCHER.into(),
        ];
        plans.push(ProcessPlan {
            name: router.name.clone(),
            role: Role::Router,
            connect: SocketAddr::new(connect_ip, router.port),
            data_dir: None,
            log_path: data_dir.join(format!("{}.log", router.name)),
            args,
        });
    }
    plans
}

/// A wildcard bind (0.0.0.0, ::) is not an address to dial; loopback of the same family is.
fn connect_ip(bind_ip: IpAddr) -> IpAddr {
    match bind_ip {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    }
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
    fn shards_start_first_and_routers_point_at_the_first_shard() {
        let plans = plan(&spec(TWO_ROUTERS_TWO_SHARDS), Path::new("/d"));
        let order: Vec<_> = plans.iter().map(|p| (p.name.as_str(), p.role)).collect();
        assert_eq!(order, [("s0", Role::Shard), ("s1", Role::Shard), ("r0", Role::Router), ("r1", Role::Router)]);
        let r1 = &plans[3];
        assert_eq!(
            r1.args,
            ["router", "--listen", "127.0.0.1:27018", "--shard", "http://127.0.0.1:27101", "--exit-on-stdin-eof"]
        );
        assert_eq!(r1.data_dir, None);
        assert_eq!(r1.log_path, Path::new("/d/r1.log"));
    }

    #[test]
    fn shard_gets_its_own_data_dir_and_log() {
        let plans = plan(&spec(TWO_ROUTERS_TWO_SHARDS), Path::new("data"));
        let s1 = &plans[1];
        assert_eq!(
            s1.args,
            ["shard", "--name", "s1", "--listen", "127.0.0.1:27102", "--data-dir", "data/s1", "--exit-on-stdin-eof"]
        );
        assert_eq!(s1.data_dir.as_deref(), Some(Path::new("data/s1")));
        assert_eq!(s1.log_path, Path::new("data/s1.log"));
        assert_eq!(s1.connect, "127.0.0.1:27102".parse().expect("addr"));
    }

    #[test]
    fn wildcard_bind_is_dialed_on_loopback() {
        let plans = plan(&spec(&format!("bind_ip: 0.0.0.0\n{TWO_ROUTERS_TWO_SHARDS}")), Path::new("d"));
        assert_eq!(plans[0].args[4], "0.0.0.0:27101");
        assert_eq!(plans[0].connect, "127.0.0.1:27101".parse().expect("addr"));
        assert_eq!(plans[2].args[4], "http://127.0.0.1:27101");
        let v6 = plan(&spec(&format!("bind_ip: \"::\"\n{TWO_ROUTERS_TWO_SHARDS}")), Path::new("d"));
        assert_eq!(v6[2].connect, "[::1]:27017".parse().expect("addr"));
    }
}
