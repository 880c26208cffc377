//! Docker Compose: one service per process (its host name is its name, so the addresses the
//! catalog lists resolve on the project's network), a named volume per stateful process, a
//! healthcheck running `shoal probe`, the spec's restart policy, the routers' ports published,
//! every process's metrics port (`--metrics-port`) exposed on the project's network, with a
//! `prometheus.yml` scraping them there by service name (docs/operations.md), a
//! one-shot `keys` service installing the key file for the image's user, and a one-shot `register`
//! service registering the shards.
//!
//! `docker-compose config -q` validates the result (tests/tests/deploy_render.rs).

use std::collections::BTreeMap;

use anyhow::bail;
use serde::Serialize;

use super::{
    Mounts, Output, SecretFiles, args_of, cluster_auth_args, dns_label, plan_mounted, port_of, probe_args, readdressed,
    register_args,
};
use crate::cli::RenderArgs;
use crate::plan::Role;
use crate::spec::{ClusterSpec, RestartPolicy};

const DATA: &str = "/data";
const KEYS: &str = "/run/shoal/secrets";
/// The image's user (deploy/Dockerfile), owner of the installed key file.
const UID: u32 = 10001;

#[derive(Debug, Serialize)]
struct ComposeFile {
    version: &'static str,
    services: BTreeMap<String, Service>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    volumes: BTreeMap<String, Option<()>>,
}

#[derive(Debug, Default, Serialize)]
struct Service {
    image: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entrypoint: Option<Vec<String>>,
    command: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    volumes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    expose: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    depends_on: BTreeMap<String, Dependency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    healthcheck: Option<Healthcheck>,
    /// Absent is Compose's `"no"` (which YAML 1.1 readers, docker-compose's among them, would
    /// take for a boolean if written bare).
    #[serde(skip_serializing_if = "Option::is_none")]
    restart: Option<&'static str>,
}

#[derive(Debug, Serialize)]
struct Dependency {
    condition: &'static str,
}

#[derive(Debug, Serialize)]
struct Healthcheck {
    test: Vec<String>,
    interval: &'static str,
    timeout: &'static str,
    retries: u32,
    start_period: &'static str,
}

pub fn render(spec: &ClusterSpec, args: &RenderArgs, secrets: &SecretFiles) -> anyhow::Result<Vec<Output>> {
    let host_name = |role: Role, name: &str, index: usize| match role {
        Role::Shard => {
            let shard = spec.shards.iter().find(|s| s.name == name);
            dns_label(&shard.map_or_else(|| name.to_owned(), |s| s.member_name(index)))
        }
        _ => dns_label(name),
    };
    let placed = readdressed(spec, host_name, |_, _, _, port| port);
    let mounts = Mounts { data: DATA.into(), secrets: KEYS.into() };
    let plan = plan_mounted(&placed, &mounts, args.insecure)?;
    let secured = !secrets.files.is_empty();
    let restart = match spec.restart {
        RestartPolicy::OnFailure => Some("on-failure"),
        RestartPolicy::Never => None,
    };

    let mut file = ComposeFile { version: "3.8", services: BTreeMap::new(), volumes: BTreeMap::new() };
    let keys_dependency = || {
        let mut depends = BTreeMap::new();
        if secured {
            depends.insert("keys".to_owned(), Dependency { condition: "service_completed_successfully" });
        }
        depends
    };
    if secured {
        file.volumes.insert("keys".to_owned(), None);
        file.services.insert(
            "keys".to_owned(),
            Service {
                image: args.image.clone(),
                user: Some("0".into()),
                entrypoint: Some(vec!["sh".into(), "-c".into()]),
                command: vec![format!("install -o {UID} -g {UID} -m 0400 /secrets/* {KEYS}/")],
                volumes: vec!["./secrets:/secrets:ro".into(), format!("keys:{KEYS}")],
                restart: None,
                ..Default::default()
            },
        );
    }
    let mut published_ports = std::collections::BTreeSet::new();
    for process in &plan.processes {
        let name = process.host.clone();
        if file.services.contains_key(&name) {
            bail!("two processes are both named {name} once made host names (lowercase, _ as -); rename one");
        }
        // Data dirs, and a router's audit log when the spec asks for one, live under /data.
        let mut volumes = vec![format!("{name}-data:{DATA}")];
        file.volumes.insert(format!("{name}-data"), None);
        if secured {
            volumes.push(format!("keys:{KEYS}:ro"));
        }
        let mut depends_on = keys_dependency();
        if process.role == Role::Router {
            for config in plan.of_role(Role::ConfigServer) {
                depends_on.insert(config.host.clone(), Dependency { condition: "service_started" });
            }
        }
        // Routers' ports are published on the one Docker host: the next free one when two
        // routers of different hosts share a port.
        let ports = if process.role == Role::Router {
            let port = port_of(process);
            let mut published = port;
            while !published_ports.insert(published) {
                published = published.saturating_add(1);
            }
            vec![format!("{published}:{port}")]
        } else {
            Vec::new()
        };
        let command = args_of(process);
        let expose: Vec<String> = super::flag_value(process, "--metrics-port").map(str::to_owned).into_iter().collect();
        let mut test = vec!["CMD".to_owned(), "shoal".to_owned()];
        test.extend(probe_args(process, &placed, true));
        file.services.insert(
            name.clone(),
            Service {
                image: args.image.clone(),
                hostname: Some(name),
                command,
                volumes,
                ports,
                expose,
                depends_on,
                healthcheck: Some(Healthcheck {
                    test,
                    interval: "10s",
                    timeout: "5s",
                    retries: 6,
                    start_period: "30s",
                }),
                restart,
                ..Default::default()
            },
        );
    }
    if !plan.shards.is_empty() {
        let auth = plan.of_role(Role::Shard).next().map(|p| cluster_auth_args(&args_of(p))).unwrap_or_default();
        let mut depends_on = keys_dependency();
        for config in plan.of_role(Role::ConfigServer) {
            depends_on.insert(config.host.clone(), Dependency { condition: "service_started" });
        }
        let volumes = if secured { vec![format!("keys:{KEYS}:ro")] } else { Vec::new() };
        file.services.insert(
            "register".to_owned(),
            Service {
                image: args.image.clone(),
                command: register_args(&plan, &auth),
                volumes,
                depends_on,
                restart: Some("on-failure"),
                ..Default::default()
            },
        );
    }
    let mut outputs = vec![
        Output::text("docker-compose.yaml", serde_yaml::to_string(&file)?),
        // For a Prometheus on the project's network: the placed spec's hosts are the service names.
        Output::text("prometheus.yml", super::prometheus::config_text(&placed)?),
    ];
    for (name, contents) in &secrets.files {
        outputs.push(Output { path: format!("secrets/{name}").into(), contents: contents.clone(), secret: true });
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SECURED, args, spec};
    use super::*;
    use crate::cli::RenderFormat;

    #[test]
    fn every_process_is_a_service_named_as_its_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets = super::super::secret_files(&spec(SECURED)).expect("secrets");
        let outputs = render(&spec(SECURED), &args(dir.path(), RenderFormat::Compose), &secrets).expect("renders");
        let doc: serde_yaml::Value = serde_yaml::from_slice(&outputs[0].contents).expect("yaml");
        let services = doc.get("services").and_then(|s| s.as_mapping()).expect("services");
        let names: Vec<&str> = services.keys().filter_map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            ["c1", "c2", "c3", "keys", "r0", "r1", "register", "s0-1", "s0-2", "s0-3", "s1-1", "s1-2", "s1-3"]
        );
        let s0_2 = &services[&serde_yaml::Value::from("s0-2")];
        let command: Vec<&str> =
            s0_2["command"].as_sequence().expect("command").iter().filter_map(|v| v.as_str()).collect();
        assert!(command.windows(2).any(|w| w == ["--advertise", "s0-2:27018"]), "{command:?}");
        assert!(command.windows(2).any(|w| w == ["--listen", "0.0.0.0:27018"]), "{command:?}");
        assert!(command.windows(2).any(|w| w == ["--keyFile", "/run/shoal/secrets/cluster.key"]), "{command:?}");
        assert_eq!(s0_2["restart"].as_str(), Some("on-failure"));
        assert_eq!(services[&serde_yaml::Value::from("r1")]["ports"][0].as_str(), Some("27018:27017"));
        // Every process's metrics port is exposed, and is the one its command line serves.
        for (name, port) in [("c2", "28019"), ("s0-2", "28018"), ("s1-3", "28028"), ("r1", "28017")] {
            let service = &services[&serde_yaml::Value::from(name)];
            assert_eq!(service["expose"][0].as_str(), Some(port), "{name}");
            let command: Vec<&str> =
                service["command"].as_sequence().expect("command").iter().filter_map(|v| v.as_str()).collect();
            assert!(command.windows(2).any(|w| w == ["--metrics-port", port]), "{name}: {command:?}");
        }
        assert!(services[&serde_yaml::Value::from("register")].get("expose").is_none());
        let prometheus = String::from_utf8(outputs[1].contents.clone()).expect("text");
        assert_eq!(outputs[1].path, std::path::Path::new("prometheus.yml"));
        for target in ["- c2:28019\n", "- s0-2:28018\n", "- r1:28017\n"] {
            assert!(prometheus.contains(target), "{target} in {prometheus}");
        }
        assert_eq!(outputs[2].path, std::path::Path::new("secrets/cluster.key"));
        assert!(outputs[2].secret);
    }
}
