//! The one table of operator names ([`Operator`]: name, positional arity, the module that
//! evaluates it), and the core operators evaluated here (conversions, `$mod`, `$substr` and the
//! first date operators in `convert`; every other family in `ops`), with MongoDB's null, type
//! and overflow rules.
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
use super::ops;
use crate::display::type_name;
use crate::error::{QueryError, Result};
use crate::order::{compare_values, values_equal};

/// Defines [`Operator`] from one table: each operator's name, how many positional arguments it
/// takes, and which module evaluates it.
macro_rules! operator_table {
    ($($variant:ident = $name:literal, $arity:expr, $family:ident;)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Operator { $($variant),* }

        impl Operator {
            pub(crate) fn from_name(name: &str) -> Option<Operator> {
                match name {
                    // MongoDB's older spelling of `$substrBytes`.
                    "$substr" => Some(Operator::Substr),
                    $($name => Some(Operator::$variant),)*
                    _ => None,
                }
            }

            pub(crate) fn name(self) -> &'static str {
                match self { $(Operator::$variant => $name),* }
            }

            fn arity(self) -> Arity {
                match self { $(Operator::$variant => $arity),* }
            }

            pub(crate) fn family(self) -> Family {
                match self { $(Operator::$variant => Family::$family),* }
            }
        }
    };
}

/// How many positional arguments an operator takes (object forms are checked where parsed).
#[derive(Debug, Clone, Copy)]
enum Arity {
    Any,
    Exact(usize),
    Between(usize, usize),
    AtLeast(usize),
    /// Only an object form (`{$trim: {input, chars}}`), normalised by `ops::parse_named`.
    Named,
}

/// Which module evaluates an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// This module and `convert`.
    Core,
    Math,
    Misc,
    Strings,
    Arrays,
    Sets,
    Types,
    Dates,
}

use Arity::{Any, AtLeast, Between, Exact, Named};

operator_table! {
    Add = "$add", Any, Core;
    Subtract = "$subtract", Exact(2), Core;
    Multiply = "$multiply", Any, Core;
    Divide = "$divide", Exact(2), Core;
    Concat = "$concat", Any, Core;
    ToUpper = "$toUpper", Exact(1), Core;
    ToLower = "$toLower", Exact(1), Core;
    Cond = "$cond", Exact(3), Core;
    IfNull = "$ifNull", AtLeast(2), Core;
    Eq = "$eq", Exact(2), Core;
    Ne = "$ne", Exact(2), Core;
    Gt = "$gt", Exact(2), Core;
    Gte = "$gte", Exact(2), Core;
    Lt = "$lt", Exact(2), Core;
    Lte = "$lte", Exact(2), Core;
    And = "$and", Any, Core;
    Or = "$or", Any, Core;
    Not = "$not", Exact(1), Core;
    Size = "$size", Exact(1), Core;
    ArrayElemAt = "$arrayElemAt", Exact(2), Arrays;
    In = "$in", Exact(2), Core;
    Type = "$type", Exact(1), Core;
    Mod = "$mod", Exact(2), Core;
    Substr = "$substrBytes", Exact(3), Core;
    ToString = "$toString", Exact(1), Core;
    ToInt = "$toInt", Exact(1), Core;
    Year = "$year", Exact(1), Core;
    Month = "$month", Exact(1), Core;
    DayOfMonth = "$dayOfMonth", Exact(1), Core;
    // `{$dateToString: {date, format, onNull, timezone}}`: arguments `[date, format, onNull]`.
    DateToString = "$dateToString", Named, Core;
    // `{$switch: {branches: [{case, then}], default}}`: arguments `case, then, …, [default]`.
    Switch = "$switch", Named, Core;

    Abs = "$abs", Exact(1), Math;
    Ceil = "$ceil", Exact(1), Math;
    Floor = "$floor", Exact(1), Math;
    Trunc = "$trunc", Between(1, 2), Math;
    Round = "$round", Between(1, 2), Math;
    Sqrt = "$sqrt", Exact(1), Math;
    Pow = "$pow", Exact(2), Math;
    Exp = "$exp", Exact(1), Math;
    Ln = "$ln", Exact(1), Math;
    Log = "$log", Exact(2), Math;
    Log10 = "$log10", Exact(1), Math;
    Sin = "$sin", Exact(1), Math;
    Cos = "$cos", Exact(1), Math;
    Tan = "$tan", Exact(1), Math;
    Asin = "$asin", Exact(1), Math;
    Acos = "$acos", Exact(1), Math;
    Atan = "$atan", Exact(1), Math;
    Atan2 = "$atan2", Exact(2), Math;
    Sinh = "$sinh", Exact(1), Math;
    Cosh = "$cosh", Exact(1), Math;
    Tanh = "$tanh", Exact(1), Math;
    Asinh = "$asinh", Exact(1), Math;
    Acosh = "$acosh", Exact(1), Math;
    Atanh = "$atanh", Exact(1), Math;
    DegreesToRadians = "$degreesToRadians", Exact(1), Math;
    RadiansToDegrees = "$radiansToDegrees", Exact(1), Math;

    Cmp = "$cmp", Exact(2), Misc;
    Max = "$max", Any, Misc;
    Min = "$min", Any, Misc;
    Sum = "$sum", Any, Misc;
    Avg = "$avg", Any, Misc;
    MergeObjects = "$mergeObjects", Any, Misc;
    // `{$getField: {field, input}}` or `{$getField: field}`: arguments `[field, input]`.
    GetField = "$getField", Named, Misc;
    SetField = "$setField", Named, Misc;
    UnsetField = "$unsetField", Named, Misc;
    IsNumber = "$isNumber", Exact(1), Misc;
    IsArray = "$isArray", Exact(1), Misc;
    // `{$rand: {}}`: no arguments.
    Rand = "$rand", Named, Misc;
    BitAnd = "$bitAnd", Any, Misc;
    BitOr = "$bitOr", Any, Misc;
    BitXor = "$bitXor", Any, Misc;
    BitNot = "$bitNot", Exact(1), Misc;
    BsonSize = "$bsonSize", Exact(1), Misc;
    BinarySize = "$binarySize", Exact(1), Misc;
    TsSecond = "$tsSecond", Exact(1), Misc;
    TsIncrement = "$tsIncrement", Exact(1), Misc;

    StrLenBytes = "$strLenBytes", Exact(1), Strings;
    StrLenCP = "$strLenCP", Exact(1), Strings;
    SubstrCP = "$substrCP", Exact(3), Strings;
    IndexOfBytes = "$indexOfBytes", Between(2, 4), Strings;
    IndexOfCP = "$indexOfCP", Between(2, 4), Strings;
    Split = "$split", Exact(2), Strings;
    Trim = "$trim", Named, Strings;
    LTrim = "$ltrim", Named, Strings;
    RTrim = "$rtrim", Named, Strings;
    StrCaseCmp = "$strcasecmp", Exact(2), Strings;
    ReplaceOne = "$replaceOne", Named, Strings;
    ReplaceAll = "$replaceAll", Named, Strings;
    RegexMatch = "$regexMatch", Named, Strings;
    RegexFind = "$regexFind", Named, Strings;
    RegexFindAll = "$regexFindAll", Named, Strings;

    ConcatArrays = "$concatArrays", Any, Arrays;
    First = "$first", Exact(1), Arrays;
    Last = "$last", Exact(1), Arrays;
    FirstN = "$firstN", Named, Arrays;
    LastN = "$lastN", Named, Arrays;
    MaxN = "$maxN", Named, Arrays;
    MinN = "$minN", Named, Arrays;
    IndexOfArray = "$indexOfArray", Between(2, 4), Arrays;
    Range = "$range", Between(2, 3), Arrays;
    ReverseArray = "$reverseArray", Exact(1), Arrays;
    Slice = "$slice", Between(2, 3), Arrays;
    Zip = "$zip", Named, Arrays;
    ArrayToObject = "$arrayToObject", Exact(1), Arrays;
    ObjectToArray = "$objectToArray", Exact(1), Arrays;
    SortArray = "$sortArray", Named, Arrays;
    AllElementsTrue = "$allElementsTrue", Exact(1), Arrays;
    AnyElementTrue = "$anyElementTrue", Exact(1), Arrays;

    SetUnion = "$setUnion", Any, Sets;
    SetIntersection = "$setIntersection", Any, Sets;
    SetDifference = "$setDifference", Exact(2), Sets;
    SetEquals = "$setEquals", AtLeast(2), Sets;
    SetIsSubset = "$setIsSubset", Exact(2), Sets;

    // `{$convert: {input, to, onError, onNull}}`: arguments in that order.
    Convert = "$convert", Named, Types;
    ToBool = "$toBool", Exact(1), Types;
    ToDouble = "$toDouble", Exact(1), Types;
    ToLong = "$toLong", Exact(1), Types;
    ToDate = "$toDate", Exact(1), Types;
    ToDecimal = "$toDecimal", Exact(1), Types;
    ToObjectId = "$toObjectId", Exact(1), Types;

    // One date, or `{date, timezone}`: arguments `[date, timezone?]`.
    Hour = "$hour", Exact(1), Dates;
    Minute = "$minute", Exact(1), Dates;
    Second = "$second", Exact(1), Dates;
    Millisecond = "$millisecond", Exact(1), Dates;
    DayOfWeek = "$dayOfWeek", Exact(1), Dates;
    DayOfYear = "$dayOfYear", Exact(1), Dates;
    Week = "$week", Exact(1), Dates;
    IsoWeek = "$isoWeek", Exact(1), Dates;
    IsoWeekYear = "$isoWeekYear", Exact(1), Dates;
    IsoDayOfWeek = "$isoDayOfWeek", Exact(1), Dates;
    DateAdd = "$dateAdd", Named, Dates;
    DateSubtract = "$dateSubtract", Named, Dates;
    DateDiff = "$dateDiff", Named, Dates;
    DateTrunc = "$dateTrunc", Named, Dates;
    DateFromParts = "$dateFromParts", Named, Dates;
    DateToParts = "$dateToParts", Named, Dates;
    DateFromString = "$dateFromString", Named, Dates;
}

pub(crate) fn check_arity(op: Operator, n: usize) -> Result<()> {
    let name = op.name();
    match op.arity() {
        Any | Named => Ok(()),
        Exact(k) if n == k => Ok(()),
        // MongoDB: Location16020.
        Exact(k) => {
            Err(QueryError::bad_value(format!("Expression {name} takes exactly {k} arguments. {n} were passed in.")))
        }
        AtLeast(k) if n >= k => Ok(()),
        AtLeast(_) if op == Operator::IfNull => {
            Err(QueryError::bad_value(format!("$ifNull needs at least two arguments, had: {n}")))
        }
        // MongoDB: Location16020.
        AtLeast(k) => Err(QueryError::bad_value(format!(
            "Expression {name} takes at least {k} arguments, but {n} were passed in."
        ))),
        Between(lo, hi) if (lo..=hi).contains(&n) => Ok(()),
        // MongoDB: Location28667.
        Between(lo, hi) => Err(QueryError::bad_value(format!(
            "Expression {name} takes at least {lo} arguments, and at most {hi}, but {n} were passed in."
        ))),
    }
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

pub(crate) fn nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null | Bson::Undefined))
}

/// Missing compares as `undefined` does: below null, as in MongoDB's `Value::compare`.
pub(crate) fn compare_opt(a: &Option<Bson>, b: &Option<Bson>) -> Ordering {
    compare_values(a.as_ref().unwrap_or(&Bson::Undefined), b.as_ref().unwrap_or(&Bson::Undefined))
}

pub(crate) fn eval(op: Operator, args: &[Expr], root: &Document, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
    use Operator::*;
    let arg = |i: usize| -> Result<Option<Bson>> { args.get(i).map_or(Ok(None), |e| e.eval_in(root, scope)) };
    let yes = |b: bool| Ok(Some(Bson::Boolean(b)));
    let family = match op.family() {
        Family::Core => None,
        Family::Math => Some(ops::math::eval as ops::EvalFn),
        Family::Misc => Some(ops::misc::eval as ops::EvalFn),
        Family::Strings => Some(ops::strings::eval as ops::EvalFn),
        Family::Arrays => Some(ops::arrays::eval as ops::EvalFn),
        Family::Sets => Some(ops::sets::eval as ops::EvalFn),
        Family::Types => Some(ops::types::eval as ops::EvalFn),
        Family::Dates => Some(ops::dates::eval as ops::EvalFn),
    };
    if let Some(eval_family) = family {
        return eval_family(op, &ops::Args::new(args, root, scope));
    }
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
        Year => convert::date_part(convert::DatePart::Year, arg(0)?, arg(1)?, "$year"),
        Month => convert::date_part(convert::DatePart::Month, arg(0)?, arg(1)?, "$month"),
        DayOfMonth => convert::date_part(convert::DatePart::DayOfMonth, arg(0)?, arg(1)?, "$dayOfMonth"),
        DateToString => convert::date_to_string(arg(0)?, arg(1)?, arg(2)?, arg(3)?),
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
        other => Err(QueryError::new(ErrorCode::InternalError, format!("{} is not a core operator", other.name()))),
    }
}

pub(crate) fn size_value(n: usize) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n as i64), Bson::Int32)
}

pub(crate) fn type_of(v: &Option<Bson>) -> &'static str {
    v.as_ref().map_or("missing", type_name)
}

/// Operand type errors; MongoDB gives each its own LocationNNNNN code, which proto lacks.
fn type_error(message: String) -> QueryError {
    QueryError::type_mismatch(message)
}

pub(crate) fn decimal_unsupported() -> QueryError {
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

    pub(crate) fn as_i64(self) -> i64 {
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

    pub(crate) fn sub(self, other: Num) -> Num {
        self.combine(other, i64::checked_sub, |a, b| a - b)
    }

    pub(crate) fn mul(self, other: Num) -> Num {
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

/// MongoDB's `coerceToString` for `$toUpper`/`$toLower`: null and missing become "".
pub(crate) fn coerce_to_string(v: Option<Bson>) -> Result<String> {
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
