//! Trace export from outside: a `shoal up` cluster whose spec names an OTLP endpoint
//! (`tracing.otlp_endpoint`) sends its spans to an OpenTelemetry collector — here a gRPC
//! `TraceService` receiver on loopback built from OpenTelemetry's own protocol definitions. The
//! router's and the shard's spans arrive under their service names with the request id, and a
//! shard's span of a command is a child of the router's span for it: one trace across processes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Document, doc};
use mongodb::Client;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use shoal_tests::up::{LocalUp, stop};

/// Bound on the spans of the commands arriving (the exporter batches every few seconds).
const EXPORTED_TIMEOUT: Duration = Duration::from_secs(60);

/// One received span: its service, name, ids and string attributes.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: Vec<(String, String)>,
}

#[derive(Default, Clone)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref()))
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    service: service.clone(),
                    name: span.name,
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    parent_span_id: span.parent_span_id,
                    attributes: span.attributes.iter().map(|a| (a.key.clone(), text(a.value.as_ref()))).collect(),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_spans_reach_the_collector_as_one_trace_across_router_and_shard() {
    let collector = Collector::default();
    let port = shoal_tests::ports::free_ports(1).expect("port")[0];
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (stop_collector, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_shutdown(addr, async {
                let _ = stopped.await;
            }),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!("tracing:\n  otlp_endpoint: http://127.0.0.1:{port}\n");
    let cluster = LocalUp::with_settings(dir.path(), &extra).expect("spec");
    let launcher = cluster.start(1).await.expect("shoal up starts");
    let client = Client::with_uri_str(cluster.uri("")).await.expect("client");
    let people = client.database("traced").collection::<Document>("people");
    people.insert_many((0..5).map(|i| doc! { "_id": i })).await.expect("insert");
    let found = people.find_one(doc! { "_id": 3 }).comment("traced-find").await.expect("find");
    assert_eq!(found, Some(doc! { "_id": 3 }));

    // The router's span of a command sent to the shard, and the shard's span under it.
    let deadline = tokio::time::Instant::now() + EXPORTED_TIMEOUT;
    let (router, shard) = loop {
        let spans = collector.spans.lock().unwrap().clone();
        let linked =
            spans.iter().filter(|s| s.service == "shoal-shard" && s.name == "shard_command").find_map(|child| {
                let parent = spans.iter().find(|p| {
                    p.service == "shoal-router" && p.span_id == child.parent_span_id && p.trace_id == child.trace_id
                })?;
                Some((parent.clone(), child.clone()))
            });
        if let Some(pair) = linked {
            break pair;
        }
        let services: Vec<(&str, &str)> = spans.iter().map(|s| (s.service.as_str(), s.name.as_str())).collect();
        assert!(tokio::time::Instant::now() < deadline, "no shard span under a router span: {services:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(router.name, "command", "{router:?}");
    let attribute = |s: &Received, key: &str| s.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    assert!(attribute(&router, "name").is_some_and(|n| n == "insert" || n == "find"), "{router:?}");
    // Both name the request, so logs of either side find the other.
    assert!(attribute(&shard, "request_id").is_some_and(|id| !id.is_empty()), "{shard:?}");
    assert_eq!(attribute(&router, "request_id"), attribute(&shard, "request_id"), "{router:?} {shard:?}");
    // The router's spans of a command sit under the span of the wire request it came in.
    let spans = collector.spans.lock().unwrap().clone();
    let roots: Vec<&Received> =
        spans.iter().filter(|s| s.trace_id == router.trace_id && s.parent_span_id.is_empty()).collect();
    assert_eq!(roots.len(), 1, "one root per trace: {roots:?}");
    assert_eq!((roots[0].service.as_str(), roots[0].name.as_str()), ("shoal-router", "request"), "{roots:?}");

    drop(client);
    stop(&launcher).await.expect("shoal up stops on SIGINT");
    let _ = stop_collector.send(());
    server.await.expect("collector task").expect("collector serves");
}
