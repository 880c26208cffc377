//! Write concern as the shard's primary applies it (`{w, j, wtimeout}`, SPEC/read-write-concern).
//!
//! MongoDB's default is `{w: "majority"}`, which implies a journaled write (the majority commit
//! point counts durable optimes only). `w: 1` acknowledges once the write is applied here (it
//! survives kill -9, not power loss, unless `j: true`); `w: N` once N members have applied it;
//! `w: 0` without `j` is unacknowledged. The waiting itself is [`crate::repl::wait`].

use std::time::Duration;

use bson::{Bson, Document};

use crate::error::{ExecError, ExecResult};
use crate::exec::args::wrong_type;

/// MongoDB's largest `w` (its replica-set member limit).
pub const W_MAX: u32 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum W {
    Majority,
    Nodes(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteConcern {
    pub w: W,
    pub journal: bool,
    /// `w: 0`: the client does not wait for an answer.
    pub unacknowledged: bool,
    /// How long to wait for other members; `None` (or 0): no limit.
    pub wtimeout: Option<Duration>,
}

impl Default for WriteConcern {
    fn default() -> Self {
        Self { w: W::Majority, journal: true, unacknowledged: false, wtimeout: None }
    }
}

impl WriteConcern {
    pub fn parse(body: &Document, cmd: &str) -> ExecResult<Self> {
        let wc = match body.get("writeConcern") {
            None | Some(Bson::Null) => return Ok(Self::default()),
            Some(Bson::Document(d)) => d,
            Some(other) => return Err(wrong_type(cmd, "writeConcern", other, "object")),
        };
        let j = match wc.get("j") {
            None | Some(Bson::Null) => None,
            Some(Bson::Boolean(b)) => Some(*b),
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                Some(crate::exec::args::as_f64(v).is_some_and(|x| x != 0.0))
            }
            Some(other) => return Err(wrong_type("writeConcern", "j", other, "bool")),
        };
        let w = match wc.get("w") {
            None | Some(Bson::Null) => W::Majority,
            Some(Bson::String(s)) if s == "majority" => W::Majority,
            Some(Bson::String(s)) => {
                return Err(ExecError::new(
                    shoal_proto::ErrorCode::UnknownReplWriteConcern,
                    format!("No write concern mode named '{s}' found in replica set configuration"),
                ));
            }
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                let n = crate::exec::args::as_f64(v).unwrap_or(1.0);
                if !(0.0..=f64::from(W_MAX)).contains(&n) || n.fract() != 0.0 {
                    return Err(ExecError::new(
                        shoal_proto::ErrorCode::FailedToParse,
                        format!("w has to be a non-negative number and not greater than {W_MAX}"),
                    ));
                }
                W::Nodes(n as u32)
            }
            Some(other) => return Err(wrong_type("writeConcern", "w", other, "string or number")),
        };
        let wtimeout = match wc.get("wtimeout").or_else(|| wc.get("wtimeoutMS")) {
            None | Some(Bson::Null) => None,
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                let ms = crate::exec::args::as_f64(v).unwrap_or(0.0);
                (ms >= 1.0).then(|| Duration::from_millis(ms as u64))
            }
            Some(other) => return Err(wrong_type("writeConcern", "wtimeout", other, "number")),
        };
        let majority = w == W::Majority;
        let unacknowledged = w == W::Nodes(0) && j != Some(true);
        Ok(Self { w, journal: j.unwrap_or(majority), unacknowledged, wtimeout })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn defaults_and_forms() -> ExecResult<()> {
        let parse = |d: Document| WriteConcern::parse(&d, "insert");
        assert_eq!(parse(doc! {})?, WriteConcern::default());
        assert!(parse(doc! {"writeConcern": {"w": "majority"}})?.journal);
        assert!(!parse(doc! {"writeConcern": {"w": 1}})?.journal);
        assert!(parse(doc! {"writeConcern": {"w": 1, "j": true}})?.journal);
        assert!(parse(doc! {"writeConcern": {"w": 0}})?.unacknowledged);
        assert!(!parse(doc! {"writeConcern": {"w": 0, "j": true}})?.unacknowledged);
        assert_eq!(parse(doc! {"writeConcern": {"w": 3}})?.w, W::Nodes(3));
        assert_eq!(parse(doc! {"writeConcern": {"w": 2, "wtimeout": 150}})?.wtimeout, Some(Duration::from_millis(150)));
        assert_eq!(parse(doc! {"writeConcern": {"w": 2, "wtimeout": 0}})?.wtimeout, None);
        assert!(parse(doc! {"writeConcern": 3}).is_err());
        assert!(parse(doc! {"writeConcern": {"w": 51}}).is_err());
        assert!(parse(doc! {"writeConcern": {"w": f64::NAN}}).is_err());
        assert!(parse(doc! {"writeConcern": {"w": 1.5}}).is_err());
        assert_eq!(
            parse(doc! {"writeConcern": {"w": "dc1"}}).map_err(|e| e.code),
            Err(shoal_proto::ErrorCode::UnknownReplWriteConcern)
        );
        Ok(())
    }
}
