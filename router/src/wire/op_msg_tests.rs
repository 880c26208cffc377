//! Tests of [`super`]: round trips, section rules, checksums, and malformed input (which must
//! come back as errors, never as panics).

use bson::{RawDocument, rawdoc};
use bytes::Bytes;
use rand::{Rng, SeedableRng};

use super::*;
use crate::wire::frame::MessageCodec;
use tokio_util::codec::Decoder;

fn frame(bytes: Vec<u8>) -> Frame {
    Frame::from_bytes(Bytes::from(bytes)).expect("well-framed")
}

fn parse(bytes: Vec<u8>) -> WireResult<OpMsg> {
    OpMsg::parse(&frame(bytes))
}

#[test]
fn body_only_round_trip() {
    let body = rawdoc! { "ping": 1, "$db": "admin" };
    let msg = parse(encode_request(5, 0, &body, &[])).expect("parses");
    assert_eq!(msg.body, body);
    assert!(msg.sequences.is_empty());
    assert!(!msg.more_to_come());
}

#[test]
fn reply_has_flags_zero_one_section_and_response_to() {
    let body = rawdoc! { "ok": 1.0 };
    let bytes = encode_reply(100, 5, &body);
    let f = frame(bytes.clone());
    assert_eq!((f.header.request_id, f.header.response_to, f.header.op_code), (100, 5, op_code::OP_MSG));
    assert_eq!(&bytes[16..20], &[0, 0, 0, 0], "flags 0");
    assert_eq!(bytes[20], 0, "one kind-0 section");
    assert_eq!(&bytes[21..], body.as_bytes(), "and nothing after it");
    assert_eq!(OpMsg::parse(&f).expect("parses").body, body);
}

#[test]
fn sequences_are_zero_copy_slices_of_the_frame() {
    let body = rawdoc! { "insert": "c", "$db": "d" };
    let (a, b) = (rawdoc! { "_id": 1 }, rawdoc! { "_id": 2, "x": "y" });
    let u = rawdoc! { "q": {}, "u": { "$set": { "a": 1 } } };
    let f = frame(encode_request(1, 0, &body, &[("documents", vec![&a, &b]), ("other", vec![&u])]));
    let msg = OpMsg::parse(&f).expect("parses");
    assert_eq!(msg.sequences.len(), 2);
    let docs = &msg.sequences[0].documents;
    assert_eq!((docs[0].as_ref(), docs[1].as_ref()), (a.as_bytes(), b.as_bytes()));
    let frame_range = f.bytes.as_ptr_range();
    assert!(frame_range.contains(&docs[1].as_ptr()), "shares the frame's allocation");
    assert_eq!(msg.sequences[1].identifier, "other");
}

#[test]
fn empty_sequence_is_allowed() {
    let body = rawdoc! { "insert": "c", "$db": "d" };
    let msg = parse(encode_request(1, 0, &body, &[("documents", vec![])])).expect("parses");
    assert!(msg.sequences[0].documents.is_empty());
}

#[test]
fn kind_1_folding_appends_arrays() {
    let body = rawdoc! { "insert": "c", "$db": "d" };
    let (a, b) = (rawdoc! { "_id": 1 }, rawdoc! { "_id": 2 });
    let msg = parse(encode_request(1, 0, &body, &[("documents", vec![&a, &b])])).expect("parses");
    let folded = fold_sequences(&msg.body, &msg.sequences).expect("folds");
    assert_eq!(folded, rawdoc! { "insert": "c", "$db": "d", "documents": [{ "_id": 1 }, { "_id": 2 }] });
}

#[test]
fn duplicate_identifiers_and_body_clashes_are_refused() {
    let body = rawdoc! { "insert": "c", "$db": "d" };
    let a = rawdoc! { "_id": 1 };
    let err =
        parse(encode_request(1, 0, &body, &[("documents", vec![&a]), ("documents", vec![&a])])).expect_err("duplicate");
    assert!(matches!(err, WireError::DuplicateSequence(ref id) if id == "documents"));
    assert!(!err.is_fatal());
    let body = rawdoc! { "insert": "c", "documents": [], "$db": "d" };
    let err = parse(encode_request(1, 0, &body, &[("documents", vec![&a])])).expect_err("clash");
    assert!(matches!(err, WireError::DuplicateField(_)));
}

#[test]
fn too_many_sequences_is_fatal() {
    let body = rawdoc! { "x": 1, "$db": "d" };
    let names: Vec<String> = (0..=DOC_SEQUENCES_MAX).map(|i| format!("s{i}")).collect();
    let seqs: Vec<(&str, Vec<&RawDocument>)> = names.iter().map(|n| (n.as_str(), vec![])).collect();
    let err = parse(encode_request(1, 0, &body, &seqs)).expect_err("too many");
    assert!(matches!(err, WireError::TooManyDocumentSequences(_)) && err.is_fatal());
}

#[test]
fn body_count_must_be_one() {
    let body = rawdoc! { "ping": 1, "$db": "d" };
    let mut twice = encode_request(1, 0, &body, &[]);
    twice.push(0);
    twice.extend_from_slice(body.as_bytes());
    let len = twice.len() as i32;
    twice[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(parse(twice), Err(WireError::MultipleBodies)));

    // Flags and a sequence but no body.
    let mut none = encode_request(1, 0, &body, &[("documents", vec![])]);
    none.truncate(none.len() - body.as_bytes().len() - 1);
    let len = none.len() as i32;
    none[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(parse(none), Err(WireError::MissingBody)));
}

#[test]
fn flags() {
    let body = rawdoc! { "insert": "c", "$db": "d" };
    let msg = parse(encode_request(1, flags::MORE_TO_COME | flags::EXHAUST_ALLOWED, &body, &[])).expect("parses");
    assert!(msg.more_to_come() && msg.exhaust_allowed());
    // Unknown optional (high) bits are ignored; unknown required (low) bits are fatal.
    assert!(parse(encode_request(1, 1 << 20, &body, &[])).is_ok());
    let err = parse(encode_request(1, 1 << 2, &body, &[])).expect_err("required bit");
    assert!(matches!(err, WireError::IllegalOpMsgFlag(4)) && err.is_fatal());
}

#[test]
fn checksum_is_verified() {
    let body = rawdoc! { "ping": 1, "$db": "d" };
    let good = encode_request(1, flags::CHECKSUM_PRESENT, &body, &[]);
    assert_eq!(parse(good.clone()).expect("valid checksum").body, body);
    let mut bad = good;
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let err = parse(bad).expect_err("mismatch");
    assert!(matches!(err, WireError::ChecksumMismatch { .. }) && err.is_fatal());
}

#[test]
fn unknown_section_kind() {
    let body = rawdoc! { "ping": 1, "$db": "d" };
    let mut bytes = encode_request(1, 0, &body, &[]);
    bytes[20] = 2;
    assert!(matches!(parse(bytes), Err(WireError::UnknownSectionKind(2))));
}

#[test]
fn malformed_bson_inside_an_intact_frame_is_replyable() {
    let body = rawdoc! { "ping": 1, "$db": "d" };
    let mut bytes = encode_request(1, 0, &body, &[]);
    // The body's first element type byte (after header, flags, kind, doc length).
    bytes[16 + 4 + 1 + 4] = 0x7A;
    let err = parse(bytes).expect_err("bad type");
    assert!(matches!(err, WireError::InvalidBson(_)) && !err.is_fatal());
    assert_eq!(err.to_command_error().code, 22);
}

#[test]
fn every_truncation_is_an_error() {
    let body = rawdoc! { "insert": "c", "$db": "d" };
    let a = rawdoc! { "_id": 1, "s": "abc" };
    let full = encode_request(1, 0, &body, &[("documents", vec![&a, &a])]);
    for cut in 16..full.len() {
        let mut bytes = full[..cut].to_vec();
        bytes[..4].copy_from_slice(&(cut as i32).to_le_bytes());
        assert!(parse(bytes).is_err(), "cut at {cut}");
    }
}

/// Random corruption of valid messages, through the codec and the parser: any outcome but a panic.
#[test]
fn garbage_never_panics() {
    let seed = rand::random::<u64>();
    eprintln!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let body = rawdoc! { "update": "c", "ordered": true, "$db": "d" };
    let u = rawdoc! { "q": { "_id": "k" }, "u": { "$set": { "f": [1, 2.5, "x"] } } };
    let bases = [
        encode_request(1, 0, &body, &[("updates", vec![&u, &u])]),
        encode_request(1, flags::CHECKSUM_PRESENT, &body, &[("updates", vec![&u])]),
    ];
    let mut codec = MessageCodec::default();
    for i in 0..20_000 {
        let mut bytes = bases[i % bases.len()].clone();
        match rng.random_range(0..3) {
            0 => {
                for _ in 0..rng.random_range(1..5) {
                    let at = rng.random_range(0..bytes.len());
                    bytes[at] = rng.random();
                }
            }
            1 => bytes.truncate(rng.random_range(0..bytes.len())),
            _ => bytes = (0..rng.random_range(0..64)).map(|_| rng.random()).collect(),
        }
        let mut buf = bytes::BytesMut::from(&bytes[..]);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => {
                    let _ = crate::wire::parse_request(&f).map(|r| r.into_command(0));
                }
                Ok(None) => {
                    let _ = codec.decode_eof(&mut buf);
                    break;
                }
                Err(_) => break,
            }
        }
    }
}
