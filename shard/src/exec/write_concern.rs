//! Write concern as a single member applies it: whether the acknowledgement waits for the journal.
//!
//! MongoDB's default is `{w: "majority"}`, which implies a journaled write; `w: 1` (or `j: false`)
//! acknowledges once the write is in the OS buffers (it survives kill -9, not power loss).
//! Replica groups (issue 7) add waiting for secondaries.

use bson::{Bson, Document};

use crate::error::{ExecError, ExecResult};
use crate::exec::args::wrong_type;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteConcern {
    pub journal: bool,
    /// `w: 0`: the client does not wait for an answer.
    pub unacknowledged: bool,
}

impl WriteConcern {
    pub fn parse(body: &Document, cmd: &str) -> ExecResult<Self> {
        let wc = match body.get("writeConcern") {
            None | Some(Bson::Null) => {
                return Ok(Self { journal: true, unacknowledged: false });
            }
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
        let (majority, w0) = match wc.get("w") {
            None | Some(Bson::Null) => (true, false),
            Some(Bson::String(s)) if s == "majority" => (true, false),
            Some(Bson::String(s)) => {
                return Err(ExecError::new(
                    shoal_proto::ErrorCode::UnknownError,
                    format!("No write concern mode named '{s}' found in replica set configuration"),
                ));
            }
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                let n = crate::exec::args::as_f64(v).unwrap_or(1.0);
                if !(0.0..=50.0).contains(&n) {
                    return Err(ExecError::new(
                        shoal_proto::ErrorCode::FailedToParse,
                        "w has to be a non-negative number and not greater than 50",
                    ));
                }
                if n > 1.0 {
                    return Err(ExecError::new(
                        shoal_proto::ErrorCode::WriteConcernFailed,
                        format!("Not enough data-bearing nodes: w:{n} asked, this shard has 1 member"),
                    ));
                }
                (false, n == 0.0)
            }
            Some(other) => return Err(wrong_type("writeConcern", "w", other, "string or number")),
        };
        Ok(Self { journal: j.unwrap_or(majority), unacknowledged: w0 && j != Some(true) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn defaults_and_forms() -> ExecResult<()> {
        assert!(WriteConcern::parse(&doc! {}, "insert")?.journal);
        assert!(WriteConcern::parse(&doc! {"writeConcern": {"w": "majority"}}, "insert")?.journal);
        assert!(!WriteConcern::parse(&doc! {"writeConcern": {"w": 1}}, "insert")?.journal);
        assert!(WriteConcern::parse(&doc! {"writeConcern": {"w": 1, "j": true}}, "insert")?.journal);
        assert!(WriteConcern::parse(&doc! {"writeConcern": {"w": 0}}, "insert")?.unacknowledged);
        assert!(WriteConcern::parse(&doc! {"writeConcern": 3}, "insert").is_err());
        assert!(WriteConcern::parse(&doc! {"writeConcern": {"w": 3}}, "insert").is_err());
        Ok(())
    }
}
