//! Which requests a shard runs on its async workers instead of the blocking pool.
//!
//! Storage calls may block on I/O, so commands run on tokio's blocking pool — at the price of two
//! thread hand-offs per request (a futex wake-up to a pool thread and one back to the worker),
//! which profiles showed to be a large part of a point read's cost. A point read by `_id` is
//! bounded work: one index probe and one document, from the memtable or a few cached blocks (a
//! block read from disk at worst, as small as any file read a runtime tolerates). Those run
//! inline; anything that may scan, sort, write or wait stays on the blocking pool.
//!
//! Must not: run a command inline whose work grows with the data (a filter other than `_id`
//! equality, a range, `$in`, a collation that turns equality into a range, a hint that forces a
//! collection scan).

use bson::RawBsonRef;

/// Whether `body` is a `find` whose filter is exactly `{_id: <scalar>}`, planned on the `_id`
/// index (no collation, no hint).
pub fn point_read(body: &[u8]) -> bool {
    let Ok(doc) = bson::RawDocument::from_bytes(body) else { return false };
    let mut fields = doc.iter();
    // Every read asks: anything but a `find` is answered by its first field.
    if !matches!(fields.next(), Some(Ok((name, _))) if name.as_str() == "find") {
        return false;
    }
    let mut point = false;
    for field in fields {
        let Ok((name, value)) = field else { return false };
        match name.as_str() {
            "filter" => point = value.as_document().is_some_and(id_equality),
            // A collation turns equality into a range; a hint may force a collection scan
            // (`$natural`) or another index, `min`/`max` bound a hinted one.
            "collation" | "hint" | "min" | "max" => return false,
            _ => {}
        }
    }
    point
}

/// `{_id: v}` with `v` a value matched by equality alone (not a document, which may hold query
/// operators, an array, which matches elements too, or a regex).
fn id_equality(filter: &bson::RawDocument) -> bool {
    let mut fields = filter.iter();
    let Some(Ok((name, value))) = fields.next() else { return false };
    name.as_str() == "_id"
        && fields.next().is_none()
        && !matches!(value, RawBsonRef::Document(_) | RawBsonRef::Array(_) | RawBsonRef::RegularExpression(_))
}

#[cfg(test)]
mod tests {
    use bson::{Regex, doc};

    use super::point_read;

    fn bytes(d: bson::Document) -> Vec<u8> {
        d.to_vec().expect("encode")
    }

    #[test]
    fn only_finds_by_id_equality_are_point_reads() {
        assert!(point_read(&bytes(doc! {"find": "c", "filter": {"_id": "user1"}, "limit": 1, "singleBatch": true})));
        assert!(point_read(&bytes(doc! {"find": "c", "filter": {"_id": 7_i64}, "projection": {"a": 1}})));
        for refused in [
            doc! {"find": "c", "filter": {}},
            doc! {"find": "c"},
            doc! {"find": "c", "filter": {"_id": {"$gte": "a"}}},
            doc! {"find": "c", "filter": {"_id": {"$in": ["a", "b"]}}},
            doc! {"find": "c", "filter": {"_id": ["a"]}},
            doc! {"find": "c", "filter": {"_id": Regex { pattern: "^a".try_into().expect("no NUL"), options: "".try_into().expect("no NUL") }}},
            doc! {"find": "c", "filter": {"_id": "a", "x": 1}},
            doc! {"find": "c", "filter": {"x": 1}},
            doc! {"find": "c", "filter": {"_id": "a"}, "collation": {"locale": "en", "strength": 1}},
            doc! {"find": "c", "filter": {"_id": "a"}, "hint": {"$natural": 1}},
            doc! {"find": "c", "filter": {"_id": "a"}, "hint": "x_1", "min": {"x": 1}},
            doc! {"aggregate": "c", "pipeline": [], "filter": {"_id": "a"}},
            doc! {"count": "c", "filter": {"_id": "a"}},
        ] {
            assert!(!point_read(&bytes(refused.clone())), "{refused}");
        }
        assert!(!point_read(b"\x05\x00"));
    }
}
