//! `$out` and `$merge`: the pure half. Parsing, and for `$merge` the write each result document
//! becomes; the router performs the writes (the target may be on any shard).
//!
//! Invariants: both are the pipeline's last stage (40601 otherwise); `$merge` matches on `_id`
//! unless `on` says otherwise, and a result document missing an `on` field is refused (51132)
//! rather than written somewhere arbitrary. Must not: do I/O.

use bson::{Bson, Document, doc, oid::ObjectId};
use shoal_proto::ErrorCode;

use crate::display::type_name;
use crate::error::{QueryError, Result};

#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// `$out`: the target's contents become the results.
    Out {
        db: Option<String>,
        coll: String,
    },
    Merge(MergeSpec),
}

#[derive(Debug, Clone, PartialEq)]
pub struct MergeSpec {
    pub db: Option<String>,
    pub coll: String,
    pub on: Vec<String>,
    pub when_matched: WhenMatched,
    pub when_not_matched: WhenNotMatched,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

/// One result document's write into the `$merge` target.
#[derive(Debug, Clone, PartialEq)]
pub enum MergeWrite {
    /// An insert; a duplicate `on` key fails it (`whenMatched: fail`).
    Insert(Document),
    /// An update statement (`{q, u, upsert}`); `must_match`: no match is an error (13113).
    Update { statement: Document, must_match: bool },
}

impl Output {
    pub fn target(&self) -> (Option<&str>, &str) {
        match self {
            Output::Out { db, coll } => (db.as_deref(), coll),
            Output::Merge(m) => (m.db.as_deref(), &m.coll),
        }
    }

    pub fn parse_out(arg: &Bson) -> Result<Output> {
        let (db, coll) = match arg {
            Bson::String(c) => (None, c.clone()),
            Bson::Document(d) => target_of(d, "$out")?,
            // MongoDB: Location16990.
            other => {
                return Err(QueryError::failed_to_parse(format!(
                    "$out only supports a string or object argument, not {}",
                    type_name(other)
                )));
            }
        };
        check_coll(&coll, "$out")?;
        Ok(Output::Out { db, coll })
    }

    pub fn parse_merge(arg: &Bson) -> Result<Output> {
        let spec = match arg {
            Bson::String(c) => {
                check_coll(c, "$merge")?;
                return Ok(Output::Merge(MergeSpec {
                    db: None,
                    coll: c.clone(),
                    on: vec!["_id".into()],
                    when_matched: WhenMatched::Merge,
                    when_not_matched: WhenNotMatched::Insert,
                }));
            }
            Bson::Document(d) => d,
            // MongoDB: Location51182.
            other => {
                return Err(QueryError::type_mismatch(format!(
                    "$merge requires a string or object argument, not {}",
                    type_name(other)
                )));
            }
        };
        let (mut target, mut on) = (None, vec!["_id".to_owned()]);
        let (mut when_matched, mut when_not_matched) = (WhenMatched::Merge, WhenNotMatched::Insert);
        for (k, v) in spec {
            match (k.as_str(), v) {
                ("into", Bson::String(c)) => target = Some((None, c.clone())),
                ("into", Bson::Document(d)) => target = Some(target_of(d, "$merge")?),
                ("on", Bson::String(f)) => on = vec![f.clone()],
                ("on", Bson::Array(fs)) if !fs.is_empty() => {
                    on = fs
                        .iter()
                        .map(|f| match f {
                            Bson::String(s) => Ok(s.clone()),
                            // MongoDB: Location51134.
                            _ => Err(QueryError::bad_value("$merge 'on' array elements must be strings")),
                        })
                        .collect::<Result<_>>()?;
                }
                ("whenMatched", Bson::String(s)) => {
                    when_matched = match s.as_str() {
                        "replace" => WhenMatched::Replace,
                        "keepExisting" => WhenMatched::KeepExisting,
                        "merge" => WhenMatched::Merge,
                        "fail" => WhenMatched::Fail,
                        other => {
                            return Err(QueryError::bad_value(format!(
                                "Enumeration value '{other}' for field 'whenMatched' is not a valid value."
                            )));
                        }
                    }
                }
                ("whenMatched", Bson::Array(_)) => {
                    return Err(QueryError::new(
                        ErrorCode::NotImplemented,
                        "$merge with a pipeline for 'whenMatched' is not supported yet",
                    ));
                }
                ("whenNotMatched", Bson::String(s)) => {
                    when_not_matched = match s.as_str() {
                        "insert" => WhenNotMatched::Insert,
                        "discard" => WhenNotMatched::Discard,
                        "fail" => WhenNotMatched::Fail,
                        other => {
                            return Err(QueryError::bad_value(format!(
                                "Enumeration value '{other}' for field 'whenNotMatched' is not a valid value."
                            )));
                        }
                    }
                }
                ("let", _) => {
                    return Err(QueryError::new(ErrorCode::NotImplemented, "$merge 'let' is not supported yet"));
                }
                (other, v) => {
                    return Err(QueryError::failed_to_parse(format!(
                        "unknown or malformed $merge argument '{other}' ({})",
                        type_name(v)
                    )));
                }
            }
        }
        // MongoDB: Location40414.
        let (db, coll) = target.ok_or_else(|| {
            QueryError::new(ErrorCode::Location40414, "BSON field '$merge.into' is missing but a required field")
        })?;
        check_coll(&coll, "$merge")?;
        if when_matched == WhenMatched::Fail && when_not_matched != WhenNotMatched::Insert {
            // MongoDB: Location51181.
            return Err(QueryError::bad_value(
                "$merge: whenMatched 'fail' is only supported with whenNotMatched 'insert'",
            ));
        }
        Ok(Output::Merge(MergeSpec { db, coll, on, when_matched, when_not_matched }))
    }
}

impl MergeSpec {
    /// The write `doc` becomes in the target.
    pub fn write_for(&self, mut doc: Document) -> Result<MergeWrite> {
        if self.on == ["_id"] && !doc.contains_key("_id") {
            doc.insert("_id", ObjectId::new());
        }
        let mut q = Document::new();
        for f in &self.on {
            match crate::path::get_path(&doc, f) {
                Some(v) if !matches!(v, Bson::Null | Bson::Undefined | Bson::Array(_)) => {
                    q.insert(f.clone(), v.clone());
                }
                // MongoDB: Location51132.
                _ => {
                    return Err(QueryError::new(
                        ErrorCode::Location51132,
                        format!("$merge write error: 'on' field '{f}' cannot be missing, null, undefined or an array"),
                    ));
                }
            }
        }
        let upsert = self.when_not_matched == WhenNotMatched::Insert;
        let must_match = self.when_not_matched == WhenNotMatched::Fail;
        // A matched document already holds the `on` values (maybe as another numeric type, which
        // `_id`'s immutability would refuse); an upsert takes them from `q`.
        let mut body = doc.clone();
        for f in self.on.iter().filter(|f| !f.contains('.')) {
            body.remove(f);
        }
        let u = match self.when_matched {
            // Parsing allows `fail` only with `insert`: an insert fails on a duplicate `on` key.
            WhenMatched::Fail => return Ok(MergeWrite::Insert(doc)),
            WhenMatched::Replace => Bson::Document(body),
            WhenMatched::KeepExisting => Bson::Document(doc! { "$setOnInsert": body }),
            // As in MongoDB, with `on` other than `_id` a result whose `_id` differs from the
            // matched document's fails (the `_id` is immutable).
            WhenMatched::Merge => Bson::Document(doc! { "$set": body }),
        };
        Ok(MergeWrite::Update { statement: doc! { "q": q, "u": u, "upsert": upsert }, must_match })
    }
}

fn target_of(d: &Document, stage: &str) -> Result<(Option<String>, String)> {
    let db = match d.get("db") {
        Some(Bson::String(s)) => Some(s.clone()),
        None => None,
        Some(other) => {
            return Err(QueryError::type_mismatch(format!("{stage} 'db' must be a string, not {}", type_name(other))));
        }
    };
    match d.get("coll") {
        Some(Bson::String(c)) => Ok((db, c.clone())),
        _ => Err(QueryError::failed_to_parse(format!("{stage} requires a 'coll' string"))),
    }
}

fn check_coll(coll: &str, stage: &str) -> Result<()> {
    if coll.is_empty() || coll.starts_with("system.") || coll.contains('$') {
        return Err(QueryError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid {stage} target namespace: '{coll}'"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use super::*;

    fn merge(spec: Bson) -> MergeSpec {
        match Output::parse_merge(&spec).unwrap() {
            Output::Merge(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_targets_and_defaults() {
        assert_eq!(Output::parse_out(&bson!("t")).unwrap().target(), (None, "t"));
        assert_eq!(Output::parse_out(&bson!({"db": "d", "coll": "t"})).unwrap().target(), (Some("d"), "t"));
        assert_eq!(Output::parse_out(&bson!(1)).unwrap_err().code, ErrorCode::FailedToParse);
        let m = merge(bson!({"into": "t"}));
        assert_eq!(
            (m.on.clone(), m.when_matched, m.when_not_matched),
            (vec!["_id".to_owned()], WhenMatched::Merge, WhenNotMatched::Insert)
        );
        assert_eq!(Output::parse_merge(&bson!({"on": "_id"})).unwrap_err().code, ErrorCode::Location40414);
        assert_eq!(
            Output::parse_merge(&bson!({"into": "t", "whenMatched": "x"})).unwrap_err().code,
            ErrorCode::BadValue
        );
        assert_eq!(
            Output::parse_merge(&bson!({"into": "t", "whenMatched": []})).unwrap_err().code,
            ErrorCode::NotImplemented
        );
    }

    #[test]
    fn writes_follow_when_matched_and_not_matched() {
        let d = doc! {"_id": 1, "a": 2};
        let w = |spec: Bson| merge(spec).write_for(d.clone()).unwrap();
        assert_eq!(
            w(bson!({"into": "t", "whenMatched": "replace"})),
            MergeWrite::Update { statement: doc! {"q": {"_id": 1}, "u": {"a": 2}, "upsert": true}, must_match: false }
        );
        assert_eq!(
            w(bson!({"into": "t", "whenMatched": "keepExisting", "whenNotMatched": "discard"})),
            MergeWrite::Update {
                statement: doc! {"q": {"_id": 1}, "u": {"$setOnInsert": {"a": 2}}, "upsert": false},
                must_match: false
            }
        );
        assert_eq!(
            w(bson!({"into": "t", "whenNotMatched": "fail"})),
            MergeWrite::Update {
                statement: doc! {"q": {"_id": 1}, "u": {"$set": {"a": 2}}, "upsert": false},
                must_match: true
            }
        );
        assert_eq!(w(bson!({"into": "t", "whenMatched": "fail"})), MergeWrite::Insert(d.clone()));
        let by_a = merge(bson!({"into": "t", "on": "a"})).write_for(d.clone()).unwrap();
        assert_eq!(
            by_a,
            MergeWrite::Update {
                statement: doc! {"q": {"a": 2}, "u": {"$set": {"_id": 1}}, "upsert": true},
                must_match: false
            }
        );
        let err = merge(bson!({"into": "t", "on": "b"})).write_for(d).unwrap_err();
        assert_eq!(err.code, ErrorCode::Location51132);
        // A result without `_id` gets one, so `on: _id` always has a value.
        match merge(bson!({"into": "t"})).write_for(doc! {"a": 1}).unwrap() {
            MergeWrite::Update { statement, .. } => assert!(statement.get_document("q").unwrap().contains_key("_id")),
            other => panic!("{other:?}"),
        }
    }
}
