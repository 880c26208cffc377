//! `shoal deploy render`: the manifests other supervisors need to run a spec's cluster —
//! Kubernetes (`k8s.rs`), Docker Compose (`compose.rs`) and systemd (`systemd.rs`) — and the
//! Prometheus scrape configuration that watches it (`prometheus.rs`).
//!
//! ```text
//!  spec --validate--> addressed for the target (pod DNS names, compose service names, or the
//!  spec's own hosts) --plan::plan_for(External)--> each process's command line
//!       --> k8s::render | compose::render | systemd::render --> files under --out
//! ```
//!
//! Command lines come from `plan.rs`, the one owner of every process's flags; this module only
//! decides where processes live and how they are named, and the renderers only wrap command lines
//! in each target's objects. Secrets (the cluster key, an operator's TLS files) are mounted from
//! one directory ([`Mounts::secrets`]); a key the spec does not name is generated into the output
//! (readable by its owner only), never into a manifest checked in by accident.
//!
//! Must not: start, stop or contact anything; generate per-process certificates (a rendered
//! cluster with TLS uses the operator's certificate and CA from the spec).

mod compose;
mod k8s;
mod prometheus;
mod systemd;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::{RenderArgs, RenderFormat};
use crate::plan::{ClusterPlan, ProcessPlan, Role, Supervisor, plan_for};
use crate::secrets::Secrets;
use crate::spec::{ClusterAuthMode, ClusterSpec, TlsModeSpec};

/// The file names secrets have in the mounted secrets directory (and in a Kubernetes Secret).
pub const KEY_FILE: &str = "cluster.key";
pub const CERTIFICATE_FILE: &str = "server.pem";
pub const CA_FILE: &str = "ca.pem";

/// Where rendered processes find their files.
#[derive(Debug, Clone)]
pub struct Mounts {
    /// Every process's data dir is `<data>/<process name>`.
    pub data: PathBuf,
    /// The directory holding [`KEY_FILE`], [`CERTIFICATE_FILE`] and [`CA_FILE`].
    pub secrets: PathBuf,
}

/// The secret files a rendered cluster needs, by their name in [`Mounts::secrets`].
#[derive(Debug, Clone, Default)]
pub struct SecretFiles {
    pub files: Vec<(&'static str, Vec<u8>)>,
}

pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    let (spec, source) = ClusterSpec::load(args.file.as_deref())?;
    spec.validate(args.insecure).with_context(|| format!("invalid spec {source}"))?;
    // The scrape configuration needs no secrets (the metrics port is plain HTTP).
    let secrets = if args.format == RenderFormat::Prometheus { SecretFiles::default() } else { secret_files(&spec)? };
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let written = match args.format {
        RenderFormat::K8s => k8s::render(&spec, &args, &secrets)?,
        RenderFormat::Compose => compose::render(&spec, &args, &secrets)?,
        RenderFormat::Systemd => systemd::render(&spec, &args, &secrets)?,
        RenderFormat::Prometheus => prometheus::render(&spec)?,
    };
    for file in &written {
        write_file(&args.out, file)?;
    }
    println!("wrote {} file(s) to {}", written.len(), args.out.display());
    for file in &written {
        println!("  {}", file.path.display());
    }
    Ok(())
}

/// One file a renderer produced, relative to `--out`.
#[derive(Debug, Clone)]
pub struct Output {
    pub path: PathBuf,
    pub contents: Vec<u8>,
    /// Key material: written readable by its owner only.
    pub secret: bool,
}

impl Output {
    pub fn text(path: impl Into<PathBuf>, contents: String) -> Output {
        Output { path: path.into(), contents: contents.into_bytes(), secret: false }
    }
}

fn write_file(out: &Path, file: &Output) -> anyhow::Result<()> {
    let path = out.join(&file.path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    if file.secret {
        let text = std::str::from_utf8(&file.contents).with_context(|| format!("{} is not text", path.display()))?;
        shoal_cluster::pki::write_private(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    } else {
        std::fs::write(&path, &file.contents).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The cluster key (the spec's, or a new one) and the operator's TLS files the spec names.
/// Certificates `shoal up` would issue per process from its own CA cannot be rendered: every pod
/// or container would need its own, so a rendered TLS cluster names one certificate whose
/// subject alternative names cover every process's address.
fn secret_files(spec: &ClusterSpec) -> anyhow::Result<SecretFiles> {
    let mut files = Vec::new();
    let tls = &spec.net.tls;
    let cluster_auth = spec.security.effective_cluster_auth();
    let needs_certificate = tls.mode != TlsModeSpec::Disabled || cluster_auth == Some(ClusterAuthMode::X509);
    if needs_certificate {
        let (Some(certificate), Some(ca)) = (&tls.certificate_key_file, &tls.ca_file) else {
            bail!(
                "rendered manifests with TLS or x509 need net.tls.certificateKeyFile and net.tls.CAFile in the \
                 spec: one certificate whose names cover every process's address (shoal up's own CA issues one \
                 per process, which manifests cannot carry)"
            );
        };
        let read = |path: &Path| std::fs::read(path).with_context(|| format!("cannot read {}", path.display()));
        files.push((CERTIFICATE_FILE, read(certificate)?));
        files.push((CA_FILE, read(ca)?));
    }
    if cluster_auth == Some(ClusterAuthMode::KeyFile) {
        let key = match &spec.security.key_file {
            Some(path) => std::fs::read(path).with_context(|| format!("cannot read key file {}", path.display()))?,
            None => shoal_cluster::pki::new_key_file_text().into_bytes(),
        };
        files.push((KEY_FILE, key));
    }
    Ok(SecretFiles { files })
}

/// Where the processes' command lines point for credentials, as `shoal up`'s [`Secrets`] would.
fn mounted_secrets(spec: &ClusterSpec, plan_names: &[String], mounts: &Mounts) -> Secrets {
    let tls = &spec.net.tls;
    let cluster_auth = spec.security.effective_cluster_auth();
    let has_certificate = tls.certificate_key_file.is_some();
    Secrets {
        cluster_auth,
        key_file: (cluster_auth == Some(ClusterAuthMode::KeyFile)).then(|| mounts.secrets.join(KEY_FILE)),
        ca_file: tls.ca_file.as_ref().map(|_| mounts.secrets.join(CA_FILE)),
        ca_generated: false,
        certificates: if has_certificate {
            plan_names.iter().map(|name| (name.clone(), mounts.secrets.join(CERTIFICATE_FILE))).collect()
        } else {
            Default::default()
        },
    }
}

/// The spec with every process placed by `host_of(role, name, index in its group)` (a DNS name:
/// processes listen on the wildcard address and advertise the name) and `port_of` for its port.
pub fn readdressed(
    spec: &ClusterSpec,
    host_of: impl Fn(Role, &str, usize) -> String,
    port_of: impl Fn(Role, &str, usize, u16) -> u16,
) -> ClusterSpec {
    let mut spec = spec.clone();
    spec.bind_ip = None;
    for (index, server) in spec.config_servers.iter_mut().enumerate() {
        server.host = Some(host_of(Role::ConfigServer, &server.name, index));
        server.port = port_of(Role::ConfigServer, &server.name, index, server.port);
    }
    for shard in &mut spec.shards {
        for (index, member) in shard.members.iter_mut().enumerate() {
            member.host = Some(host_of(Role::Shard, &shard.name, index));
            member.port = port_of(Role::Shard, &shard.name, index, member.port);
        }
    }
    for (index, router) in spec.routers.iter_mut().enumerate() {
        router.host = Some(host_of(Role::Router, &router.name, index));
        router.port = port_of(Role::Router, &router.name, index, router.port);
    }
    spec
}

/// Plans `spec` (already readdressed) for an external supervisor with credentials under
/// `mounts`; checks the placed spec as `shoal up` would (a cluster reachable from the network
/// needs authorization and cluster authentication unless `insecure`).
pub fn plan_mounted(spec: &ClusterSpec, mounts: &Mounts, insecure: bool) -> anyhow::Result<ClusterPlan> {
    spec.validate(insecure).context("the spec as rendered")?;
    let names: Vec<String> = spec.listeners().into_iter().map(|l| l.name).collect();
    let secrets = mounted_secrets(spec, &names, mounts);
    Ok(plan_for(spec, &mounts.data, &secrets, Supervisor::External))
}

/// The value after `flag` in a planned command line.
pub fn flag_value<'a>(process: &'a ProcessPlan, flag: &str) -> Option<&'a str> {
    process.args.windows(2).find(|w| w[0] == flag).and_then(|w| w[1].to_str())
}

/// A planned command line as strings (every planned argument is UTF-8: names, addresses, paths
/// built from them).
pub fn args_of(process: &ProcessPlan) -> Vec<String> {
    process.args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// Replaces the value after `flag` (every occurrence) in `args`.
pub fn set_flag(args: &mut [String], flag: &str, value: &str) {
    for i in 0..args.len().saturating_sub(1) {
        if args[i] == flag {
            args[i + 1] = value.to_owned();
        }
    }
}

/// The cluster-authentication flags of a planned command line (what `shoal probe` and
/// `shoal deploy register` need to reach the cluster's gRPC ports).
pub fn cluster_auth_args(args: &[String]) -> Vec<String> {
    const FLAGS: [&str; 5] =
        ["--clusterAuthMode", "--keyFile", "--tlsCertificateKeyFile", "--tlsCAFile", "--tlsClusterFile"];
    let mut out = Vec::new();
    for pair in args.windows(2) {
        if FLAGS.contains(&pair[0].as_str()) {
            out.extend([pair[0].clone(), pair[1].clone()]);
        }
    }
    out
}

/// `shoal deploy register`'s arguments for `plan`'s shards.
pub fn register_args(plan: &ClusterPlan, auth: &[String]) -> Vec<String> {
    let mut args =
        vec!["deploy".to_owned(), "register".to_owned(), "--config".to_owned(), plan.config_servers.join(",")];
    for shard in &plan.shards {
        args.extend(["--shard".to_owned(), format!("{}={}", shard.shard, shard.members.join(","))]);
    }
    args.extend(auth.iter().cloned());
    args
}

/// The port others dial `process` at.
pub fn port_of(process: &ProcessPlan) -> u16 {
    process.connect.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(0)
}

/// `shoal probe`'s arguments for `process`, dialed on loopback inside its own container or host
/// (it listens on the wildcard address or its host's).
pub fn probe_args(process: &ProcessPlan, spec: &ClusterSpec, ready: bool) -> Vec<String> {
    let args = args_of(process);
    // Where the process listens, dialed as the spec's one rule dials a bind (a wildcard on loopback).
    let listen: Option<std::net::SocketAddr> = flag_value(process, "--listen").and_then(|l| l.parse().ok());
    let ip = listen.map_or(std::net::Ipv4Addr::LOCALHOST.into(), |l| crate::spec::connect_ip(l.ip()));
    let addr = std::net::SocketAddr::new(ip, port_of(process));
    let mut probe = vec!["probe".to_owned(), "--role".to_owned(), process.role.as_str().to_owned()];
    probe.extend(["--addr".to_owned(), addr.to_string()]);
    if ready {
        probe.push("--ready".to_owned());
    }
    match process.role {
        Role::Router => {
            if spec.net.tls.mode == TlsModeSpec::RequireTls {
                probe.push("--tls".to_owned());
                for flag in ["--tlsCAFile", "--tlsCertificateKeyFile"] {
                    if let Some(value) = flag_value(process, flag) {
                        probe.extend([flag.to_owned(), value.to_owned()]);
                    }
                }
            }
        }
        Role::Shard | Role::ConfigServer => probe.extend(cluster_auth_args(&args)),
    }
    probe
}

/// A DNS-1123 label from a spec name (Kubernetes object names, compose host names): lowercase,
/// `_` as `-`.
pub fn dns_label(name: &str) -> String {
    name.chars().map(|c| if c == '_' { '-' } else { c.to_ascii_lowercase() }).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const SECURED: &str = "
name: prod
security: { authorization: enabled }
config_servers:
  - { name: c1, port: 27019, host: 10.0.0.1 }
  - { name: c2, port: 27019, host: 10.0.0.2 }
  - { name: c3, port: 27019, host: 10.0.0.3 }
routers:
  - { name: r0, port: 27017, host: 10.0.0.1 }
  - { name: r1, port: 27017, host: 10.0.0.2 }
shards:
  - name: s0
    members: [{ port: 27018, host: 10.0.0.1 }, { port: 27018, host: 10.0.0.2 }, { port: 27018, host: 10.0.0.3 }]
  - name: s1
    members: [{ port: 27028, host: 10.0.0.1 }, { port: 27028, host: 10.0.0.2 }, { port: 27028, host: 10.0.0.3 }]
";

    pub fn spec(yaml: &str) -> ClusterSpec {
        let spec = ClusterSpec::parse(yaml, "test").expect("test spec parses");
        spec.validate(true).expect("test spec is valid");
        spec
    }

    pub fn args(out: &Path, format: RenderFormat) -> RenderArgs {
        RenderArgs {
            file: None,
            format,
            out: out.to_owned(),
            image: "shoal:test".into(),
            namespace: "db".into(),
            storage: "5Gi".into(),
            binary: "/usr/local/bin/shoal".into(),
            insecure: false,
        }
    }

    #[test]
    fn a_secured_spec_gets_a_new_key_and_a_tls_spec_needs_the_operators_certificate() {
        let secrets = secret_files(&spec(SECURED)).expect("secrets");
        let names: Vec<&str> = secrets.files.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, [KEY_FILE]);
        let text = String::from_utf8(secrets.files[0].1.clone()).expect("text");
        assert!(shoal_cluster::net::keyfile::ClusterKey::from_text(&text).is_ok());
        let tls = spec(&SECURED.replace("security:", "net: { tls: { mode: requireTLS } }\nsecurity:"));
        let error = secret_files(&tls).expect_err("needs a certificate").to_string();
        assert!(error.contains("net.tls.certificateKeyFile"), "{error}");
    }

    #[test]
    fn an_unsecured_spec_is_refused_once_it_listens_on_the_network() {
        let open = spec(
            "name: t\nconfig_servers: [{ name: c1, port: 27019 }]\nrouters: [{ name: r0, port: 27017 }]\nshards: [{ name: s0, members: [{ port: 27018 }] }]\n",
        );
        let placed = readdressed(&open, |_, name, i| format!("{}-{i}", dns_label(name)), |_, _, _, p| p);
        let mounts = Mounts { data: "/data".into(), secrets: "/secrets".into() };
        let error = format!("{:#}", plan_mounted(&placed, &mounts, false).expect_err("insecure"));
        assert!(error.contains("security.authorization"), "{error}");
        assert!(plan_mounted(&placed, &mounts, true).is_ok());
    }

    #[test]
    fn probes_dial_loopback_and_carry_the_cluster_key() {
        let placed = readdressed(&spec(SECURED), |_, name, i| format!("{}-{i}.svc", dns_label(name)), |_, _, _, p| p);
        let mounts = Mounts { data: "/data".into(), secrets: "/secrets".into() };
        let plan = plan_mounted(&placed, &mounts, false).expect("plan");
        let member = plan.of_role(Role::Shard).next().expect("a member");
        assert_eq!(
            probe_args(member, &placed, true),
            ["probe", "--role", "shard", "--addr", "127.0.0.1:27018", "--ready", "--keyFile", "/secrets/cluster.key"]
        );
        assert!(!member.args.iter().any(|a| a == "--exit-on-stdin-eof"));
        let register = register_args(&plan, &cluster_auth_args(&args_of(member)));
        assert_eq!(register[..4], ["deploy", "register", "--config", "c1-0.svc:27019,c2-1.svc:27019,c3-2.svc:27019"]);
        assert_eq!(register[4..6], ["--shard", "s0=s0-0.svc:27018,s0-1.svc:27018,s0-2.svc:27018"]);
        assert_eq!(register[register.len() - 2..], ["--keyFile", "/secrets/cluster.key"]);
    }
}
