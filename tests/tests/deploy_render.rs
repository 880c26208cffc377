//! `shoal deploy render`, `shoal probe` and `shoal deploy register` from outside: the Compose file
//! passes `docker-compose config -q` (Debian's docker-compose), the Kubernetes manifests hold
//! every object and keep the key out of `cluster.yaml`, and the systemd units' command lines —
//! config servers started as a StatefulSet starts them (one shared command line: `--advertise`
//! instead of `--id`, `--init` on every member) — run a cluster that the registration unit
//! registers, the probes judge and a driver writes to at w:majority.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::doc;
use shoal_tests::ports::free_ports;
use shoal_tests::process::{Process, ProcessSpec, shoal_bin};

const RUN_TIMEOUT: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(90);

async fn shoal(args: &[&str], cwd: &Path) -> std::process::Output {
    let run = tokio::process::Command::new(shoal_bin().expect("shoal binary"))
        .args(args)
        .current_dir(cwd)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(RUN_TIMEOUT, run).await.expect("shoal finishes").expect("shoal runs")
}

fn render(dir: &Path, spec: &str, format: &str) -> PathBuf {
    std::fs::write(dir.join("spec.yaml"), spec).unwrap();
    let out = dir.join(format);
    let output = std::process::Command::new(shoal_bin().unwrap())
        .args(["deploy", "render", "-f", "spec.yaml", "--format", format, "--out"])
        .arg(&out)
        .current_dir(dir)
        .output()
        .expect("shoal deploy render runs");
    assert!(output.status.success(), "render failed: {}", String::from_utf8_lossy(&output.stderr));
    out
}

const THREE_HOSTS: &str = "
name: Prod_1
security: { authorization: enabled }
config_servers:
  - { name: c1, port: 27019, host: 10.0.0.1 }
  - { name: c2, port: 27019, host: 10.0.0.2 }
  - { name: c3, port: 27019, host: db3.example.net }
routers:
  - { name: r0, port: 27017, host: 10.0.0.1 }
  - { name: r1, port: 27017, host: 10.0.0.2 }
shards:
  - name: s0
    members: [{ port: 27018, host: 10.0.0.1 }, { port: 27018, host: 10.0.0.2 }, { port: 27018, host: db3.example.net }]
  - name: s_1
    members: [{ port: 27028, host: 10.0.0.1 }]
";

#[test]
fn the_compose_file_passes_docker_compose_validation() {
    let dir = tempfile::tempdir().unwrap();
    let out = render(dir.path(), THREE_HOSTS, "compose");
    let key = out.join("secrets/cluster.key");
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    let checked = std::process::Command::new("docker-compose").args(["config", "-q"]).current_dir(&out).output();
    let checked = checked.expect("docker-compose (Debian's package; .ci/run installs it) runs");
    assert!(
        checked.status.success(),
        "docker-compose config -q refused the file: {}\n{}",
        String::from_utf8_lossy(&checked.stderr),
        std::fs::read_to_string(out.join("docker-compose.yaml")).unwrap()
    );
}

#[test]
fn kubernetes_manifests_hold_every_object_and_the_key_only_in_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let out = render(dir.path(), THREE_HOSTS, "k8s");
    let cluster = std::fs::read_to_string(out.join("cluster.yaml")).unwrap();
    let kinds: Vec<(String, String)> = serde_yaml::Deserializer::from_str(&cluster)
        .map(|doc| {
            let value: serde_yaml::Value = serde::Deserialize::deserialize(doc).expect("YAML document");
            let kind = value["kind"].as_str().expect("kind").to_owned();
            assert!(value["apiVersion"].as_str().is_some(), "{kind} without apiVersion");
            (kind, value["metadata"]["name"].as_str().expect("name").to_owned())
        })
        .collect();
    for expected in [
        ("StatefulSet", "prod-1-config"),
        ("StatefulSet", "prod-1-s0"),
        ("StatefulSet", "prod-1-s-1"),
        ("Service", "prod-1-s-1"),
        ("PodDisruptionBudget", "prod-1-s0"),
        ("Deployment", "prod-1-router"),
        ("Service", "prod-1-router"),
        ("Job", "prod-1-register"),
    ] {
        assert!(kinds.contains(&(expected.0.to_owned(), expected.1.to_owned())), "{expected:?} missing: {kinds:?}");
    }
    let secret = std::fs::read_to_string(out.join("secret.yaml")).unwrap();
    assert!(secret.contains("kind: Secret") && secret.contains("cluster.key"), "{secret}");
    assert_eq!(std::fs::metadata(out.join("secret.yaml")).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!cluster.contains("kind: Secret"));
}

#[test]
fn rendering_an_unprotected_cluster_for_the_network_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.yaml"), THREE_HOSTS.replace("security: { authorization: enabled }", ""))
        .unwrap();
    let output = std::process::Command::new(shoal_bin().unwrap())
        .args(["deploy", "render", "-f", "spec.yaml", "--format", "k8s", "--out", "k8s"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("security.authorization"), "{stderr}");
}

/// `ExecStart=` of a rendered unit, as systemd would split it (the renderer quotes nothing here).
fn exec_start(unit: &str) -> Vec<String> {
    let line = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    line.split_whitespace().skip(1).map(|a| a.replace("$$", "$")).collect()
}

/// The unit's command line with the install layout's paths moved under `root`.
fn relocated(args: Vec<String>, root: &Path, secrets: &Path) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            a.replace("/var/lib/shoal", &root.join("data").display().to_string())
                .replace("/etc/shoal/secrets", &secrets.display().to_string())
        })
        .collect()
}

fn flag(args: &[String], name: &str) -> String {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone()).unwrap_or_else(|| panic!("{name} in {args:?}"))
}

async fn probe(args: &[&str]) -> bool {
    let mut all = vec!["probe"];
    all.extend_from_slice(args);
    shoal(&all, Path::new("/")).await.status.success()
}

async fn probe_until(args: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !probe(args).await {
        assert!(tokio::time::Instant::now() < deadline, "shoal probe {args:?} never succeeded");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn systemd_units_run_a_cluster_the_registration_unit_registers_and_the_probes_judge() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(7).unwrap();
    let spec = format!(
        "
name: units
security: {{ clusterAuthMode: keyFile }}
config_servers:
  - {{ name: c1, port: {}, host: 127.0.0.1 }}
  - {{ name: c2, port: {}, host: 127.0.0.1 }}
  - {{ name: c3, port: {}, host: 127.0.0.1 }}
routers: [{{ name: r0, port: {}, host: 127.0.0.1 }}]
shards:
  - name: s0
    members: [{{ port: {}, host: 127.0.0.1 }}, {{ port: {}, host: 127.0.0.1 }}, {{ port: {}, host: 127.0.0.1 }}]
",
        ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
    );
    let out = render(dir.path(), &spec, "systemd");
    let host = out.join("127.0.0.1");
    let units = host.join("etc/systemd/system");
    let secrets = host.join("etc/shoal/secrets");
    let read = |name: &str| std::fs::read_to_string(units.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let target = read("shoal.target");
    assert!(target.contains("shoal-c1.service") && target.contains("shoal-register.service"), "{target}");
    let start = |name: &str, role: &str, args: Vec<String>| ProcessSpec {
        name: name.to_owned(),
        role: role.to_owned(),
        args,
        log_path: dir.path().join(format!("{name}.log")),
    };

    // Config servers as a StatefulSet runs them: one command line, each finds its id by address.
    let mut running = Vec::new();
    for name in ["c2", "c3", "c1"] {
        let unit = read(&format!("shoal-{name}.service"));
        assert!(unit.contains("\nRestart=on-failure\n"), "{unit}");
        let mut args = relocated(exec_start(&unit), dir.path(), &secrets);
        let at = args.iter().position(|a| a == "--id").expect("--id");
        args.drain(at..at + 2);
        args.extend(["--advertise".to_owned(), flag(&args, "--listen")]);
        if !args.iter().any(|a| a == "--init") {
            args.push("--init".to_owned());
        }
        running.push(Process::start(start(name, "configsvr", args)).await.expect("config server starts"));
    }
    for name in ["s0-1", "s0-2", "s0-3"] {
        let args = relocated(exec_start(&read(&format!("shoal-{name}.service"))), dir.path(), &secrets);
        running.push(Process::start(start(name, "shard", args)).await.expect("member starts"));
    }
    let router_args = relocated(exec_start(&read("shoal-r0.service")), dir.path(), &secrets);
    let router = flag(&router_args, "--listen");
    running.push(Process::start(start("r0", "router", router_args)).await.expect("router starts"));

    let register_unit = read("shoal-register.service");
    assert!(register_unit.contains("\nType=oneshot\n"), "{register_unit}");
    let register = relocated(exec_start(&register_unit), dir.path(), &secrets);
    let register: Vec<&str> = register.iter().map(String::as_str).collect();
    let registered = shoal(&register, dir.path()).await;
    assert!(registered.status.success(), "registration failed: {}", String::from_utf8_lossy(&registered.stderr));

    let key = secrets.join("cluster.key").display().to_string();
    let config = format!("127.0.0.1:{}", ports[0]);
    let member = format!("127.0.0.1:{}", ports[4]);
    probe_until(&["--role", "configsvr", "--addr", &config, "--ready", "--keyFile", &key]).await;
    probe_until(&["--role", "shard", "--addr", &member, "--ready", "--keyFile", &key]).await;
    probe_until(&["--role", "router", "--addr", &router, "--ready"]).await;
    // Without the cluster key a member refuses the probe; nothing listening is not alive.
    assert!(!probe(&["--role", "shard", "--addr", &member]).await);
    let nobody = format!("127.0.0.1:{}", free_ports(1).unwrap()[0]);
    assert!(!probe(&["--role", "configsvr", "--addr", &nobody, "--timeout-ms", "500"]).await);

    // keyFile between processes means clients authenticate too (MongoDB's rule): the first user
    // comes through the localhost exception.
    let anonymous = mongodb::Client::with_uri_str(format!("mongodb://{router}/")).await.unwrap();
    let create = doc! { "createUser": "ops", "pwd": "rendered-pass", "roles": ["root"] };
    anonymous.database("admin").run_command(create).await.expect("first user through the localhost exception");
    let client =
        mongodb::Client::with_uri_str(format!("mongodb://ops:rendered-pass@{router}/?w=majority")).await.unwrap();
    let shards = client.database("admin").run_command(doc! { "listShards": 1 }).await.unwrap();
    let listed = shards.get_array("shards").unwrap();
    assert_eq!(listed.len(), 1, "{shards}");
    let coll = client.database("app").collection::<bson::Document>("orders");
    coll.insert_one(doc! { "_id": 1, "item": "anchor" }).await.expect("w:majority insert through the rendered cluster");
    let found = coll.find_one(doc! { "_id": 1 }).await.unwrap().expect("read back");
    assert_eq!(found.get_str("item").unwrap(), "anchor");
    // Registering again (every restart of the unit does) changes nothing.
    let again = shoal(&register, dir.path()).await;
    assert!(again.status.success(), "re-registration failed: {}", String::from_utf8_lossy(&again.stderr));
    drop(running);
}
