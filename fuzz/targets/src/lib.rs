//! Fuzz targets: each takes arbitrary bytes and drives one parser or codec of Shoal that untrusted
//! input reaches, checking the properties that must hold for every input (no panic, no hang; a
//! codec's round trip and order). They are plain functions so that the AFL++ harness
//! (`fuzz/afl`, see `fuzz/README.md`) and the test suite (every corpus file and every crash ever
//! found, `tests/regressions.rs`) run exactly the same code.
//!
//! | target | input reaches |
//! |---|---|
//! | `wire` | the router's framing and OP_MSG / OP_QUERY parsing (`shoal_router::wire`) |
//! | `bson` | BSON validation of a received document, then a full decode |
//! | `sasl` | a SCRAM conversation (`shoal_auth::scram`) with client-chosen messages |
//! | `filter` | the query language's filter parser and matcher |
//! | `update` | update operators and pipelines, applied to a document |
//! | `pipeline` | aggregation pipeline parsing and execution |
//! | `keystring` | the order-preserving key encoding: round trip and order |
//!
//! Must not: catch panics (a panic is the finding), or do I/O.

use bson::{Bson, Document};

/// One fuzz target: arbitrary bytes in, a panic on a finding.
pub type Target = fn(&[u8]);

/// The targets by name (the AFL++ harness and the regression test iterate over it).
pub const TARGETS: &[(&str, Target)] = &[
    ("wire", wire),
    ("bson", bson),
    ("sasl", sasl),
    ("filter", filter),
    ("update", update),
    ("pipeline", pipeline),
    ("keystring", keystring),
];

/// Bytes from a client socket: framing, then request parsing, then the command it names.
pub fn wire(data: &[u8]) {
    use tokio_util::codec::Decoder;
    let mut codec = shoal_router::wire::frame::MessageCodec::default();
    let mut buf = bytes::BytesMut::from(data);
    // A stream may hold several messages; stop at the first error, as the server does.
    while let Ok(Some(frame)) = codec.decode(&mut buf) {
        if let Ok(request) = shoal_router::wire::request::parse_request(&frame) {
            let _ = request.more_to_come();
            let _ = request.into_command(frame.header.request_id);
        }
    }
}

/// A document as received: validated raw, then decoded and re-encoded.
pub fn bson(data: &[u8]) {
    let Ok(raw) = shoal_router::wire::bson_check::validate(data) else { return };
    if let Ok(doc) = Document::try_from(raw) {
        let _ = bson::RawDocumentBuf::try_from(&doc);
    }
}

/// A SCRAM conversation: the first byte splits the input into a client-first and a client-final
/// message; both go to a server holding a known credential.
pub fn sasl(data: &[u8]) {
    use shoal_auth::scram::{Mechanism, derive_with_salt, message::ClientFirst, server::ServerConversation};
    let Some((&split, rest)) = data.split_first() else { return };
    let (first, last) = rest.split_at(usize::from(split).min(rest.len()));
    let mechanism = if split % 2 == 0 { Mechanism::ScramSha256 } else { Mechanism::ScramSha1 };
    let Ok(first) = ClientFirst::parse(first) else { return };
    let credential = derive_with_salt(mechanism, b"pencil", b"saltsaltsaltsalt".to_vec(), 4096);
    let (conversation, _) = ServerConversation::start(mechanism, first, credential, "servernonce");
    // Only the right proof passes; arbitrary bytes never do.
    assert!(conversation.finish(last).is_err() || last.windows(2).any(|w| w == b"p="));
}

/// A filter document, matched against a few documents of varied shapes.
pub fn filter(data: &[u8]) {
    let Some(doc) = document(data) else { return };
    if let Ok(f) = shoal_query::filter::Filter::parse(&doc) {
        for target in samples() {
            let _ = f.matches(&target);
        }
    }
}

/// An update (operators, a replacement or a pipeline), applied to a few documents.
pub fn update(data: &[u8]) {
    let Some(doc) = document(data) else { return };
    let spec = match doc.get("u") {
        Some(Bson::Array(stages)) => shoal_query::update::UpdateSpec::parse_pipeline(stages),
        Some(Bson::Document(u)) => shoal_query::update::UpdateSpec::parse(u),
        _ => shoal_query::update::UpdateSpec::parse(&doc),
    };
    let Ok(spec) = spec else { return };
    for mut target in samples() {
        let ctx = shoal_query::update::UpdateContext { now: bson::DateTime::from_millis(0), is_upsert_insert: false };
        let _ = spec.apply(&mut target, &ctx);
    }
}

/// An aggregation pipeline (`{p: [stages]}`), run over a few documents.
pub fn pipeline(data: &[u8]) {
    let Some(doc) = document(data) else { return };
    let Some(Bson::Array(stages)) = doc.get("p") else { return };
    if let Ok(p) = shoal_query::aggregate::Pipeline::parse(stages) {
        let _ = p.run(samples().into_iter());
    }
}

/// Every value of a document: its key string decodes back to an equal value, and key strings
/// order as the values do.
pub fn keystring(data: &[u8]) {
    let Some(doc) = document(data) else { return };
    let values: Vec<&Bson> = doc.values().collect();
    let keys: Vec<Vec<u8>> = values.iter().map(|v| shoal_query::keystring::encode(v)).collect();
    for (v, k) in values.iter().zip(&keys) {
        if let Ok(back) = shoal_query::keystring::decode(k) {
            assert_eq!(
                shoal_query::order::compare_values(&back, v),
                std::cmp::Ordering::Equal,
                "key string round trip changed {v:?} into {back:?}"
            );
        }
    }
    for (i, a) in values.iter().enumerate() {
        for (j, b) in values.iter().enumerate().skip(i + 1) {
            let by_value = shoal_query::order::compare_values(a, b);
            let by_key = keys[i].cmp(&keys[j]);
            assert_eq!(by_value, by_key, "order of {a:?} and {b:?} differs from their key strings' ({i}, {j})");
        }
    }
}

fn document(data: &[u8]) -> Option<Document> {
    Document::from_reader(data).ok()
}

fn samples() -> Vec<Document> {
    vec![
        bson::doc! {},
        bson::doc! { "_id": 1, "a": 1, "b": "x", "c": [1, 2, { "d": 3 }], "e": { "f": null } },
        bson::doc! { "_id": "k", "a": [[1], [2, [3]]], "b": 2.5, "t": bson::DateTime::from_millis(0), "z": true },
    ]
}
