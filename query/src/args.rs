//! Command arguments every path checks alike: `skip`, `limit`, `batchSize` and boolean flags of
//! `find`, `count` and `aggregate`. The shard parses them to run the command; the router checks them before it
//! rewrites them for several shards (it sends `limit + skip` and applies both itself), so a
//! value a shard would refuse is refused whether the collection is sharded or not.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::display::type_name;
use crate::error::{QueryError, Result};

/// `BSON field '<cmd>.<field>' is the wrong type '<t>', expected type '<want>'` (TypeMismatch).
pub fn wrong_type(cmd: &str, field: &str, got: &Bson, want: &str) -> QueryError {
    QueryError::type_mismatch(format!(
        "BSON field '{cmd}.{field}' is the wrong type '{}', expected type '{want}'",
        type_name(got)
    ))
}

/// A non-negative integer argument (`skip`, `limit`, `batchSize`); doubles must be integral,
/// a negative value is Location51024 as in MongoDB.
pub fn non_negative(body: &Document, cmd: &str, field: &str) -> Result<Option<i64>> {
    let n = match body.get(field) {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        Some(Bson::Double(d)) if d.fract() == 0.0 && d.is_finite() => *d as i64,
        Some(Bson::Double(_)) => {
            return Err(QueryError::bad_value(format!("BSON field '{cmd}.{field}' value must be an integer")));
        }
        Some(other) => return Err(wrong_type(cmd, field, other, "long")),
    };
    if n < 0 {
        return Err(QueryError::new(
            ErrorCode::Location51024,
            format!("BSON field '{field}' value must be >= 0, actual value '{n}'"),
        ));
    }
    Ok(Some(n))
}

/// A boolean option (`singleBatch`, `allowDiskUse`, `remove`, ...): a bool, or a number read
/// as non-zero; null or absent is `None`.
pub fn flag(body: &Document, cmd: &str, field: &str) -> Result<Option<bool>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(Bson::Int32(i)) => Ok(Some(*i != 0)),
        Some(Bson::Int64(i)) => Ok(Some(*i != 0)),
        Some(Bson::Double(d)) => Ok(Some(*d != 0.0)),
        Some(other) => Err(wrong_type(cmd, field, other, "bool")),
    }
}

/// `count`'s `limit`: any number, its magnitude used (a negative limit counts as its absolute
/// value, 0 as none), as MongoDB does.
pub fn count_limit(body: &Document) -> Result<Option<u64>> {
    let x = match body.get("limit") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Int32(i)) => f64::from(*i),
        Some(Bson::Int64(i)) => *i as f64,
        Some(Bson::Double(d)) => *d,
        Some(other) => return Err(wrong_type("count", "limit", other, "long")),
    };
    Ok((x != 0.0 && !x.is_nan()).then(|| x.abs() as u64))
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn skips_and_limits_are_checked_as_mongodb_checks_them() {
        assert_eq!(non_negative(&doc! {}, "find", "skip"), Ok(None));
        assert_eq!(non_negative(&doc! { "skip": 3.0 }, "find", "skip"), Ok(Some(3)));
        let code = |r: Result<Option<i64>>| r.err().map(|e| e.code);
        assert_eq!(code(non_negative(&doc! { "skip": 1.5 }, "find", "skip")), Some(ErrorCode::BadValue));
        assert_eq!(code(non_negative(&doc! { "skip": "x" }, "find", "skip")), Some(ErrorCode::TypeMismatch));
        assert_eq!(code(non_negative(&doc! { "skip": -1 }, "find", "skip")), Some(ErrorCode::Location51024));
        assert_eq!(count_limit(&doc! { "limit": -5 }), Ok(Some(5)));
        assert_eq!(count_limit(&doc! { "limit": 0 }), Ok(None));
        assert!(count_limit(&doc! { "limit": "x" }).is_err());
        assert_eq!(flag(&doc! { "f": 1 }, "find", "f"), Ok(Some(true)));
        assert_eq!(flag(&doc! { "f": null }, "find", "f"), Ok(None));
        assert!(flag(&doc! { "f": "x" }, "find", "f").is_err());
    }
}
