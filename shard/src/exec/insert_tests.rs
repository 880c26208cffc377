//! Inserts from a kind-1 sequence, as drivers and routers send them: checked on their bytes,
//! stored as they came when `_id` is first, rewritten with `_id` first otherwise.

use bson::{Bson, Document, RawDocument, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;

use crate::exec::tests::node;
use crate::exec::{self, Node, Request};

fn insert_sequence(e: &Node, docs: Vec<Bytes>) -> exec::WriteOutcome {
    let r = CommandRequest {
        db: "db".into(),
        body: doc! { "insert": "c", "ordered": false }.to_vec().expect("encode").into(),
        sequence_id: "documents".into(),
        sequence: docs,
        ..Default::default()
    };
    exec::insert::run(e, &Request::parse(&r).expect("parse")).expect("insert").0
}

fn bytes(d: Document) -> Bytes {
    d.to_vec().expect("encode").into()
}

fn stored(e: &Node) -> Vec<Vec<u8>> {
    let r = CommandRequest {
        db: "db".into(),
        body: doc! {"find": "c", "sort": {"_id": 1}}.to_vec().expect("encode").into(),
        ..Default::default()
    };
    let (batch, _) = exec::find::run(e, &Request::parse(&r).expect("parse")).expect("find");
    batch.documents.iter().map(|b| b.to_vec()).collect()
}

#[test]
fn sequence_documents_are_stored_as_sent_or_with_id_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let as_sent = bytes(doc! { "_id": 1, "s": "x", "n": {"d": [1, {"e": 2}]} });
    let out = insert_sequence(&e, vec![as_sent.clone(), bytes(doc! { "a": 1, "_id": 2 }), bytes(doc! { "b": 3 })]);
    assert_eq!((out.n, out.write_errors.len()), (3, 0));
    let docs = stored(&e);
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[0], as_sent.to_vec(), "a document with _id first is stored byte for byte");
    for raw in &docs {
        let first = RawDocument::from_bytes(raw).expect("raw").iter().next().expect("a field").expect("ok");
        assert_eq!(first.0.as_str(), "_id");
    }
    let second = Document::from_reader(&mut &docs[1][..]).expect("doc");
    assert_eq!(second, doc! { "_id": 2, "a": 1 });
    assert!(
        docs.iter()
            .any(|d| matches!(Document::from_reader(&mut &d[..]).expect("doc").get("_id"), Some(Bson::ObjectId(_))))
    );
}

#[test]
fn bad_sequence_documents_get_their_codes_and_the_rest_are_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let mut malformed = doc! { "_id": 7, "s": "abc" }.to_vec().expect("encode");
    let at = malformed.windows(3).position(|w| w == b"abc").expect("abc");
    malformed[at] = 0xff;
    let out = insert_sequence(
        &e,
        vec![
            bytes(doc! { "_id": [1] }),
            bytes(doc! { "_id": { "$set": 1 } }),
            malformed.into(),
            bytes(doc! { "_id": 4 }),
            bytes(doc! { "_id": 4 }),
        ],
    );
    let codes: Vec<(i32, i32)> = out.write_errors.iter().map(|w| (w.index, w.code)).collect();
    assert_eq!(
        codes,
        vec![
            (0, ErrorCode::InvalidIdField.code()),
            (1, ErrorCode::DollarPrefixedFieldName.code()),
            (2, ErrorCode::InvalidBSON.code()),
            (4, ErrorCode::DuplicateKey.code()),
        ]
    );
    assert_eq!(out.n, 1);
    assert_eq!(stored(&e).len(), 1);
}
