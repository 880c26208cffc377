//! `$inc` and `$mul` arithmetic with MongoDB's `SafeNum` type rules.
//!
//! int32 op int32 widens to int64 on overflow; anything with int64 stays int64 and overflow is an
//! error (not a silent double); anything with a double is a double. Decimal128 is refused until
//! bson grows decimal arithmetic.

use bson::Bson;
use shoal_proto::ErrorCode;

use crate::display;
use crate::error::QueryError;

pub(super) enum ArithError {
    Overflow,
    Decimal,
}

impl ArithError {
    pub(super) fn into_error(self, op: &str, old: &Bson, id_doc: &str) -> QueryError {
        match self {
            ArithError::Overflow => {
                let shown = match old {
                    Bson::Int64(i) => format!("(NumberLong){i}"),
                    Bson::Int32(i) => format!("(NumberInt){i}"),
                    other => display::value(other),
                };
                QueryError::bad_value(format!(
                    "Failed to apply {op} operations to current value ({shown}) for document {id_doc}"
                ))
            }
            ArithError::Decimal => {
                QueryError::new(ErrorCode::NotImplemented, format!("{op} on Decimal128 values is not supported yet"))
            }
        }
    }
}

enum Num {
    I32(i32),
    I64(i64),
    F64(f64),
}

fn num(v: &Bson) -> Result<Num, ArithError> {
    match v {
        Bson::Int32(i) => Ok(Num::I32(*i)),
        Bson::Int64(i) => Ok(Num::I64(*i)),
        Bson::Double(f) => Ok(Num::F64(*f)),
        // Callers only pass numbers; a decimal is the one numeric type we cannot compute with.
        _ => Err(ArithError::Decimal),
    }
}

fn as_f64(n: &Num) -> f64 {
    match n {
        Num::I32(i) => f64::from(*i),
        Num::I64(i) => *i as f64,
        Num::F64(f) => *f,
    }
}

fn combine(
    a: &Bson,
    b: &Bson,
    i32_op: fn(i32, i32) -> Option<i32>,
    i64_op: fn(i64, i64) -> Option<i64>,
    f64_op: fn(f64, f64) -> f64,
) -> Result<Bson, ArithError> {
    let (x, y) = (num(a)?, num(b)?);
    Ok(match (&x, &y) {
        (Num::F64(_), _) | (_, Num::F64(_)) => Bson::Double(f64_op(as_f64(&x), as_f64(&y))),
        (Num::I32(p), Num::I32(q)) => match i32_op(*p, *q) {
            Some(r) => Bson::Int32(r),
            // Two int32 operands never overflow an int64.
            None => Bson::Int64(i64_op(i64::from(*p), i64::from(*q)).ok_or(ArithError::Overflow)?),
        },
        (Num::I32(p), Num::I64(q)) => Bson::Int64(i64_op(i64::from(*p), *q).ok_or(ArithError::Overflow)?),
        (Num::I64(p), Num::I32(q)) => Bson::Int64(i64_op(*p, i64::from(*q)).ok_or(ArithError::Overflow)?),
        (Num::I64(p), Num::I64(q)) => Bson::Int64(i64_op(*p, *q).ok_or(ArithError::Overflow)?),
    })
}

pub(super) fn add(a: &Bson, b: &Bson) -> Result<Bson, ArithError> {
    combine(a, b, i32::checked_add, i64::checked_add, |x, y| x + y)
}

pub(super) fn multiply(a: &Bson, b: &Bson) -> Result<Bson, ArithError> {
    combine(a, b, i32::checked_mul, i64::checked_mul, |x, y| x * y)
}

/// What `$mul` writes into a missing field: zero of the multiplier's type.
pub(super) fn zero_like(n: &Bson) -> Bson {
    match n {
        Bson::Int64(_) => Bson::Int64(0),
        Bson::Double(_) => Bson::Double(0.0),
        Bson::Decimal128(d) => Bson::Decimal128(zero_decimal(*d)),
        _ => Bson::Int32(0),
    }
}

/// A Decimal128 zero, built from bytes because bson 3 offers no decimal constructors.
fn zero_decimal(_like: bson::Decimal128) -> bson::Decimal128 {
    // 0E-0: coefficient 0 with the exponent bias 6176 in the combination field.
    let mut bytes = [0u8; 16];
    bytes[15] = 0x30;
    bytes[14] = 0x40;
    bson::Decimal128::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_rules() {
        assert!(matches!(add(&Bson::Int32(1), &Bson::Int32(2)), Ok(Bson::Int32(3))));
        assert!(
            matches!(add(&Bson::Int32(i32::MAX), &Bson::Int32(1)), Ok(Bson::Int64(x)) if x == i64::from(i32::MAX) + 1)
        );
        assert!(matches!(add(&Bson::Int64(i64::MAX), &Bson::Int32(1)), Err(ArithError::Overflow)));
        assert!(matches!(add(&Bson::Int32(1), &Bson::Double(0.5)), Ok(Bson::Double(x)) if x == 1.5));
        assert!(matches!(multiply(&Bson::Int32(i32::MAX), &Bson::Int32(2)), Ok(Bson::Int64(_))));
        assert!(matches!(multiply(&Bson::Int64(i64::MAX), &Bson::Int64(2)), Err(ArithError::Overflow)));
        assert!(matches!(zero_like(&Bson::Int64(5)), Bson::Int64(0)));
    }

    #[test]
    fn decimal_zero_prints_as_zero() {
        let z = zero_decimal(bson::Decimal128::from_bytes([0; 16]));
        assert_eq!(z.to_string(), "0");
    }
}
