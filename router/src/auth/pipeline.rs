//! The other collections an aggregation pipeline reads or writes, with the actions MongoDB
//! requires on each: `find` on what `$lookup`, `$graphLookup` and `$unionWith` read (nested
//! pipelines and `$facet` included), `insert` and `remove` on `$out`'s target, `insert` and
//! `update` on `$merge`'s.
//!
//! Must not: judge anything: it only lists; `check` decides.

use bson::raw::{RawArray, RawBsonRef, RawDocument};
use shoal_auth::{Action, ActionSet};

use crate::error::CommandError;

/// Nesting of sub-pipelines followed; deeper ones are refused (MongoDB's own limit is 20).
const DEPTH_MAX: usize = 20;

const FIND: ActionSet = ActionSet::of(&[Action::Find]);
const OUT: ActionSet = ActionSet::of(&[Action::Insert, Action::Remove]);
const MERGE: ActionSet = ActionSet::of(&[Action::Insert, Action::Update]);

/// `(db.collection, actions)` for every collection the `aggregate` command's pipeline touches
/// besides the one it runs on.
pub fn namespaces(db: &str, body: &RawDocument) -> Result<Vec<(String, ActionSet)>, CommandError> {
    let mut out = Vec::new();
    if let Some(RawBsonRef::Array(stages)) = body.get("pipeline")? {
        walk(db, stages, 0, &mut out)?;
    }
    Ok(out)
}

fn walk(db: &str, stages: &RawArray, depth: usize, out: &mut Vec<(String, ActionSet)>) -> Result<(), CommandError> {
    if depth > DEPTH_MAX {
        return Err(CommandError::new(
            shoal_proto::ErrorCode::BadValue,
            format!("aggregation pipelines may nest at most {DEPTH_MAX} levels"),
        ));
    }
    for stage in stages {
        let RawBsonRef::Document(stage) = stage? else { continue };
        let Some(Ok((name, spec))) = stage.iter().next() else { continue };
        match (name.as_str(), spec) {
            ("$lookup" | "$graphLookup", RawBsonRef::Document(spec)) => {
                if let Some(ns) = target(db, spec.get("from")?)? {
                    out.push((ns, FIND));
                }
                if let Some(RawBsonRef::Array(inner)) = spec.get("pipeline")? {
                    walk(db, inner, depth + 1, out)?;
                }
            }
            ("$unionWith", RawBsonRef::String(coll)) => out.push((format!("{db}.{coll}"), FIND)),
            ("$unionWith", RawBsonRef::Document(spec)) => {
                if let Some(ns) = target(db, spec.get("coll")?)? {
                    out.push((ns, FIND));
                }
                if let Some(RawBsonRef::Array(inner)) = spec.get("pipeline")? {
                    walk(db, inner, depth + 1, out)?;
                }
            }
            ("$facet", RawBsonRef::Document(facets)) => {
                for facet in facets {
                    if let (_, RawBsonRef::Array(inner)) = facet? {
                        walk(db, inner, depth + 1, out)?;
                    }
                }
            }
            ("$out", spec) => {
                if let Some(ns) = target(db, Some(spec))? {
                    out.push((ns, OUT));
                }
            }
            ("$merge", RawBsonRef::Document(spec)) => {
                if let Some(ns) = target(db, spec.get("into")?)? {
                    out.push((ns, MERGE));
                }
            }
            ("$merge", spec @ RawBsonRef::String(_)) => {
                if let Some(ns) = target(db, Some(spec))? {
                    out.push((ns, MERGE));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A stage's target: `"coll"` (this database) or `{db, coll}`.
fn target(db: &str, value: Option<RawBsonRef<'_>>) -> Result<Option<String>, CommandError> {
    Ok(match value {
        Some(RawBsonRef::String(coll)) => Some(format!("{db}.{coll}")),
        Some(RawBsonRef::Document(d)) => {
            let other = match d.get("db")? {
                Some(RawBsonRef::String(other)) => other,
                _ => db,
            };
            match d.get("coll")? {
                Some(RawBsonRef::String(coll)) => Some(format!("{other}.{coll}")),
                _ => None,
            }
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn lists_what_stages_read_and_write() {
        let body = rawdoc! {
            "aggregate": "orders",
            "pipeline": [
                { "$lookup": { "from": "items", "localField": "i", "foreignField": "_id", "as": "x",
                               "pipeline": [ { "$unionWith": "archive" } ] } },
                { "$facet": { "a": [ { "$graphLookup": { "from": "tree", "startWith": "$p",
                    "connectFromField": "p", "connectToField": "_id", "as": "t" } } ] } },
                { "$unionWith": { "coll": "more", "pipeline": [] } },
                { "$merge": { "into": { "db": "reports", "coll": "daily" } } },
            ],
        };
        let got: Vec<_> = namespaces("app", &body).unwrap().into_iter().map(|(ns, a)| (ns, a.names())).collect();
        assert_eq!(
            got,
            [
                ("app.items".to_owned(), vec!["find"]),
                ("app.archive".to_owned(), vec!["find"]),
                ("app.tree".to_owned(), vec!["find"]),
                ("app.more".to_owned(), vec!["find"]),
                ("reports.daily".to_owned(), vec!["insert", "update"]),
            ]
        );
        let out = rawdoc! { "aggregate": "c", "pipeline": [ { "$out": "copy" } ] };
        assert_eq!(namespaces("app", &out).unwrap()[0].1.names(), ["insert", "remove"]);
    }
}
