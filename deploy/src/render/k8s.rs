//! Kubernetes manifests: a StatefulSet with a headless Service for the config servers and for each
//! shard's replica group (stable pod DNS names are the addresses the catalog lists), a Deployment
//! and Service for the routers, a PodDisruptionBudget per group (never more than a minority of it
//! down), the cluster's secrets as a Secret, and a Job that registers the shards.
//!
//! Built from `k8s-openapi`'s typed structs, so every object is well-formed for the API version
//! the crate is built for (1.30); `cluster.yaml` holds everything but the Secret, which goes to
//! `secret.yaml` (readable by its owner only).
//!
//! Every process serves Prometheus metrics on its `--metrics-port`: the container names that port
//! `metrics`, the Services list it beside the process's own, and the pod carries the
//! `prometheus.io/scrape`, `prometheus.io/port` and `prometheus.io/path` annotations a Prometheus
//! discovering pods reads (docs/operations.md).
//!
//! Pods of one StatefulSet share one command line: each finds its own address through
//! `$(POD_NAME)` (Kubernetes expands it from the downward API), and a config server its Raft id
//! from that address in `--peers` (`shoal configsvr --advertise`). The key file is copied from the
//! Secret's volume into a memory volume by an init container, because a Secret volume with an
//! `fsGroup` is group-readable and a key file must be readable by its owner only (as MongoDB's).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, Secret, SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::{
    Mounts, Output, SecretFiles, args_of, cluster_auth_args, dns_label, plan_mounted, port_of, probe_args, readdressed,
    register_args, set_flag,
};
use crate::cli::RenderArgs;
use crate::plan::{ClusterPlan, ProcessPlan, Role};
use crate::spec::ClusterSpec;

/// The container image's user (deploy/Dockerfile); data volumes are made writable for its group.
const UID: i64 = 10001;
/// Where data volumes are mounted; each process keeps its data in `<DATA>/db`.
const DATA: &str = "/data";
const SECRET_VOLUME: &str = "/etc/shoal/secret";
const KEYS: &str = "/run/shoal/secrets";
/// Where every process serves its metrics (`shoal_telemetry::http`).
const METRICS_PATH: &str = "/metrics";

/// What each role's container asks of the scheduler.
fn requests(role: Role) -> (&'static str, &'static str) {
    match role {
        Role::ConfigServer => ("250m", "512Mi"),
        Role::Shard => ("1", "2Gi"),
        Role::Router => ("500m", "512Mi"),
    }
}

/// Names and addresses of the objects one cluster renders to.
struct Names {
    cluster: String,
    namespace: String,
}

impl Names {
    fn config(&self) -> String {
        format!("{}-config", self.cluster)
    }

    fn shard(&self, shard: &str) -> String {
        format!("{}-{}", self.cluster, dns_label(shard))
    }

    fn router(&self) -> String {
        format!("{}-router", self.cluster)
    }

    fn secret(&self) -> String {
        format!("{}-secrets", self.cluster)
    }

    /// The DNS name a StatefulSet's pod has through its headless Service.
    fn pod(&self, set: &str, ordinal: &str) -> String {
        format!("{set}-{ordinal}.{set}.{}.svc.cluster.local", self.namespace)
    }

    /// The same for the pod that expands it (`$(POD_NAME)` is `<set>-<ordinal>`).
    fn this_pod(&self, set: &str) -> String {
        format!("$(POD_NAME).{set}.{}.svc.cluster.local", self.namespace)
    }
}

pub fn render(spec: &ClusterSpec, args: &RenderArgs, secrets: &SecretFiles) -> anyhow::Result<Vec<Output>> {
    let names = Names { cluster: dns_label(&spec.name), namespace: args.namespace.clone() };
    // Every pod of a group listens on the group's first port; the catalog lists the pods' names.
    let first_config_port = spec.config_servers.first().map_or(0, |c| c.port);
    let placed = readdressed(
        spec,
        |role, name, index| match role {
            Role::ConfigServer => names.pod(&names.config(), &index.to_string()),
            Role::Shard => names.pod(&names.shard(name), &index.to_string()),
            // Not dialed by anyone (clients use the Service); distinct so ports may repeat.
            Role::Router => format!("{}-{index}", names.router()),
        },
        |role, name, _, port| match role {
            Role::ConfigServer => first_config_port,
            Role::Shard => {
                spec.shards.iter().find(|s| s.name == name).and_then(|s| s.members.first()).map_or(port, |m| m.port)
            }
            Role::Router => spec.routers.first().map_or(port, |r| r.port),
        },
    );
    let mounts = Mounts { data: DATA.into(), secrets: KEYS.into() };
    let plan = plan_mounted(&placed, &mounts, args.insecure)?;
    let render = Renderer { names: &names, args, spec: &placed, plan: &plan, secured: !secrets.files.is_empty() };

    let mut objects: Vec<String> = Vec::new();
    if let Some(first) = plan.of_role(Role::ConfigServer).next() {
        let set = names.config();
        let count = plan.of_role(Role::ConfigServer).count();
        let mut command = args_of(first);
        let id_at = command.iter().position(|a| a == "--id");
        if let Some(at) = id_at {
            command.drain(at..at + 2);
        }
        let port = port_of(first);
        command.extend(["--advertise".to_owned(), format!("{}:{port}", names.this_pod(&set))]);
        if !command.iter().any(|a| a == "--init") {
            command.push("--init".to_owned());
        }
        objects.extend(render.group(&set, "config", None, first, command, count)?);
    }
    for shard in &spec.shards {
        let set = names.shard(&shard.name);
        let members: Vec<&ProcessPlan> =
            plan.of_role(Role::Shard).filter(|p| super::flag_value(p, "--name") == Some(shard.name.as_str())).collect();
        let Some(first) = members.first() else { continue };
        let mut command = args_of(first);
        set_flag(&mut command, "--advertise", &format!("{}:{}", names.this_pod(&set), port_of(first)));
        objects.extend(render.group(&set, "shard", Some(&shard.name), first, command, members.len())?);
    }
    if let Some(first) = plan.of_role(Role::Router).next() {
        objects.extend(render.routers(first, plan.of_role(Role::Router).count())?);
    }
    if !plan.shards.is_empty() {
        objects.push(render.register_job()?);
    }
    let mut outputs = vec![Output::text("cluster.yaml", objects.join("---\n"))];
    if render.secured {
        outputs.push(Output {
            path: "secret.yaml".into(),
            contents: yaml(&secret(&names, secrets))?.into_bytes(),
            secret: true,
        });
    }
    Ok(outputs)
}

fn yaml<T: Serialize>(object: &T) -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(object)?)
}

fn secret(names: &Names, secrets: &SecretFiles) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(names.secret()),
            namespace: Some(names.namespace.clone()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(secrets.files.iter().map(|(name, bytes)| ((*name).to_owned(), ByteString(bytes.clone()))).collect()),
        ..Default::default()
    }
}

struct Renderer<'a> {
    names: &'a Names,
    args: &'a RenderArgs,
    spec: &'a ClusterSpec,
    plan: &'a ClusterPlan,
    /// The cluster has secrets to mount (a key file or TLS files).
    secured: bool,
}

impl Renderer<'_> {
    fn labels(&self, component: &str, shard: Option<&str>) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), "shoal".to_owned()),
            ("app.kubernetes.io/instance".to_owned(), self.names.cluster.clone()),
            ("app.kubernetes.io/component".to_owned(), component.to_owned()),
        ]);
        if let Some(shard) = shard {
            labels.insert("shoal.io/shard".to_owned(), dns_label(shard));
        }
        labels
    }

    fn meta(&self, name: &str, labels: &BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(self.names.namespace.clone()),
            labels: Some(labels.clone()),
            ..Default::default()
        }
    }

    /// A pod template's metadata: its labels, and the annotations that have a Prometheus
    /// discovering pods scrape its metrics port.
    fn pod_meta(&self, labels: &BTreeMap<String, String>, metrics_port: Option<u16>) -> ObjectMeta {
        let annotations = metrics_port.map(|port| {
            BTreeMap::from([
                ("prometheus.io/scrape".to_owned(), "true".to_owned()),
                ("prometheus.io/port".to_owned(), port.to_string()),
                ("prometheus.io/path".to_owned(), METRICS_PATH.to_owned()),
            ])
        });
        ObjectMeta { labels: Some(labels.clone()), annotations, ..Default::default() }
    }

    /// The init container copying the key file out of the Secret's group-readable volume.
    fn init_containers(&self) -> Option<Vec<Container>> {
        self.secured.then(|| {
            vec![Container {
                name: "keys".into(),
                image: Some(self.args.image.clone()),
                command: Some(vec!["sh".into(), "-c".into(), format!("install -m 0400 {SECRET_VOLUME}/* {KEYS}/")]),
                volume_mounts: Some(vec![mount("secret", SECRET_VOLUME, true), mount("keys", KEYS, false)]),
                ..Default::default()
            }]
        })
    }

    fn volumes(&self, data: Option<Volume>) -> Option<Vec<Volume>> {
        let mut volumes: Vec<Volume> = data.into_iter().collect();
        if self.secured {
            volumes.push(Volume {
                name: "secret".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(self.names.secret()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..Default::default()
            });
            volumes.push(Volume {
                name: "keys".into(),
                empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".into()), ..Default::default() }),
                ..Default::default()
            });
        }
        (!volumes.is_empty()).then_some(volumes)
    }

    fn container(&self, process: &ProcessPlan, command: Vec<String>, role: Role) -> Container {
        let (cpu, memory) = requests(role);
        let mut ports = vec![ContainerPort {
            container_port: i32::from(port_of(process)),
            name: Some("shoal".into()),
            ..Default::default()
        }];
        if let Some(metrics) = metrics_port(&command) {
            ports.push(ContainerPort {
                container_port: i32::from(metrics),
                name: Some("metrics".into()),
                ..Default::default()
            });
        }
        let mut mounts = vec![mount("data", DATA, false)];
        if self.secured {
            mounts.push(mount("keys", KEYS, true));
        }
        let exec = |ready: bool| {
            let mut probe = vec!["shoal".to_owned()];
            probe.extend(probe_args(process, self.spec, ready));
            Some(ExecAction { command: Some(probe) })
        };
        Container {
            name: role.as_str().into(),
            image: Some(self.args.image.clone()),
            command: Some(vec!["shoal".into()]),
            args: Some(command),
            env: Some(vec![EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ports: Some(ports),
            volume_mounts: Some(mounts),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("memory".to_owned(), Quantity(memory.into())),
                ])),
                ..Default::default()
            }),
            liveness_probe: Some(Probe {
                exec: exec(false),
                initial_delay_seconds: Some(10),
                period_seconds: Some(10),
                timeout_seconds: Some(5),
                failure_threshold: Some(6),
                ..Default::default()
            }),
            readiness_probe: Some(Probe {
                exec: exec(true),
                period_seconds: Some(5),
                timeout_seconds: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod_security(&self) -> Option<PodSecurityContext> {
        Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(UID),
            fs_group: Some(UID),
            ..Default::default()
        })
    }

    /// A replica group: headless Service, StatefulSet and PodDisruptionBudget.
    fn group(
        &self,
        set: &str,
        component: &str,
        shard: Option<&str>,
        first: &ProcessPlan,
        mut command: Vec<String>,
        replicas: usize,
    ) -> anyhow::Result<Vec<String>> {
        let labels = self.labels(component, shard);
        set_flag(&mut command, "--data-dir", &format!("{DATA}/db"));
        let port = port_of(first);
        let metrics = metrics_port(&command);
        let mut ports = vec![ServicePort { name: Some("shoal".into()), port: i32::from(port), ..Default::default() }];
        ports.extend(metrics.map(metrics_service_port));
        let service = Service {
            metadata: self.meta(set, &labels),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                // Members find each other before any is ready (readiness needs a primary/leader).
                publish_not_ready_addresses: Some(true),
                selector: Some(labels.clone()),
                ports: Some(ports),
                ..Default::default()
            }),
            ..Default::default()
        };
        let claim = PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some("data".into()), ..Default::default() },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(self.args.storage.clone()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let role = first.role;
        let stateful_set = StatefulSet {
            metadata: self.meta(set, &labels),
            spec: Some(StatefulSetSpec {
                service_name: Some(set.to_owned()),
                replicas: Some(i32::try_from(replicas)?),
                // A group needs a majority up to serve: start every member at once.
                pod_management_policy: Some("Parallel".into()),
                selector: LabelSelector { match_labels: Some(labels.clone()), ..Default::default() },
                template: PodTemplateSpec {
                    metadata: Some(self.pod_meta(&labels, metrics)),
                    spec: Some(PodSpec {
                        security_context: self.pod_security(),
                        init_containers: self.init_containers(),
                        containers: vec![self.container(first, command, role)],
                        volumes: self.volumes(None),
                        termination_grace_period_seconds: Some(30),
                        ..Default::default()
                    }),
                },
                volume_claim_templates: Some(vec![claim]),
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(vec![
            yaml(&service)?,
            yaml(&stateful_set)?,
            yaml(&self.disruption_budget(set, &labels, (replicas - 1) / 2))?,
        ])
    }

    fn disruption_budget(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        max_unavailable: usize,
    ) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: self.meta(name, labels),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(i32::try_from(max_unavailable).unwrap_or(0))),
                selector: Some(LabelSelector { match_labels: Some(labels.clone()), ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The routers: a Deployment (they keep no state) behind one Service.
    fn routers(&self, first: &ProcessPlan, replicas: usize) -> anyhow::Result<Vec<String>> {
        let labels = self.labels("router", None);
        let name = self.names.router();
        let port = i32::from(port_of(first));
        let command = args_of(first);
        let metrics = metrics_port(&command);
        let mut ports = vec![ServicePort { name: Some("mongodb".into()), port, ..Default::default() }];
        ports.extend(metrics.map(metrics_service_port));
        let service = Service {
            metadata: self.meta(&name, &labels),
            spec: Some(ServiceSpec { selector: Some(labels.clone()), ports: Some(ports), ..Default::default() }),
            ..Default::default()
        };
        let scratch =
            Volume { name: "data".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() };
        let deployment = Deployment {
            metadata: self.meta(&name, &labels),
            spec: Some(DeploymentSpec {
                replicas: Some(i32::try_from(replicas)?),
                selector: LabelSelector { match_labels: Some(labels.clone()), ..Default::default() },
                template: PodTemplateSpec {
                    metadata: Some(self.pod_meta(&labels, metrics)),
                    spec: Some(PodSpec {
                        security_context: self.pod_security(),
                        init_containers: self.init_containers(),
                        containers: vec![self.container(first, command, Role::Router)],
                        volumes: self.volumes(Some(scratch)),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut out = vec![yaml(&service)?, yaml(&deployment)?];
        if replicas > 1 {
            out.push(yaml(&self.disruption_budget(&name, &labels, replicas / 2))?);
        }
        Ok(out)
    }

    /// The Job registering every shard once the config servers have a leader (idempotent).
    fn register_job(&self) -> anyhow::Result<String> {
        let labels = self.labels("register", None);
        let auth = self.plan.of_role(Role::Shard).next().map(|p| cluster_auth_args(&args_of(p))).unwrap_or_default();
        let mounts = self.secured.then(|| vec![mount("keys", KEYS, true)]);
        let job = Job {
            metadata: self.meta(&format!("{}-register", self.names.cluster), &labels),
            spec: Some(JobSpec {
                backoff_limit: Some(20),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels.clone()), ..Default::default() }),
                    spec: Some(PodSpec {
                        restart_policy: Some("OnFailure".into()),
                        security_context: self.pod_security(),
                        init_containers: self.init_containers(),
                        containers: vec![Container {
                            name: "register".into(),
                            image: Some(self.args.image.clone()),
                            command: Some(vec!["shoal".into()]),
                            args: Some(register_args(self.plan, &auth)),
                            volume_mounts: mounts,
                            ..Default::default()
                        }],
                        volumes: self.volumes(None),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        yaml(&job)
    }
}

/// The `--metrics-port` of a command line (the plan passes it to every process).
fn metrics_port(command: &[String]) -> Option<u16> {
    command.windows(2).find(|w| w[0] == "--metrics-port").and_then(|w| w[1].parse().ok())
}

fn metrics_service_port(port: u16) -> ServicePort {
    ServicePort { name: Some("metrics".into()), port: i32::from(port), ..Default::default() }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount { name: name.into(), mount_path: path.into(), read_only: Some(read_only), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SECURED, args, spec};
    use super::*;
    use crate::cli::RenderFormat;
    use serde::Deserialize;

    fn documents(text: &str) -> Vec<serde_yaml::Value> {
        serde_yaml::Deserializer::from_str(text)
            .map(|doc| serde_yaml::Value::deserialize(doc).expect("each document is YAML"))
            .collect()
    }

    fn kind_of(doc: &serde_yaml::Value) -> (String, String) {
        let field = |f: &str| doc.get(f).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let name = doc.get("metadata").and_then(|m| m.get("name")).and_then(|v| v.as_str()).unwrap_or_default();
        (field("kind"), name.to_owned())
    }

    #[test]
    fn every_object_parses_back_as_its_kubernetes_type() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets = super::super::secret_files(&spec(SECURED)).expect("secrets");
        let outputs = render(&spec(SECURED), &args(dir.path(), RenderFormat::K8s), &secrets).expect("renders");
        let cluster = String::from_utf8(outputs[0].contents.clone()).expect("text");
        let docs = documents(&cluster);
        let kinds: Vec<(String, String)> = docs.iter().map(kind_of).collect();
        let expected = [
            ("Service", "prod-config"),
            ("StatefulSet", "prod-config"),
            ("PodDisruptionBudget", "prod-config"),
            ("Service", "prod-s0"),
            ("StatefulSet", "prod-s0"),
            ("PodDisruptionBudget", "prod-s0"),
            ("Service", "prod-s1"),
            ("StatefulSet", "prod-s1"),
            ("PodDisruptionBudget", "prod-s1"),
            ("Service", "prod-router"),
            ("Deployment", "prod-router"),
            ("PodDisruptionBudget", "prod-router"),
            ("Job", "prod-register"),
        ];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(k, n)| ((*k).to_owned(), (*n).to_owned())).collect();
        assert_eq!(kinds, expected);
        for doc in &docs {
            let (kind, _) = kind_of(doc);
            let parsed = match kind.as_str() {
                "Service" => serde_yaml::from_value::<Service>(doc.clone()).map(drop),
                "StatefulSet" => serde_yaml::from_value::<StatefulSet>(doc.clone()).map(drop),
                "PodDisruptionBudget" => serde_yaml::from_value::<PodDisruptionBudget>(doc.clone()).map(drop),
                "Deployment" => serde_yaml::from_value::<Deployment>(doc.clone()).map(drop),
                "Job" => serde_yaml::from_value::<Job>(doc.clone()).map(drop),
                other => panic!("unexpected kind {other}"),
            };
            parsed.unwrap_or_else(|e| panic!("{kind} does not parse back: {e}"));
        }
        assert!(outputs[1].secret);
        let secret: Secret = serde_yaml::from_slice(&outputs[1].contents).expect("secret parses");
        assert!(secret.data.expect("data").contains_key("cluster.key"));
    }

    #[test]
    fn every_pod_serves_its_metrics_port_named_annotated_and_in_its_service() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets = super::super::secret_files(&spec(SECURED)).expect("secrets");
        let outputs = render(&spec(SECURED), &args(dir.path(), RenderFormat::K8s), &secrets).expect("renders");
        let cluster = String::from_utf8(outputs[0].contents.clone()).expect("text");
        let docs = documents(&cluster);
        let mut services = BTreeMap::new();
        let mut templates = Vec::new();
        for doc in &docs {
            let (kind, name) = kind_of(doc);
            match kind.as_str() {
                "Service" => {
                    let service: Service = serde_yaml::from_value(doc.clone()).expect("service");
                    services.insert(name, service.spec.expect("spec").ports.expect("ports"));
                }
                "StatefulSet" => {
                    let set: StatefulSet = serde_yaml::from_value(doc.clone()).expect("set");
                    templates.push((name, set.spec.expect("spec").template));
                }
                "Deployment" => {
                    let deployment: Deployment = serde_yaml::from_value(doc.clone()).expect("deployment");
                    templates.push((name, deployment.spec.expect("spec").template));
                }
                _ => {}
            }
        }
        let expected = [("prod-config", 28019), ("prod-s0", 28018), ("prod-s1", 28028), ("prod-router", 28017)];
        assert_eq!(templates.len(), expected.len());
        for ((name, template), (want_name, port)) in templates.iter().zip(expected) {
            assert_eq!(name, want_name);
            let annotations = template.metadata.as_ref().and_then(|m| m.annotations.clone()).expect("annotations");
            assert_eq!(annotations.get("prometheus.io/scrape").map(String::as_str), Some("true"), "{name}");
            assert_eq!(annotations.get("prometheus.io/port"), Some(&port.to_string()), "{name}");
            assert_eq!(annotations.get("prometheus.io/path").map(String::as_str), Some("/metrics"), "{name}");
            let container = &template.spec.as_ref().expect("pod").containers[0];
            let command = container.args.clone().expect("args");
            assert!(command.windows(2).any(|w| w == ["--metrics-port", &port.to_string()]), "{name}: {command:?}");
            let ports = container.ports.clone().expect("ports");
            let metrics = ports.iter().find(|p| p.name.as_deref() == Some("metrics")).expect("a metrics port");
            assert_eq!(metrics.container_port, port, "{name}");
            let service = &services[name];
            let named = service.iter().find(|p| p.name.as_deref() == Some("metrics")).expect("service port");
            assert_eq!(named.port, port, "{name}");
        }
    }

    #[test]
    fn pods_find_their_address_and_id_from_their_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets = super::super::secret_files(&spec(SECURED)).expect("secrets");
        let outputs = render(&spec(SECURED), &args(dir.path(), RenderFormat::K8s), &secrets).expect("renders");
        let cluster = String::from_utf8(outputs[0].contents.clone()).expect("text");
        let docs = documents(&cluster);
        let config: StatefulSet = serde_yaml::from_value(docs[1].clone()).expect("config set");
        let spec_ = config.spec.expect("spec");
        assert_eq!(spec_.replicas, Some(3));
        let pod = spec_.template.spec.expect("pod");
        let container = &pod.containers[0];
        let command = container.args.clone().expect("args");
        let peers = "1=prod-config-0.prod-config.db.svc.cluster.local:27019,2=prod-config-1.prod-config.db.svc.cluster.local:27019,3=prod-config-2.prod-config.db.svc.cluster.local:27019";
        assert!(command.windows(2).any(|w| w[0] == "--peers" && w[1] == peers), "{command:?}");
        assert!(
            command
                .windows(2)
                .any(|w| w[0] == "--advertise" && w[1] == "$(POD_NAME).prod-config.db.svc.cluster.local:27019"),
            "{command:?}"
        );
        assert!(!command.iter().any(|a| a == "--id"), "{command:?}");
        assert!(command.iter().any(|a| a == "--init"));
        assert!(command.windows(2).any(|w| w[0] == "--keyFile" && w[1] == "/run/shoal/secrets/cluster.key"));
        assert!(command.windows(2).any(|w| w[0] == "--data-dir" && w[1] == "/data/db"));
        assert!(command.windows(2).any(|w| w[0] == "--listen" && w[1] == "0.0.0.0:27019"));
        assert_eq!(pod.init_containers.expect("init").len(), 1);

        let s1: StatefulSet = serde_yaml::from_value(docs[7].clone()).expect("s1 set");
        let command = s1.spec.expect("spec").template.spec.expect("pod").containers[0].args.clone().expect("args");
        assert!(
            command
                .windows(2)
                .any(|w| w[0] == "--advertise" && w[1] == "$(POD_NAME).prod-s1.db.svc.cluster.local:27028"),
            "{command:?}"
        );
        let budget: PodDisruptionBudget = serde_yaml::from_value(docs[8].clone()).expect("budget");
        assert_eq!(budget.spec.expect("spec").max_unavailable, Some(IntOrString::Int(1)));

        let job: Job = serde_yaml::from_value(docs[12].clone()).expect("job");
        let register = job.spec.expect("spec").template.spec.expect("pod").containers[0].args.clone().expect("args");
        assert!(register.iter().any(|a| a == "s0=prod-s0-0.prod-s0.db.svc.cluster.local:27018,prod-s0-1.prod-s0.db.svc.cluster.local:27018,prod-s0-2.prod-s0.db.svc.cluster.local:27018"), "{register:?}");
    }
}
