//! The operator expressions Shoal evaluates so far (conversions, `$mod`, `$substr` and dates
//! in `convert`), with MongoDB's null, type and overflow rules.
//!
//! Arithmetic: int32 widens to int64 and int64 to double on overflow (unlike `$inc`, which
//! refuses); any double makes a double; Decimal128 is refused as `NotImplemented` until bson has
//! decimal arithmetic. A null or missing operand makes `$add`, `$subtract`, `$multiply`,
//! `$divide` and `$concat` null.

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};
use shoal_proto::ErrorCode;

use super::convert;
use super::expr::{Expr, Scope};
use crate::display::type_name;
use crate::error::{QueryError, Result};
use crate::order::{compare_values, values_equal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operator {
    Add,
    Subtract,
    Multiply,
    Divide,
    Concat,
    ToUpper,
    ToLower,
    Cond,
    IfNull,
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    And,
    Or,
    Not,
    Size,
    ArrayElemAt,
    In,
    Type,
    Mod,
    Substr,
    ToString,
    ToInt,
    Year,
    Month,
    DayOfMonth,
    /// `{$dateToString: {date, format, onNull, timezone}}`: arguments `[date, format, onNull]`.
    DateToString,
    /// `{$switch: {branches: [{case, then}], default}}`: arguments `case, then, …, [default]`.
    Switch,
}

impl Operator {
    pub(crate) fn from_name(name: &str) -> Option<Operator> {
        use Operator::*;
        Some(match name {
            "$add" => Add,
            "$subtract" => Subtract,
            "$multiply" => Multiply,
            "$divide" => Divide,
            "$concat" => Concat,
            "$toUpper" => ToUpper,
            "$toLower" => ToLower,
            "$cond" => Cond,
            "$ifNull" => IfNull,
            "$eq" => Eq,
            "$ne" => Ne,
            "$gt" => Gt,
            "$gte" => Gte,
            "$lt" => Lt,
            "$lte" => Lte,
            "$and" => And,
            "$or" => Or,
            "$not" => Not,
            "$size" => Size,
            "$arrayElemAt" => ArrayElemAt,
            "$in" => In,
            "$type" => Type,
            "$mod" => Mod,
            "$substr" | "$substrBytes" => Substr,
            "$toString" => ToString,
            "$toInt" => ToInt,
            "$year" => Year,
            "$month" => Month,
            "$dayOfMonth" => DayOfMonth,
            "$dateToString" => DateToString,
            "$switch" => Switch,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        use Operator::*;
        match self {
            Add => "$add",
            Subtract => "$subtract",
            Multiply => "$multiply",
            Divide => "$divide",
            Concat => "$concat",
            ToUpper => "$toUpper",
            ToLower => "$toLower",
            Cond => "$cond",
            IfNull => "$ifNull",
            Eq => "$eq",
            Ne => "$ne",
            Gt => "$gt",
            Gte => "$gte",
            Lt => "$lt",
            Lte => "$lte",
            And => "$and",
            Or => "$or",
            Not => "$not",
            Size => "$size",
            ArrayElemAt => "$arrayElemAt",
            In => "$in",
            Type => "$type",
            Mod => "$mod",
            Substr => "$substrBytes",
            ToString => "$toString",
            ToInt => "$toInt",
            Year => "$year",
            Month => "$month",
            DayOfMonth => "$dayOfMonth",
            DateToString => "$dateToString",
            Switch => "$switch",
        }
    }
}

pub(crate) fn check_arity(op: Operator, n: usize) -> Result<()> {
    use Operator::*;
    let exact = match op {
        Add | Multiply | Concat | And | Or => return Ok(()),
        IfNull if n >= 2 => return Ok(()),
        IfNull => {
            return Err(QueryError::bad_value(format!("$ifNull needs at least two arguments, had: {n}")));
        }
        // Built from their object forms by `expr` (already checked there).
        DateToString | Switch => return Ok(()),
        ToUpper | ToLower | Not | Size | Type | ToString | ToInt | Year | Month | DayOfMonth => 1,
        Subtract | Divide | Eq | Ne | Gt | Gte | Lt | Lte | ArrayElemAt | In | Mod => 2,
        Cond | Substr => 3,
    };
    if n == exact {
        return Ok(());
    }
    // MongoDB: Location16020.
    Err(QueryError::bad_value(format!("Expression {} takes exactly {exact} arguments. {n} were passed in.", op.name())))
}

/// MongoDB's `coerceToBool`: null, missing, undefined, false and numeric zero are false.
pub(crate) fn truthy(v: Option<&Bson>) -> bool {
    match v {
        None | Some(Bson::Null | Bson::Undefined) => false,
        Some(Bson::Boolean(b)) => *b,
        Some(n @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            !values_equal(n, &Bson::Int32(0))
        }
        Some(_) => true,
    }
}

fn nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null | Bson::Undefined))
}

/// Missing compares as `undefined` does: below null, as in MongoDB's `Value::compare`.
fn compare_opt(a: &Option<Bson>, b: &Option<Bson>) -> Ordering {
    compare_values(a.as_ref().unwrap_or(&Bson::Undefined), b.as_ref().unwrap_or(&Bson::Undefined))
}

pub(crate) fn eval(op: Operator, args: &[Expr], root: &Document, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
    use Operator::*;
    let arg = |i: usize| -> Result<Option<Bson>> { args.get(i).map_or(Ok(None), |e| e.eval_in(root, scope)) };
    let yes = |b: bool| Ok(Some(Bson::Boolean(b)));
    match op {
        Add => add(args, root, scope),
        Multiply => {
            let mut acc = Num::I32(1);
            for e in args {
                let v = e.eval_in(root, scope)?;
                if nullish(&v) {
                    return Ok(Some(Bson::Null));
                }
                let n = v
                    .as_ref()
                    .and_then(Num::of)
                    .ok_or_else(|| type_error(format!("$multiply only supports numeric types, not {}", type_of(&v))))?;
                acc = Num::mul(acc, n?);
            }
            Ok(Some(acc.into()))
        }
        Subtract => subtract(arg(0)?, arg(1)?),
        Divide => {
            let (a, b) = (arg(0)?, arg(1)?);
            if nullish(&a) || nullish(&b) {
                return Ok(Some(Bson::Null));
            }
            let (Some(Ok(x)), Some(Ok(y))) = (a.as_ref().and_then(Num::of), b.as_ref().and_then(Num::of)) else {
                return Err(type_error(format!(
                    "$divide only supports numeric types, not {} and {}",
                    type_of(&a),
                    type_of(&b)
                )));
            };
            let divisor = y.as_f64();
            if divisor == 0.0 {
                // MongoDB: Location16608.
                return Err(QueryError::bad_value("can't $divide by zero"));
            }
            Ok(Some(Bson::Double(x.as_f64() / divisor)))
        }
        Concat => {
            let mut out = String::new();
            for e in args {
                match e.eval_in(root, scope)? {
                    Some(Bson::String(s)) => out.push_str(&s),
                    v if nullish(&v) => return Ok(Some(Bson::Null)),
                    v => {
                        return Err(type_error(format!("$concat only supports strings, not {}", type_of(&v))));
                    }
                }
            }
            Ok(Some(Bson::String(out)))
        }
        ToUpper | ToLower => {
            let s = coerce_to_string(arg(0)?)?;
            // MongoDB changes case byte-wise in the ASCII range only.
            Ok(Some(Bson::String(if op == ToUpper { s.to_ascii_uppercase() } else { s.to_ascii_lowercase() })))
        }
        Cond => {
            let pick = if truthy(arg(0)?.as_ref()) { 1 } else { 2 };
            arg(pick)
        }
        IfNull => {
            for e in &args[..args.len().saturating_sub(1)] {
                let v = e.eval_in(root, scope)?;
                if !nullish(&v) {
                    return Ok(v);
                }
            }
            arg(args.len().saturating_sub(1))
        }
        Eq => yes(compare_opt(&arg(0)?, &arg(1)?) == Ordering::Equal),
        Ne => yes(compare_opt(&arg(0)?, &arg(1)?) != Ordering::Equal),
        Gt => yes(compare_opt(&arg(0)?, &arg(1)?) == Ordering::Greater),
        Gte => yes(compare_opt(&arg(0)?, &arg(1)?) != Ordering::Less),
        Lt => yes(compare_opt(&arg(0)?, &arg(1)?) == Ordering::Less),
        Lte => yes(compare_opt(&arg(0)?, &arg(1)?) != Ordering::Greater),
        And => {
            for e in args {
                if !truthy(e.eval_in(root, scope)?.as_ref()) {
                    return yes(false);
                }
            }
            yes(true)
        }
        Or => {
            for e in args {
                if truthy(e.eval_in(root, scope)?.as_ref()) {
                    return yes(true);
                }
            }
            yes(false)
        }
        Not => yes(!truthy(arg(0)?.as_ref())),
        Size => match arg(0)? {
            Some(Bson::Array(a)) => Ok(Some(size_value(a.len()))),
            // MongoDB: Location17124.
            v => Err(type_error(format!("The argument to $size must be an array, but was of type: {}", type_of(&v)))),
        },
        ArrayElemAt => array_elem_at(arg(0)?, arg(1)?),
        In => {
            let needle = arg(0)?.unwrap_or(Bson::Undefined);
            match arg(1)? {
                Some(Bson::Array(a)) => yes(a.iter().any(|e| values_equal(e, &needle))),
                // MongoDB: Location40081.
                v => Err(type_error(format!("$in requires an array as a second argument, found: {}", type_of(&v)))),
            }
        }
        Type => Ok(Some(Bson::String(type_of(&arg(0)?).to_string()))),
        Mod => convert::modulo(arg(0)?, arg(1)?),
        Substr => convert::substr(arg(0)?, arg(1)?, arg(2)?),
        ToString => convert::to_string(arg(0)?),
        ToInt => convert::to_int(arg(0)?),
        Year => convert::date_part(convert::DatePart::Year, arg(0)?, "$year"),
        Month => convert::date_part(convert::DatePart::Month, arg(0)?, "$month"),
        DayOfMonth => convert::date_part(convert::DatePart::DayOfMonth, arg(0)?, "$dayOfMonth"),
        DateToString => convert::date_to_string(arg(0)?, arg(1)?, arg(2)?),
        Switch => {
            let pairs = args.len() / 2;
            for i in 0..pairs {
                if truthy(args[2 * i].eval_in(root, scope)?.as_ref()) {
                    return args[2 * i + 1].eval_in(root, scope);
                }
            }
            if args.len() % 2 == 1 {
                return arg(args.len() - 1);
            }
            // MongoDB: Location40066.
            Err(QueryError::bad_value(
                "$switch could not find a matching branch for an input, and no default was specified.",
            ))
        }
    }
}

fn size_value(n: usize) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n as i64), Bson::Int32)
}

fn type_of(v: &Option<Bson>) -> &'static str {
    v.as_ref().map_or("missing", type_name)
}

/// Operand type errors; MongoDB gives each its own LocationNNNNN code, which proto lacks.
fn type_error(message: String) -> QueryError {
    QueryError::type_mismatch(message)
}

fn decimal_unsupported() -> QueryError {
    QueryError::new(ErrorCode::NotImplemented, "arithmetic on Decimal128 values is not supported yet")
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Num {
    I32(i32),
    I64(i64),
    F64(f64),
}

impl Num {
    /// `None` for non-numbers; `Some(Err)` for Decimal128, which we cannot compute with.
    pub(crate) fn of(v: &Bson) -> Option<Result<Num>> {
        match v {
            Bson::Int32(i) => Some(Ok(Num::I32(*i))),
            Bson::Int64(i) => Some(Ok(Num::I64(*i))),
            Bson::Double(f) => Some(Ok(Num::F64(*f))),
            Bson::Decimal128(_) => Some(Err(decimal_unsupported())),
            _ => None,
        }
    }

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Num::I32(i) => f64::from(i),
            Num::I64(i) => i as f64,
            Num::F64(f) => f,
        }
    }

    fn combine(self, other: Num, i64_op: fn(i64, i64) -> Option<i64>, f64_op: fn(f64, f64) -> f64) -> Num {
        match (self, other) {
            (Num::F64(_), _) | (_, Num::F64(_)) => Num::F64(f64_op(self.as_f64(), other.as_f64())),
            (Num::I32(a), Num::I32(b)) => match i64_op(i64::from(a), i64::from(b)) {
                Some(r) => i32::try_from(r).map_or(Num::I64(r), Num::I32),
                None => Num::F64(f64_op(self.as_f64(), other.as_f64())),
            },
            (a, b) => {
                let (x, y) = (a.as_i64(), b.as_i64());
                i64_op(x, y).map_or_else(|| Num::F64(f64_op(a.as_f64(), b.as_f64())), Num::I64)
            }
        }
    }

    fn as_i64(self) -> i64 {
        match self {
            Num::I32(i) => i64::from(i),
            Num::I64(i) => i,
            // Only called on integer variants.
            Num::F64(f) => f as i64,
        }
    }

    pub(crate) fn add(self, other: Num) -> Num {
        self.combine(other, i64::checked_add, |a, b| a + b)
    }

    fn sub(self, other: Num) -> Num {
        self.combine(other, i64::checked_sub, |a, b| a - b)
    }

    fn mul(self, other: Num) -> Num {
        self.combine(other, i64::checked_mul, |a, b| a * b)
    }
}

impl From<Num> for Bson {
    fn from(n: Num) -> Bson {
        match n {
            Num::I32(i) => Bson::Int32(i),
            Num::I64(i) => Bson::Int64(i),
            Num::F64(f) => Bson::Double(f),
        }
    }
}

fn add(args: &[Expr], root: &Document, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
    let mut sum = Num::I32(0);
    let mut date: Option<i64> = None;
    for e in args {
        let v = e.eval_in(root, scope)?;
        match &v {
            _ if nullish(&v) => return Ok(Some(Bson::Null)),
            Some(Bson::DateTime(d)) => {
                if date.is_some() {
                    // MongoDB: Location16612.
                    return Err(type_error("only one date allowed in an $add expression".to_string()));
                }
                date = Some(d.timestamp_millis());
            }
            Some(other) => match Num::of(other) {
                Some(n) => sum = sum.add(n?),
                None => {
                    return Err(type_error(format!(
                        "$add only supports numeric or date types, not {}",
                        type_name(other)
                    )));
                }
            },
            None => return Ok(Some(Bson::Null)),
        }
    }
    Ok(Some(match date {
        Some(ms) => Bson::DateTime(DateTime::from_millis(ms.saturating_add(round_millis(sum)))),
        None => sum.into(),
    }))
}

fn round_millis(n: Num) -> i64 {
    match n {
        Num::F64(f) => f.round() as i64,
        other => other.as_i64(),
    }
}

fn subtract(a: Option<Bson>, b: Option<Bson>) -> Result<Option<Bson>> {
    if nullish(&a) || nullish(&b) {
        return Ok(Some(Bson::Null));
    }
    match (&a, &b) {
        (Some(Bson::DateTime(x)), Some(Bson::DateTime(y))) => {
            Ok(Some(Bson::Int64(x.timestamp_millis().saturating_sub(y.timestamp_millis()))))
        }
        (Some(Bson::DateTime(x)), Some(n)) if Num::of(n).is_some() => {
            let n = Num::of(n).unwrap_or(Ok(Num::I32(0)))?;
            Ok(Some(Bson::DateTime(DateTime::from_millis(x.timestamp_millis().saturating_sub(round_millis(n))))))
        }
        (Some(x), Some(y)) => match (Num::of(x), Num::of(y)) {
            (Some(p), Some(q)) => Ok(Some(p?.sub(q?).into())),
            // MongoDB: Location16556.
            _ => Err(type_error(format!("can't $subtract {} from {}", type_name(y), type_name(x)))),
        },
        _ => Ok(Some(Bson::Null)),
    }
}

fn array_elem_at(array: Option<Bson>, index: Option<Bson>) -> Result<Option<Bson>> {
    if nullish(&array) || nullish(&index) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(a)) = array else {
        // MongoDB: Location28689.
        return Err(type_error(format!("$arrayElemAt's first argument must be an array, but is {}", type_of(&array))));
    };
    let idx = match &index {
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) if i32::try_from(*i).is_ok() => *i,
        Some(Bson::Double(f)) if f.fract() == 0.0 && *f >= f64::from(i32::MIN) && *f <= f64::from(i32::MAX) => {
            *f as i64
        }
        Some(v @ (Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            // MongoDB: Location28691.
            return Err(QueryError::bad_value(format!(
                "$arrayElemAt's second argument must be representable as a 32-bit integer: {}",
                crate::display::value(v)
            )));
        }
        _ => {
            // MongoDB: Location28690.
            return Err(type_error(format!(
                "$arrayElemAt's second argument must be a numeric value, but is {}",
                type_of(&index)
            )));
        }
    };
    let len = a.len() as i64;
    let at = if idx < 0 { len + idx } else { idx };
    Ok(usize::try_from(at).ok().and_then(|i| a.get(i)).cloned())
}

/// MongoDB's `coerceToString` for `$toUpper`/`$toLower`: null and missing become "".
fn coerce_to_string(v: Option<Bson>) -> Result<String> {
    match v {
        None | Some(Bson::Null | Bson::Undefined) => Ok(String::new()),
        Some(Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s)) => Ok(s),
        Some(Bson::Int32(i)) => Ok(i.to_string()),
        Some(Bson::Int64(i)) => Ok(i.to_string()),
        Some(Bson::Double(f)) => Ok(f.to_string()),
        Some(Bson::DateTime(d)) => {
            d.try_to_rfc3339_string().map_err(|_| QueryError::bad_value("date out of range for string conversion"))
        }
        Some(other) => {
            // MongoDB: Location16007.
            Err(type_error(format!("can't convert from BSON type {} to String", type_name(&other))))
        }
    }
}
