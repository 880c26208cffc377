//! systemd: per host of the spec, a directory laid out as the machine's root — one unit per
//! process (`etc/systemd/system/shoal-<name>.service`, restart policy from the spec), a
//! `shoal.target` grouping them, the registration unit on the first config server's host, the
//! secrets under `etc/shoal/secrets/` — and an `install.sh` that creates the `shoal` user, copies
//! the tree into place and starts the target.
//!
//! Must not: run anything; the operator copies each host's directory to that host and runs its
//! `install.sh`.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::{Mounts, Output, SecretFiles, args_of, cluster_auth_args, plan_mounted, register_args};
use crate::cli::RenderArgs;
use crate::plan::{ProcessPlan, Role};
use crate::spec::{ClusterSpec, RestartPolicy};

const DATA: &str = "/var/lib/shoal";
const SECRETS: &str = "/etc/shoal/secrets";
const UNITS: &str = "etc/systemd/system";

pub fn render(spec: &ClusterSpec, args: &RenderArgs, secrets: &SecretFiles) -> anyhow::Result<Vec<Output>> {
    let mounts = Mounts { data: DATA.into(), secrets: SECRETS.into() };
    // The spec's own hosts: processes listen where `shoal up --host` would have them listen.
    let plan = plan_mounted(spec, &mounts, args.insecure)?;
    let binary = args.binary.display().to_string();
    let restart = match spec.restart {
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Never => "no",
    };
    // Config server 1's host (the plan starts it last, so not the plan's first).
    let register_host = spec.config_servers.first().map(|c| spec.endpoint(c.host.as_deref(), c.port).host);
    let mut outputs = Vec::new();
    for host in spec.hosts() {
        let dir = PathBuf::from(host_dir(&host));
        let mut units = Vec::new();
        for process in plan.processes.iter().filter(|p| p.host == host) {
            let unit = format!("shoal-{}.service", process.name);
            outputs
                .push(Output::text(dir.join(UNITS).join(&unit), service_unit(&spec.name, process, &binary, restart)));
            units.push(unit);
        }
        if register_host.as_deref() == Some(host.as_str()) && !plan.shards.is_empty() {
            let auth = plan.of_role(Role::Shard).next().map(|p| cluster_auth_args(&args_of(p))).unwrap_or_default();
            let after: Vec<String> = plan
                .of_role(Role::ConfigServer)
                .filter(|p| p.host == host)
                .map(|p| format!("shoal-{}.service", p.name))
                .collect();
            let unit = register_unit(&spec.name, &binary, &register_args(&plan, &auth), &after);
            outputs.push(Output::text(dir.join(UNITS).join("shoal-register.service"), unit));
            units.push("shoal-register.service".to_owned());
        }
        outputs.push(Output::text(dir.join(UNITS).join("shoal.target"), target_unit(&spec.name, &units)));
        for (name, contents) in &secrets.files {
            outputs.push(Output {
                path: dir.join("etc/shoal/secrets").join(name),
                contents: contents.clone(),
                secret: true,
            });
        }
        outputs.push(Output::text(dir.join("install.sh"), install_script(&host, &binary)));
    }
    Ok(outputs)
}

/// A host's directory name: its address or name, with `:` (IPv6) as `_`.
fn host_dir(host: &str) -> String {
    host.replace(':', "_")
}

/// One argument of `ExecStart=`, quoted as systemd reads it (`$` and `%` are expanded by systemd
/// unless doubled).
fn quote(arg: &str) -> String {
    let escaped = arg.replace('\\', "\\\\").replace('"', "\\\"").replace('$', "$$").replace('%', "%%");
    if escaped.is_empty() || escaped.chars().any(|c| c.is_whitespace() || c == '\'' || c == ';') {
        format!("\"{escaped}\"")
    } else {
        escaped
    }
}

fn exec_line(binary: &str, args: &[String]) -> String {
    let mut line = quote(binary);
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

fn service_unit(cluster: &str, process: &ProcessPlan, binary: &str, restart: &str) -> String {
    let mut unit = String::new();
    let _ = writeln!(unit, "[Unit]");
    let _ = writeln!(unit, "Description=Shoal {} {} of cluster {cluster}", process.role.as_str(), process.name);
    let _ = writeln!(unit, "After=network-online.target");
    let _ = writeln!(unit, "Wants=network-online.target");
    let _ = writeln!(unit, "PartOf=shoal.target");
    // shoal up's backoff keeps retrying; so does this (no start limit).
    let _ = writeln!(unit, "StartLimitIntervalSec=0");
    let _ = writeln!(unit, "\n[Service]");
    let _ = writeln!(unit, "Type=simple");
    let _ = writeln!(unit, "User=shoal");
    let _ = writeln!(unit, "Group=shoal");
    let _ = writeln!(unit, "StateDirectory=shoal");
    let _ = writeln!(unit, "ExecStart={}", exec_line(binary, &args_of(process)));
    let _ = writeln!(unit, "Restart={restart}");
    let _ = writeln!(unit, "RestartSec=2s");
    let _ = writeln!(unit, "TimeoutStopSec=60s");
    let _ = writeln!(unit, "LimitNOFILE=64000");
    let _ = writeln!(unit, "NoNewPrivileges=yes");
    let _ = writeln!(unit, "ProtectSystem=full");
    let _ = writeln!(unit, "PrivateTmp=yes");
    let _ = writeln!(unit, "\n[Install]");
    let _ = writeln!(unit, "WantedBy=shoal.target");
    unit
}

fn register_unit(cluster: &str, binary: &str, args: &[String], after: &[String]) -> String {
    let mut unit = String::new();
    let _ = writeln!(unit, "[Unit]");
    let _ = writeln!(unit, "Description=Register the shards of Shoal cluster {cluster} in its catalog");
    let _ = writeln!(unit, "After=network-online.target {}", after.join(" "));
    let _ = writeln!(unit, "Wants=network-online.target");
    let _ = writeln!(unit, "PartOf=shoal.target");
    let _ = writeln!(unit, "\n[Service]");
    let _ = writeln!(unit, "Type=oneshot");
    let _ = writeln!(unit, "RemainAfterExit=yes");
    let _ = writeln!(unit, "User=shoal");
    let _ = writeln!(unit, "Group=shoal");
    let _ = writeln!(unit, "ExecStart={}", exec_line(binary, args));
    let _ = writeln!(unit, "\n[Install]");
    let _ = writeln!(unit, "WantedBy=shoal.target");
    unit
}

fn target_unit(cluster: &str, units: &[String]) -> String {
    format!(
        "[Unit]\nDescription=Shoal cluster {cluster}: every process of this host\nWants={}\n\n[Install]\nWantedBy=multi-user.target\n",
        units.join(" ")
    )
}

fn install_script(host: &str, binary: &str) -> String {
    format!(
        r#"#!/bin/sh
# Installs host {host}'s Shoal units: run as root from this directory, with the shoal binary at {binary}.
set -eu
cd "$(dirname "$0")"
test -x {binary} || {{ echo "install the shoal binary at {binary} first" >&2; exit 1; }}
id shoal >/dev/null 2>&1 || useradd --system --home-dir /var/lib/shoal --shell /usr/sbin/nologin shoal
install -d -m 0755 /etc/systemd/system
install -m 0644 etc/systemd/system/* /etc/systemd/system/
if [ -d etc/shoal/secrets ]; then
  install -d -o shoal -g shoal -m 0700 /etc/shoal/secrets
  install -o shoal -g shoal -m 0400 etc/shoal/secrets/* /etc/shoal/secrets/
fi
systemctl daemon-reload
systemctl enable --now shoal.target
"#
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SECURED, args, spec};
    use super::*;
    use crate::cli::RenderFormat;

    #[test]
    fn each_host_gets_its_processes_units_and_the_first_the_registration() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets = super::super::secret_files(&spec(SECURED)).expect("secrets");
        let outputs = render(&spec(SECURED), &args(dir.path(), RenderFormat::Systemd), &secrets).expect("renders");
        let paths: Vec<String> = outputs.iter().map(|o| o.path.display().to_string()).collect();
        for expected in [
            "10.0.0.1/etc/systemd/system/shoal-c1.service",
            "10.0.0.1/etc/systemd/system/shoal-s0-1.service",
            "10.0.0.1/etc/systemd/system/shoal-r0.service",
            "10.0.0.1/etc/systemd/system/shoal-register.service",
            "10.0.0.1/etc/systemd/system/shoal.target",
            "10.0.0.1/etc/shoal/secrets/cluster.key",
            "10.0.0.3/etc/systemd/system/shoal-s1-3.service",
            "10.0.0.3/install.sh",
        ] {
            assert!(paths.contains(&expected.to_owned()), "{expected} missing from {paths:?}");
        }
        assert!(!paths.contains(&"10.0.0.2/etc/systemd/system/shoal-register.service".to_owned()));
        let unit = |path: &str| {
            let output = outputs.iter().find(|o| o.path.display().to_string() == path).expect("rendered");
            String::from_utf8(output.contents.clone()).expect("text")
        };
        let s0 = unit("10.0.0.2/etc/systemd/system/shoal-s0-2.service");
        assert!(s0.contains("\nExecStart=/usr/local/bin/shoal shard --name s0 --listen 10.0.0.2:27018 --advertise 10.0.0.2:27018 --data-dir /var/lib/shoal/s0-2 --metrics-port 28018 --config 10.0.0.1:27019,10.0.0.2:27019,10.0.0.3:27019 --keyFile /etc/shoal/secrets/cluster.key\n"), "{s0}");
        assert!(s0.contains("\nRestart=on-failure\n"), "{s0}");
        let target = unit("10.0.0.1/etc/systemd/system/shoal.target");
        assert!(
            target.contains(
                "Wants=shoal-c1.service shoal-s0-1.service shoal-s1-1.service shoal-r0.service shoal-register.service"
            ),
            "{target}"
        );
    }

    #[test]
    fn exec_arguments_are_quoted_as_systemd_reads_them() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a b"), "\"a b\"");
        assert_eq!(quote("$(X)"), "$$(X)");
        assert_eq!(quote("50%"), "50%%");
        assert_eq!(quote(""), "\"\"");
    }
}
