//! Type conversions: `$convert {input, to, onError, onNull}` and the shorthands `$toBool
//! $toDouble $toLong $toDate $toDecimal $toObjectId` (`$toInt` and `$toString` are in
//! `convert`, which these reuse).
//!
//! Rules, as MongoDB's: a null or missing input converts to null (`$convert`: to `onNull`); a
//! value that cannot convert fails with ConversionFailure, which `onError` replaces, while other
//! errors (a bad `to`) are never swallowed. Decimal128 converts to and from strings and
//! integers; to `int`/`long`/`date` it is refused (NotImplemented), like decimal arithmetic.

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Decimal128};
use shoal_proto::ErrorCode;

use super::{Args, date_parse, nullish, type_error};
use crate::aggregate::convert;
use crate::aggregate::operators::Operator;
use crate::display::type_name;
use crate::error::{QueryError, Result};

/// A `$convert` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
    Decimal,
}

impl Target {
    fn of(v: &Bson) -> Result<Target> {
        let by_name = |s: &str| match s {
            "double" => Some(Target::Double),
            "string" => Some(Target::String),
            "objectId" => Some(Target::ObjectId),
            "bool" => Some(Target::Bool),
            "date" => Some(Target::Date),
            "int" => Some(Target::Int),
            "long" => Some(Target::Long),
            "decimal" => Some(Target::Decimal),
            _ => None,
        };
        let found = match v {
            Bson::String(s) => by_name(s),
            other => match super::integral(other) {
                Some(1) => Some(Target::Double),
                Some(2) => Some(Target::String),
                Some(7) => Some(Target::ObjectId),
                Some(8) => Some(Target::Bool),
                Some(9) => Some(Target::Date),
                Some(16) => Some(Target::Int),
                Some(18) => Some(Target::Long),
                Some(19) => Some(Target::Decimal),
                _ => None,
            },
        };
        // MongoDB: BadValue "Unknown type name" / FailedToParse for an unknown type code.
        found.ok_or_else(|| QueryError::bad_value(format!("Unknown type name: {}", crate::display::value(v))))
    }

    fn name(self) -> &'static str {
        match self {
            Target::Double => "double",
            Target::String => "string",
            Target::ObjectId => "objectId",
            Target::Bool => "bool",
            Target::Date => "date",
            Target::Int => "int",
            Target::Long => "long",
            Target::Decimal => "decimal",
        }
    }
}

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    let target = match op {
        ToBool => Target::Bool,
        ToDouble => Target::Double,
        ToLong => Target::Long,
        ToDate => Target::Date,
        ToDecimal => Target::Decimal,
        ToObjectId => Target::ObjectId,
        Convert => return convert_expr(args),
        other => return Err(type_error(format!("{} is not a conversion operator", other.name()))),
    };
    let v = args.get(0)?;
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    convert_to(target, v.unwrap_or(Bson::Null)).map(Some)
}

fn convert_expr(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let to = args.get(1)?;
    let input = args.get(0)?;
    if nullish(&input) {
        return if args.is_absent(3) { Ok(Some(Bson::Null)) } else { args.get(3) };
    }
    let Some(to) = to.filter(|t| !matches!(t, Bson::Null | Bson::Undefined)) else { return Ok(Some(Bson::Null)) };
    let target = Target::of(&to)?;
    match convert_to(target, input.unwrap_or(Bson::Null)) {
        Err(e) if e.code == ErrorCode::ConversionFailure && !args.is_absent(2) => args.get(2),
        other => other.map(Some),
    }
}

fn failure(msg: String) -> QueryError {
    QueryError::new(ErrorCode::ConversionFailure, format!("{msg} in $convert with no onError value"))
}

fn unsupported(v: &Bson, target: Target) -> QueryError {
    failure(format!("Unsupported conversion from {} to {}", type_name(v), target.name()))
}

fn decimal_refused(target: Target) -> QueryError {
    QueryError::new(
        ErrorCode::NotImplemented,
        format!("converting a Decimal128 to {} is not supported yet", target.name()),
    )
}

/// Converts a value that is not null.
fn convert_to(target: Target, v: Bson) -> Result<Bson> {
    let one = |r: Result<Option<Bson>>| r.map(|v| v.unwrap_or(Bson::Null));
    match target {
        Target::String => one(convert::to_string(Some(v))),
        Target::Int => one(convert::to_int(Some(v))),
        Target::Bool => match v {
            Bson::Boolean(b) => Ok(Bson::Boolean(b)),
            Bson::Int32(i) => Ok(Bson::Boolean(i != 0)),
            Bson::Int64(i) => Ok(Bson::Boolean(i != 0)),
            Bson::Double(f) => Ok(Bson::Boolean(f != 0.0)),
            Bson::Decimal128(d) => Ok(Bson::Boolean(d.to_string().parse::<f64>() != Ok(0.0))),
            Bson::String(_) | Bson::ObjectId(_) | Bson::DateTime(_) | Bson::Timestamp(_) => Ok(Bson::Boolean(true)),
            other => Err(unsupported(&other, target)),
        },
        Target::Double => match v {
            Bson::Double(f) => Ok(Bson::Double(f)),
            Bson::Int32(i) => Ok(Bson::Double(f64::from(i))),
            Bson::Int64(i) => Ok(Bson::Double(i as f64)),
            Bson::Boolean(b) => Ok(Bson::Double(if b { 1.0 } else { 0.0 })),
            Bson::DateTime(d) => Ok(Bson::Double(d.timestamp_millis() as f64)),
            Bson::Decimal128(d) => d
                .to_string()
                .parse::<f64>()
                .map(Bson::Double)
                .map_err(|_| failure(format!("Failed to parse number '{d}'"))),
            Bson::String(s) => parse_double(&s).map(Bson::Double).ok_or_else(|| failure(format!("Failed to parse number '{s}'"))),
            other => Err(unsupported(&other, target)),
        },
        Target::Long => match v {
            Bson::Int64(i) => Ok(Bson::Int64(i)),
            Bson::Int32(i) => Ok(Bson::Int64(i64::from(i))),
            Bson::Boolean(b) => Ok(Bson::Int64(i64::from(b))),
            Bson::DateTime(d) => Ok(Bson::Int64(d.timestamp_millis())),
            Bson::Double(f) => {
                let t = f.trunc();
                // 2^63 is the first double past i64::MAX.
                if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&t) {
                    return Err(failure(format!("Conversion would overflow target type: {}", crate::display::value(&v))));
                }
                Ok(Bson::Int64(t as i64))
            }
            Bson::String(s) => s.parse::<i64>().map(Bson::Int64).map_err(|_| failure(format!("Failed to parse number '{s}'"))),
            Bson::Decimal128(_) => Err(decimal_refused(target)),
            other => Err(unsupported(&other, target)),
        },
        Target::Date => match v {
            Bson::DateTime(d) => Ok(Bson::DateTime(d)),
            Bson::Int64(i) => Ok(Bson::DateTime(DateTime::from_millis(i))),
            Bson::Double(f) if f.is_finite() && f.abs() < 9.2e18 => Ok(Bson::DateTime(DateTime::from_millis(f.trunc() as i64))),
            Bson::Double(_) => Err(failure(format!("Conversion would overflow target type: {}", crate::display::value(&v)))),
            Bson::Timestamp(t) => Ok(Bson::DateTime(DateTime::from_millis(i64::from(t.time) * 1000))),
            Bson::ObjectId(o) => Ok(Bson::DateTime(DateTime::from_system_time(o.timestamp().to_system_time()))),
            Bson::String(s) => date_parse::parse_date(&s, None)
                .map(|ms| Bson::DateTime(DateTime::from_millis(ms)))
                .map_err(|e| failure(e.message)),
            Bson::Decimal128(_) => Err(decimal_refused(target)),
            other => Err(unsupported(&other, target)),
        },
        Target::Decimal => {
            let text = match &v {
                Bson::Decimal128(d) => return Ok(Bson::Decimal128(*d)),
                Bson::Int32(i) => i.to_string(),
                Bson::Int64(i) => i.to_string(),
                Bson::Boolean(b) => u8::from(*b).to_string(),
                Bson::DateTime(d) => d.timestamp_millis().to_string(),
                // MongoDB converts a double through its 15 significant digits.
                Bson::Double(f) if f.is_nan() => "NaN".to_owned(),
                Bson::Double(f) if f.is_infinite() => if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned(),
                Bson::Double(f) => format!("{f:.14e}").replace('e', "E"),
                Bson::String(s) => s.clone(),
                other => return Err(unsupported(other, target)),
            };
            text.parse::<Decimal128>()
                .map(Bson::Decimal128)
                .map_err(|_| failure(format!("Failed to parse number '{text}'")))
        }
        Target::ObjectId => match v {
            Bson::ObjectId(o) => Ok(Bson::ObjectId(o)),
            Bson::String(s) => ObjectId::parse_str(&s).map(Bson::ObjectId).map_err(|_| {
                failure(format!(
                    "Failed to parse objectId '{s}': Invalid string length for parsing to OID, expected 24 but found {}",
                    s.len()
                ))
            }),
            other => Err(unsupported(&other, target)),
        },
    }
}

/// A decimal number or MongoDB's spellings of the special values.
fn parse_double(s: &str) -> Option<f64> {
    match s {
        "NaN" | "nan" => Some(f64::NAN),
        "Infinity" | "inf" | "+Infinity" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        // Rust also takes "infinity" in any case, which MongoDB refuses.
        _ if s.chars().any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') => None,
        _ => s.parse().ok(),
    }
    .filter(|_| !s.is_empty())
}
