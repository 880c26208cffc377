//! The expression operators beyond the core set in `operators`, one module per family: `math`
//! (rounding, powers, logarithms, trigonometry), `misc` (`$cmp`, `$sum`…, fields, `$rand`),
//! `strings`, `arrays`, `sets`, `types` (`$convert` and `$toX`) and `dates`.
//!
//! Owns: the object forms of these operators (`{$trim: {input, chars}}`), normalised at parse
//! time to positional arguments in a fixed order, with an absent optional argument standing as
//! `$$REMOVE` (evaluates to missing); and [`Args`], the lazy view of an operator's arguments
//! each family evaluates from. Arguments are evaluated only when a family asks for them, so
//! `onError`/`onNull` and the like cost nothing unless used.
//!
//! The names themselves live in `operators::Operator` (the one list of operator names).

pub(crate) mod arrays;
mod date_parse;
pub(crate) mod dates;
pub(crate) mod math;
pub(crate) mod misc;
pub(crate) mod sets;
pub(crate) mod strings;
pub(crate) mod types;

use bson::{Bson, Document};

use super::expr::{Expr, Scope};
pub(crate) use super::operators::nullish;
use super::operators::{Num, Operator, type_of};
use crate::error::{QueryError, Result};

/// How a family evaluates one of its operators.
pub(crate) type EvalFn = fn(Operator, &Args<'_, '_>) -> Result<Option<Bson>>;

/// An operator's arguments, evaluated on demand against one document.
pub(crate) struct Args<'a, 's> {
    exprs: &'a [Expr],
    root: &'a Document,
    scope: Option<&'a Scope<'s>>,
}

impl<'a, 's> Args<'a, 's> {
    pub(crate) fn new(exprs: &'a [Expr], root: &'a Document, scope: Option<&'a Scope<'s>>) -> Self {
        Self { exprs, root, scope }
    }

    /// Argument `i`, `None` when missing or absent.
    pub(crate) fn get(&self, i: usize) -> Result<Option<Bson>> {
        self.exprs.get(i).map_or(Ok(None), |e| e.eval_in(self.root, self.scope))
    }

    pub(crate) fn len(&self) -> usize {
        self.exprs.len()
    }

    /// Whether argument `i` was left out of an object form (not the same as evaluating to
    /// missing: `onError: "$nope"` is present and gives missing).
    pub(crate) fn is_absent(&self, i: usize) -> bool {
        matches!(self.exprs.get(i), None | Some(Expr::Remove))
    }

    /// Every argument, in order.
    pub(crate) fn all(&self) -> Result<Vec<Option<Bson>>> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

pub(crate) fn type_error(message: String) -> QueryError {
    QueryError::type_mismatch(message)
}

/// A number argument: `Ok(None)` for null/missing, a type error naming `op` otherwise.
pub(crate) fn number(v: &Option<Bson>, what: impl Fn(&str) -> String) -> Result<Option<Num>> {
    if nullish(v) {
        return Ok(None);
    }
    match v.as_ref().and_then(Num::of) {
        Some(n) => Ok(Some(n?)),
        None => Err(type_error(what(type_of(v)))),
    }
}

/// An integral number (int, long, or a double without a fraction) as i64.
pub(crate) fn integral(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(f) if f.fract() == 0.0 && *f >= -9.2e18 && *f <= 9.2e18 => Some(*f as i64),
        Bson::Decimal128(d) => d.to_string().parse::<i64>().ok(),
        _ => None,
    }
}

/// The named fields of an object form: required ones first, then optional ones, in order.
struct Spec {
    required: &'static [&'static str],
    optional: &'static [&'static str],
}

fn spec(op: Operator) -> Option<Spec> {
    use Operator::*;
    let s = |required, optional| Some(Spec { required, optional });
    match op {
        GetField => s(&["field"], &["input"]),
        SetField => s(&["field", "input", "value"], &[]),
        UnsetField => s(&["field", "input"], &[]),
        Trim | LTrim | RTrim => s(&["input"], &["chars"]),
        ReplaceOne | ReplaceAll => s(&["input", "find", "replacement"], &[]),
        RegexMatch | RegexFind | RegexFindAll => s(&["input", "regex"], &["options"]),
        FirstN | LastN | MaxN | MinN => s(&["input", "n"], &[]),
        SortArray => s(&["input", "sortBy"], &[]),
        Zip => s(&["inputs"], &["useLongestLength", "defaults"]),
        Convert => s(&["input", "to"], &["onError", "onNull"]),
        Hour | Minute | Second | Millisecond | DayOfWeek | DayOfYear | Week | IsoWeek | IsoWeekYear | IsoDayOfWeek => {
            s(&["date"], &["timezone"])
        }
        DateAdd | DateSubtract => s(&["startDate", "unit", "amount"], &["timezone"]),
        DateDiff => s(&["startDate", "endDate", "unit"], &["timezone", "startOfWeek"]),
        DateTrunc => s(&["date", "unit"], &["binSize", "timezone", "startOfWeek"]),
        DateFromParts => s(&[], &dates::FROM_PARTS_FIELDS),
        DateToParts => s(&["date"], &["timezone", "iso8601"]),
        DateFromString => s(&["dateString"], &["format", "timezone", "onError", "onNull"]),
        _ => None,
    }
}

/// The positional arguments of an operator written in its object form, or `None` when `op`
/// has no object form or (for the date parts, which take either) `arg` is not one.
pub(crate) fn parse_named(op: Operator, arg: &Bson) -> Result<Option<Vec<Expr>>> {
    let name = op.name();
    if op == Operator::Rand {
        return match arg {
            Bson::Document(d) if d.is_empty() => Ok(Some(Vec::new())),
            Bson::Array(a) if a.is_empty() => Ok(Some(Vec::new())),
            // MongoDB: Location10065.
            _ => Err(QueryError::bad_value("$rand does not currently accept arguments")),
        };
    }
    let Some(spec) = spec(op) else { return Ok(None) };
    use Operator::*;
    let date_part = matches!(
        op,
        Hour | Minute | Second | Millisecond | DayOfWeek | DayOfYear | Week | IsoWeek | IsoWeekYear | IsoDayOfWeek
    );
    let named = match arg {
        // `{$getField: {$literal: "$price"}}`: the same, named by an expression (how a `$` name
        // is read).
        Bson::Document(d) if op == GetField && !d.contains_key("field") && d.keys().all(|k| k.starts_with('$')) => {
            return Ok(Some(vec![Expr::parse(arg)?, Expr::Root(Vec::new())]));
        }
        Bson::Document(d) if !date_part || d.contains_key("date") => d,
        // Positional form of the date parts: `{$hour: "$d"}` or `{$hour: ["$d"]}`.
        _ if date_part => return Ok(None),
        // `{$getField: "name"}`: the field of the current document.
        Bson::String(_) if op == GetField => {
            return Ok(Some(vec![Expr::Literal(arg.clone()), Expr::Root(Vec::new())]));
        }
        _ => {
            return Err(QueryError::failed_to_parse(format!("{name} only supports an object as its argument")));
        }
    };
    if let Some(k) = named.keys().find(|k| !spec.required.contains(&k.as_str()) && !spec.optional.contains(&k.as_str()))
    {
        return Err(QueryError::failed_to_parse(format!("{name} found an unknown argument: {k}")));
    }
    let mut out = Vec::with_capacity(spec.required.len() + spec.optional.len());
    for field in spec.required {
        let Some(v) = named.get(*field) else {
            return Err(QueryError::failed_to_parse(format!("{name} requires '{field}' to be specified")));
        };
        out.push(Expr::parse(v)?);
    }
    for field in spec.optional {
        out.push(match named.get(*field) {
            Some(v) => Expr::parse(v)?,
            // `$getField` without `input` reads the current document.
            None if op == Operator::GetField => Expr::Root(Vec::new()),
            None => Expr::Remove,
        });
    }
    if matches!(op, RegexMatch | RegexFind | RegexFindAll) {
        strings::check_constant_regex(&out)?;
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests;
