//! String operators: lengths and substrings in bytes or code points (`$strLenBytes $strLenCP
//! $substrCP $indexOfBytes $indexOfCP`), `$split`, `$trim $ltrim $rtrim`, `$strcasecmp`,
//! `$replaceOne $replaceAll`, and the regular-expression operators `$regexMatch $regexFind
//! $regexFindAll`.
//!
//! Patterns go through the filter language's translator (`filter::regex`), so they accept and
//! refuse exactly what `$regex` does, and match in linear time. Offsets MongoDB reports in code
//! points (`$indexOfCP`, `$regexFind`'s `idx`) are counted in `char`s.

use bson::{Bson, Document};

use super::{Args, integral, nullish, type_error};
use crate::aggregate::expr::Expr;
use crate::aggregate::operators::{Operator, coerce_to_string, type_of};
use crate::error::{QueryError, Result};
use crate::filter::regex::Pattern;

/// What `$trim` removes when no `chars` are given (MongoDB's list of whitespace).
const WHITESPACE: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{0B}', '\u{0C}', '\r', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}',
    '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200A}', '\u{2028}',
    '\u{2029}', '\u{202F}', '\u{205F}', '\u{3000}',
];

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    let name = op.name();
    match op {
        StrLenBytes | StrLenCP => match args.get(0)? {
            Some(Bson::String(s)) => {
                let n = if op == StrLenBytes { s.len() } else { s.chars().count() };
                Ok(Some(Bson::Int32(i32::try_from(n).unwrap_or(i32::MAX))))
            }
            // MongoDB: Location34473 / 34471.
            v => Err(type_error(format!("{name} requires a string argument, found: {}", type_of(&v)))),
        },
        SubstrCP => substr_cp(args),
        IndexOfBytes | IndexOfCP => index_of(op, args),
        Split => {
            let (s, sep) = (args.get(0)?, args.get(1)?);
            if nullish(&s) {
                return Ok(Some(Bson::Null));
            }
            let Some(Bson::String(s)) = s else {
                // MongoDB: Location40085.
                return Err(type_error(format!(
                    "$split requires an expression that evaluates to a string as a first argument, found: {}",
                    type_of(&s)
                )));
            };
            match sep {
                Some(Bson::String(sep)) if sep.is_empty() => {
                    // MongoDB: Location40087.
                    Err(QueryError::bad_value("$split requires a non-empty separator"))
                }
                Some(Bson::String(sep)) => {
                    Ok(Some(Bson::Array(s.split(sep.as_str()).map(|p| Bson::String(p.to_owned())).collect())))
                }
                v if nullish(&v) => Ok(Some(Bson::Null)),
                // MongoDB: Location40086.
                v => Err(type_error(format!(
                    "$split requires an expression that evaluates to a string as a second argument, found: {}",
                    type_of(&v)
                ))),
            }
        }
        Trim | LTrim | RTrim => {
            let input = args.get(0)?;
            if nullish(&input) {
                return Ok(Some(Bson::Null));
            }
            let Some(Bson::String(s)) = input else {
                // MongoDB: Location50699.
                return Err(type_error(format!(
                    "{name} requires its input to be a string, got {} instead.",
                    type_of(&input)
                )));
            };
            let chars: Vec<char> = match args.get(1)? {
                None => WHITESPACE.to_vec(),
                Some(Bson::String(c)) => c.chars().collect(),
                Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                // MongoDB: Location50700.
                v => {
                    return Err(type_error(format!(
                        "{name} requires 'chars' to be a string, got {} instead.",
                        type_of(&v)
                    )));
                }
            };
            let out = match op {
                Trim => s.trim_matches(chars.as_slice()),
                LTrim => s.trim_start_matches(chars.as_slice()),
                _ => s.trim_end_matches(chars.as_slice()),
            };
            Ok(Some(Bson::String(out.to_owned())))
        }
        StrCaseCmp => {
            let a = coerce_to_string(args.get(0)?)?.to_ascii_lowercase();
            let b = coerce_to_string(args.get(1)?)?.to_ascii_lowercase();
            Ok(Some(Bson::Int32(match a.cmp(&b) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })))
        }
        ReplaceOne | ReplaceAll => {
            let mut parts = Vec::with_capacity(3);
            for (i, what) in ["input", "find", "replacement"].iter().enumerate() {
                match args.get(i)? {
                    Some(Bson::String(s)) => parts.push(Some(s)),
                    v if nullish(&v) => parts.push(None),
                    // MongoDB: Location51746 / 51745 / 51744.
                    v => {
                        return Err(type_error(format!(
                            "{name} requires that '{what}' be a string, found: {}",
                            crate::display::value(v.as_ref().unwrap_or(&Bson::Null))
                        )));
                    }
                }
            }
            let [Some(s), Some(find), Some(with)] = <[Option<String>; 3]>::try_from(parts).unwrap_or_default() else {
                return Ok(Some(Bson::Null));
            };
            Ok(Some(Bson::String(if op == ReplaceOne {
                s.replacen(find.as_str(), &with, 1)
            } else {
                s.replace(find.as_str(), &with)
            })))
        }
        RegexMatch | RegexFind | RegexFindAll => regex_op(op, args),
        other => Err(type_error(format!("{} is not a string operator", other.name()))),
    }
}

thread_local! {
    /// The pattern compiled last on this thread: a pipeline applies one constant pattern to
    /// every document, and compiling costs far more than matching.
    static LAST_PATTERN: std::cell::RefCell<Option<Pattern>> = const { std::cell::RefCell::new(None) };
}

fn compile(source: &str, options: &str) -> Result<Pattern> {
    let cached = LAST_PATTERN
        .with(|last| last.borrow().as_ref().filter(|p| p.source == source && p.options == options).cloned());
    if let Some(p) = cached {
        return Ok(p);
    }
    let p = Pattern::new(source, options)?;
    LAST_PATTERN.with(|last| *last.borrow_mut() = Some(p.clone()));
    Ok(p)
}

/// Refuses at parse time a constant pattern that cannot compile, as MongoDB does, so the error
/// does not wait for a first document.
pub(crate) fn check_constant_regex(args: &[Expr]) -> Result<()> {
    let (pattern, flags) = match args.get(1) {
        Some(Expr::Literal(Bson::String(p))) => (p.clone(), String::new()),
        Some(Expr::Literal(Bson::RegularExpression(r))) => (r.pattern.to_string(), r.options.to_string()),
        _ => return Ok(()),
    };
    let options = match args.get(2) {
        Some(Expr::Literal(Bson::String(o))) => o.clone(),
        None | Some(Expr::Remove) => flags,
        _ => return Ok(()),
    };
    compile(&pattern, &options).map(|_| ())
}

/// A non-negative integral argument, as MongoDB's string operators require.
fn index_arg(name: &str, what: &str, v: Option<Bson>) -> Result<usize> {
    let Some(v) = v.filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) else {
        return Err(type_error(format!("{name}: {what} must be a numeric type (is BSON type missing)")));
    };
    let Some(n) = integral(&v) else {
        if crate::order::number_as_f64(&v).is_some() {
            return Err(QueryError::bad_value(format!("{name}: {what} must be an integer")));
        }
        // MongoDB: Location34450 / 40096.
        return Err(type_error(format!(
            "{name}: {what} must be a numeric type (is BSON type {})",
            crate::display::type_name(&v)
        )));
    };
    // MongoDB: Location34451 / 40097.
    usize::try_from(n).map_err(|_| QueryError::bad_value(format!("{name}: {what} must be a non-negative integer")))
}

fn substr_cp(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let s = coerce_to_string(args.get(0)?)?;
    let start = index_arg("$substrCP", "starting index", args.get(1)?)?;
    let len = index_arg("$substrCP", "length", args.get(2)?)?;
    Ok(Some(Bson::String(s.chars().skip(start).take(len).collect())))
}

fn index_of(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let name = op.name();
    let s = args.get(0)?;
    if nullish(&s) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(s)) = s else {
        // MongoDB: Location40091.
        return Err(type_error(format!("{name} requires a string as the first argument, found: {}", type_of(&s))));
    };
    let Some(Bson::String(needle)) = args.get(1)? else {
        // MongoDB: Location40092.
        return Err(type_error(format!(
            "{name} requires a string as the second argument, found: {}",
            type_of(&args.get(1)?)
        )));
    };
    // Work in units of the operator: bytes, or code points mapped to byte offsets.
    let units: Vec<usize> = if op == Operator::IndexOfBytes {
        (0..=s.len()).collect()
    } else {
        s.char_indices().map(|(i, _)| i).chain(std::iter::once(s.len())).collect()
    };
    let count = units.len() - 1;
    let start = if args.len() > 2 { index_arg(name, "starting index", args.get(2)?)? } else { 0 };
    let end = if args.len() > 3 { index_arg(name, "ending index", args.get(3)?)?.min(count) } else { count };
    if start > end {
        return Ok(Some(Bson::Int32(-1)));
    }
    for (unit, &byte) in units.iter().enumerate().take(end + 1).skip(start) {
        let Some(rest) = s.get(byte..) else { continue };
        let Some(limit) = units.get(end).copied() else { break };
        if byte + needle.len() > limit {
            break;
        }
        if rest.as_bytes().starts_with(needle.as_bytes()) {
            return Ok(Some(Bson::Int32(i32::try_from(unit).unwrap_or(i32::MAX))));
        }
    }
    Ok(Some(Bson::Int32(-1)))
}

fn regex_op(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let name = op.name();
    let none = || match op {
        Operator::RegexMatch => Bson::Boolean(false),
        Operator::RegexFind => Bson::Null,
        _ => Bson::Array(Vec::new()),
    };
    let (pattern, mut options) = match args.get(1)? {
        Some(Bson::String(p)) => (p, None),
        Some(Bson::RegularExpression(r)) => (r.pattern.to_string(), Some(r.options.to_string())),
        v if nullish(&v) => return Ok(Some(none())),
        // MongoDB: Location51105.
        v => {
            return Err(type_error(format!(
                "{name} needs 'regex' to be of type string or regex, found {}",
                type_of(&v)
            )));
        }
    };
    match args.get(2)? {
        Some(Bson::String(o)) => {
            if options.as_ref().is_some_and(|r| !r.is_empty()) {
                // MongoDB: Location51107.
                return Err(QueryError::bad_value(format!(
                    "{name}: found regex options specified in both 'regex' and 'options' fields"
                )));
            }
            options = Some(o);
        }
        v if nullish(&v) => {}
        // MongoDB: Location51106.
        v => return Err(type_error(format!("{name} needs 'options' to be of type string, found {}", type_of(&v)))),
    }
    let input = match args.get(0)? {
        Some(Bson::String(s)) => s,
        v if nullish(&v) => return Ok(Some(none())),
        // MongoDB: Location51104.
        v => return Err(type_error(format!("{name} needs 'input' to be of type string, found {}", type_of(&v)))),
    };
    let pattern = compile(&pattern, options.as_deref().unwrap_or(""))?;
    let re = pattern.compiled();
    let found = |caps: regex::Captures<'_>| -> Bson {
        let whole = caps.get(0).map_or((0, ""), |m| (m.start(), m.as_str()));
        let idx = input[..whole.0].chars().count();
        let captures =
            caps.iter().skip(1).map(|c| c.map_or(Bson::Null, |m| Bson::String(m.as_str().to_owned()))).collect();
        let mut d = Document::new();
        d.insert("match", whole.1);
        d.insert("idx", Bson::Int32(i32::try_from(idx).unwrap_or(i32::MAX)));
        d.insert("captures", Bson::Array(captures));
        Bson::Document(d)
    };
    Ok(Some(match op {
        Operator::RegexMatch => Bson::Boolean(re.is_match(&input)),
        Operator::RegexFind => re.captures(&input).map_or(Bson::Null, found),
        _ => Bson::Array(re.captures_iter(&input).map(found).collect()),
    }))
}
