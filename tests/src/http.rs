//! Plain HTTP GETs for tests that read a process's `/metrics` or a Prometheus server's query API:
//! hyper's client, every request bounded by [`GET_TIMEOUT`].

use std::time::Duration;

use anyhow::Context as _;
use http_body_util::{BodyExt, Empty};

/// Bound on one GET, connect included.
const GET_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET url`: the status code and the body as text.
pub async fn get(url: &str) -> anyhow::Result<(u16, String)> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let uri: hyper::Uri = url.parse().with_context(|| format!("bad URL {url}"))?;
    let response = tokio::time::timeout(GET_TIMEOUT, client.get(uri))
        .await
        .with_context(|| format!("GET {url} timed out"))?
        .with_context(|| format!("GET {url}"))?;
    let status = response.status().as_u16();
    let body = tokio::time::timeout(GET_TIMEOUT, response.into_body().collect())
        .await
        .with_context(|| format!("reading {url} timed out"))?
        .with_context(|| format!("reading {url}"))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `text` percent-encoded for a URL's query string (everything but ASCII letters and digits).
pub fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}
