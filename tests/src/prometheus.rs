//! A real Prometheus server (Debian's `prometheus` package) for tests: started on a free loopback
//! port with a scrape configuration and its own data dir, asked through its HTTP query API, killed
//! when dropped.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::http::{get, query_escape};

/// Bound on Prometheus becoming ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One series of an instant query: its labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

pub struct Prometheus {
    child: tokio::process::Child,
    port: u16,
}

impl Prometheus {
    /// Starts `prometheus` with `config` (a prometheus.yml) under `dir` and waits until ready.
    pub async fn start(config: &Path, dir: &Path) -> anyhow::Result<Self> {
        let port = crate::ports::free_ports(1)?[0];
        let log = std::fs::File::create(dir.join("prometheus.log")).context("creating prometheus.log")?;
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("cannot run prometheus (Debian's `prometheus` package; .ci/run installs it)")?;
        let server = Self { child, port };
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok((200, _)) = get(&server.url("/-/ready")).await {
                return Ok(server);
            }
            if tokio::time::Instant::now() >= deadline {
                let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
                bail!("prometheus not ready after {READY_TIMEOUT:?}:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// An instant query's vector result.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<Sample>> {
        let (status, body) = get(&self.url(&format!("/api/v1/query?query={}", query_escape(expr)))).await?;
        if status != 200 {
            bail!("query {expr}: HTTP {status}: {body}");
        }
        let reply: serde_json::Value = serde_json::from_str(&body).with_context(|| format!("query {expr}: {body}"))?;
        let result = reply["data"]["result"].as_array().with_context(|| format!("query {expr}: {body}"))?;
        result
            .iter()
            .map(|series| {
                let labels = series["metric"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
                    .unwrap_or_default();
                let value = series["value"][1].as_str().and_then(|v| v.parse().ok()).context("a sample's value")?;
                Ok(Sample { labels, value })
            })
            .collect()
    }

    /// The scrape targets' health (`/api/v1/targets`): (job, instance, health, last error).
    pub async fn targets(&self) -> anyhow::Result<Vec<(String, String, String, String)>> {
        let (_, body) = get(&self.url("/api/v1/targets")).await?;
        let reply: serde_json::Value = serde_json::from_str(&body).with_context(|| format!("targets: {body}"))?;
        let active = reply["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        Ok(active
            .iter()
            .map(|t| {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
                (s(&t["labels"]["job"]), s(&t["labels"]["instance"]), s(&t["health"]), s(&t["lastError"]))
            })
            .collect())
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
