//! Prometheus: the scrape configuration of a spec's cluster (`prometheus.yml`), one job per role
//! (`shoal-configsvr`, `shoal-shard`, `shoal-router`: the names deploy/grafana's dashboard uses),
//! each process a target at its host and metrics port, labelled with the cluster, the process and
//! (shard members) the shard. Addresses are the spec's own hosts, as `shoal up` runs them.
//!
//! Must not: contact anything; the operator merges the jobs into their Prometheus's configuration
//! or runs Prometheus with the file as it is.

use serde::Serialize;

use super::Output;
use crate::spec::{ClusterSpec, ProcessRole};

/// How often Prometheus scrapes each process.
const SCRAPE_INTERVAL: &str = "15s";

#[derive(Serialize)]
struct Config {
    global: Global,
    scrape_configs: Vec<ScrapeConfig>,
}

#[derive(Serialize)]
struct Global {
    scrape_interval: &'static str,
}

#[derive(Serialize)]
struct ScrapeConfig {
    job_name: &'static str,
    metrics_path: &'static str,
    static_configs: Vec<StaticConfig>,
}

#[derive(Serialize)]
struct StaticConfig {
    targets: Vec<String>,
    labels: std::collections::BTreeMap<&'static str, String>,
}

pub fn render(spec: &ClusterSpec) -> anyhow::Result<Vec<Output>> {
    Ok(vec![Output::text("prometheus.yml", config_text(spec)?)])
}

/// The configuration's text (YAML).
pub fn config_text(spec: &ClusterSpec) -> anyhow::Result<String> {
    let listeners = spec.listeners();
    let jobs = [ProcessRole::ConfigServer, ProcessRole::Shard, ProcessRole::Router];
    let scrape_configs = jobs
        .into_iter()
        .filter_map(|role| {
            let static_configs: Vec<StaticConfig> = listeners
                .iter()
                .filter(|l| l.role == role)
                .map(|l| {
                    let mut labels = std::collections::BTreeMap::new();
                    labels.insert("cluster", spec.name.clone());
                    labels.insert("process", l.name.clone());
                    if let Some(shard) = &l.shard {
                        labels.insert("shard", shard.clone());
                    }
                    StaticConfig { targets: vec![l.metrics.advertise.clone()], labels }
                })
                .collect();
            (!static_configs.is_empty()).then_some(ScrapeConfig {
                job_name: role.job(),
                metrics_path: "/metrics",
                static_configs,
            })
        })
        .collect();
    let config = Config { global: Global { scrape_interval: SCRAPE_INTERVAL }, scrape_configs };
    let yaml = serde_yaml::to_string(&config)?;
    Ok(format!(
        "# Prometheus scrape configuration of the Shoal cluster {:?} (`shoal deploy render --format prometheus`).\n{yaml}",
        spec.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_process_is_a_target_at_its_metrics_port_in_its_roles_job() {
        let (spec, _) = ClusterSpec::load(None).unwrap();
        spec.validate(false).unwrap();
        let text = config_text(&spec).unwrap();
        let parsed: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let jobs = parsed["scrape_configs"].as_sequence().unwrap();
        let job = |name: &str| jobs.iter().find(|j| j["job_name"] == name).unwrap_or_else(|| panic!("{name}: {text}"));
        let targets = |name: &str| -> Vec<String> {
            job(name)["static_configs"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|c| c["targets"][0].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(targets("shoal-router"), ["127.0.0.1:28017"]);
        assert_eq!(targets("shoal-configsvr"), ["127.0.0.1:28019", "127.0.0.1:28020", "127.0.0.1:28021"]);
        assert_eq!(targets("shoal-shard").len(), 6);
        let member = &job("shoal-shard")["static_configs"][0];
        assert_eq!(member["labels"]["shard"], "shard0");
        assert_eq!(member["labels"]["process"], "shard0-1");
        assert_eq!(member["labels"]["cluster"], "local");
    }

    #[test]
    fn a_named_metrics_port_is_used() {
        let yaml = "name: t\nrouters: [{ name: r, port: 27017, metrics_port: 9216 }]\nshards: [{ name: s, members: [{ port: 27101 }] }]\n";
        let spec = ClusterSpec::parse(yaml, "t").unwrap();
        spec.validate(false).unwrap();
        assert!(config_text(&spec).unwrap().contains("127.0.0.1:9216"));
    }
}
