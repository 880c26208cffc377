//! Optional trace export over OTLP (OpenTelemetry's gRPC protocol, e.g. to an OpenTelemetry
//! Collector, Jaeger or Tempo on port 4317): the spans of a process's requests with their
//! `request_id`, and the W3C `traceparent` a router hands to shards so that the shard's span of a
//! request is a child of the router's and the two are one trace.
//!
//! Off unless an endpoint is configured (`--otlp-endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT`, or the
//! spec's `tracing.otlp_endpoint`); off, [`traceparent`] and [`adopt`] cost one atomic load.
//!
//! Must not: block the runtime (spans are batched and sent by the SDK's exporter thread, through
//! a tonic channel on the runtime), or lose the process's logs when the collector is down
//! (export errors are the SDK's to report; the fmt and ring layers never depend on this one).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Whether this process exports spans (set once by [`init`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Which spans are exported, by target: the request paths of routers and shards at debug (the
/// `request`, `command`, `admit` and `shard_command` spans), everything else from info.
const FILTER: &str = "info,shoal_router=debug,shoal_shard=debug";

/// Spans that last a connection's lifetime (the router's `conn`): exported, they would make every
/// request of a connection one trace, sent only when the client hangs up. Left out, each wire
/// request is the root of its own trace.
const LIFETIME_SPANS: [&str; 1] = ["conn"];

/// The filter of the layer [`init`] returns: [`FILTER`] without [`LIFETIME_SPANS`].
pub fn filter<S>() -> impl tracing_subscriber::layer::Filter<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use tracing_subscriber::filter::FilterExt as _;
    tracing_subscriber::EnvFilter::new(FILTER)
        .and(tracing_subscriber::filter::filter_fn(|meta| !(meta.is_span() && LIFETIME_SPANS.contains(&meta.name()))))
}

/// The W3C trace-context header a [`traceparent`] string is (version-traceid-spanid-flags).
const TRACEPARENT: &str = "traceparent";

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("OTLP endpoint {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// Flushes the spans still batched when the process stops (drop it last).
pub struct Guard {
    provider: SdkTracerProvider,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("shoal: flushing traces at shutdown: {e}");
        }
    }
}

/// The tracing layer exporting this process's spans to `endpoint` (`http://host:4317`) as
/// `service` (`shoal-router`, `shoal-shard`, `shoal-configsvr`). Call inside the tokio runtime:
/// the tonic channel it builds runs there.
pub fn init<S>(endpoint: &str, service: &str) -> Result<(impl tracing_subscriber::Layer<S>, Guard), OtlpError>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|source| OtlpError::Exporter { endpoint: endpoint.to_owned(), source })?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service.to_owned()).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("shoal");
    ENABLED.store(true, Ordering::Release);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_tracked_inactivity(false);
    Ok((layer, Guard { provider }))
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The current span's W3C `traceparent`, to send with a request to another process; empty when
/// nothing is exported (or the span is not recorded).
pub fn traceparent() -> String {
    if !enabled() {
        return String::new();
    }
    let context = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT).unwrap_or_default()
}

/// Makes `span` a child of the remote span `traceparent` names (what a request brought from a
/// router); nothing when it is empty, malformed, or nothing is exported.
pub fn adopt(span: &tracing::Span, traceparent: &str) {
    if traceparent.is_empty() || !enabled() {
        return;
    }
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    // A span the filter disabled has nothing to re-parent; that is not an error worth a line.
    let _ = span.set_parent(parent);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_it_sends_and_adopts_nothing() {
        // [`init`] is never called in this test binary.
        assert!(!enabled());
        assert_eq!(traceparent(), "");
        adopt(&tracing::Span::none(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    }
}
