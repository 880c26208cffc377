//! `$unionWith: "coll"` or `{coll, pipeline}`: the pure half. The stage reads another
//! collection, which only the router reaches across shards, so the pipeline engine does not run
//! it: the router reads `coll` (filtered by the sub-pipeline's leading `$match`, so a shard key
//! equality targets one shard), runs the sub-pipeline over it and appends the result to the
//! stream. Without `coll` the sub-pipeline must begin with `$documents`.
//!
//! Must not: do I/O.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};

use super::Pipeline;

#[derive(Debug, Clone)]
pub struct UnionWith {
    /// The other collection, in the aggregated collection's database; `None` with `$documents`.
    pub coll: Option<String>,
    /// The sub-pipeline (validated), run over `coll`'s documents.
    pub pipeline: Vec<Bson>,
}

impl UnionWith {
    pub fn parse(arg: &Bson) -> Result<UnionWith> {
        let (coll, pipeline) = match arg {
            Bson::String(s) => (Some(s.clone()), Vec::new()),
            Bson::Document(spec) => {
                let (mut coll, mut pipeline) = (None, Vec::new());
                for (k, v) in spec {
                    match (k.as_str(), v) {
                        ("coll", Bson::String(s)) => coll = Some(s.clone()),
                        ("coll", Bson::Document(_)) => {
                            return Err(QueryError::new(
                                ErrorCode::NotImplemented,
                                "$unionWith from another database is not supported",
                            ));
                        }
                        ("pipeline", Bson::Array(a)) => pipeline = a.clone(),
                        ("coll" | "pipeline", other) => {
                            return Err(QueryError::type_mismatch(format!(
                                "BSON field '$unionWith.{k}' is the wrong type '{}'",
                                crate::display::type_name(other)
                            )));
                        }
                        (other, _) => {
                            return Err(QueryError::new(
                                ErrorCode::Location40415,
                                format!("BSON field '$unionWith.{other}' is an unknown field."),
                            ));
                        }
                    }
                }
                (coll, pipeline)
            }
            other => {
                // MongoDB: Location40417 (as of 4.4, any other type).
                return Err(QueryError::failed_to_parse(format!(
                    "the $unionWith stage specification must be an object or string, but found {}",
                    crate::display::type_name(other)
                )));
            }
        };
        let starts_with_documents = Self::leading_documents(&pipeline).is_some();
        if coll.is_none() && !starts_with_documents {
            return Err(QueryError::failed_to_parse(
                "$unionWith stage without explicit collection must have a pipeline with $documents as first stage",
            ));
        }
        let parsed = Pipeline::parse(&pipeline)?;
        if let Some(bad) = parsed.stage_names().into_iter().find(|n| matches!(*n, "$out" | "$merge")) {
            // MongoDB: Location31441.
            return Err(QueryError::bad_value(format!("{bad} is not allowed within a $unionWith's sub-pipeline")));
        }
        Ok(UnionWith { coll, pipeline })
    }

    /// The filter of the sub-pipeline's leading `$match`, to narrow (and target) the read.
    pub fn read_filter(&self) -> Document {
        match self.pipeline.first() {
            Some(Bson::Document(d)) => match d.get("$match") {
                Some(Bson::Document(m)) => m.clone(),
                _ => Document::new(),
            },
            _ => Document::new(),
        }
    }

    /// The documents of a leading `$documents` stage, if the pipeline starts with one.
    pub fn leading_documents(pipeline: &[Bson]) -> Option<&Bson> {
        match pipeline.first() {
            Some(Bson::Document(d)) if d.len() == 1 => d.get("$documents"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use super::*;

    #[test]
    fn forms_and_errors() {
        let u = UnionWith::parse(&bson!("other")).unwrap();
        assert_eq!((u.coll.as_deref(), u.pipeline.len()), (Some("other"), 0));
        let u = UnionWith::parse(&bson!({"coll": "o", "pipeline": [{"$match": {"a": 1}}, {"$project": {"a": 1}}]}))
            .unwrap();
        assert_eq!(u.read_filter(), doc! {"a": 1});
        assert!(UnionWith::parse(&bson!({"pipeline": [{"$documents": [{"a": 1}]}]})).is_ok());
        assert!(UnionWith::parse(&bson!({"pipeline": [{"$match": {}}]})).is_err());
        assert!(UnionWith::parse(&bson!(1)).is_err());
        assert!(UnionWith::parse(&bson!({"coll": "o", "foo": 1})).is_err());
        assert!(UnionWith::parse(&bson!({"coll": "o", "pipeline": [{"$out": "x"}]})).is_err());
        assert!(UnionWith::parse(&bson!({"coll": "o", "pipeline": [{"$bogus": 1}]})).is_err());
    }
}
