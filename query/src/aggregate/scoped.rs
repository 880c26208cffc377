//! Expressions that bind variables: `$let {vars, in}`, `$map {input, as, in}`,
//! `$filter {input, as, cond, limit}` (`as` defaults to `this`) and `$reduce {input,
//! initialValue, in}` (binds `this` and `value`), with MongoDB's null rules (a null or missing
//! `input` gives null) and codes.
//!
//! Must not: let a binding leak out of the expression that made it (scopes are a borrowed chain
//! that ends with the evaluation).

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::expr::{Expr, Scope};
use super::operators::truthy;
use crate::error::{QueryError, Result};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scoped {
    Let { vars: Vec<(String, Expr)>, body: Expr },
    Map { input: Expr, name: String, body: Expr },
    Filter { input: Expr, name: String, cond: Expr, limit: Option<Expr> },
    Reduce { input: Expr, initial: Expr, body: Expr },
}

fn object<'a>(op: &str, arg: &'a Bson) -> Result<&'a Document> {
    match arg {
        Bson::Document(d) => Ok(d),
        other => Err(QueryError::failed_to_parse(format!(
            "{op} only supports an object as its argument, got {}",
            crate::display::type_name(other)
        ))),
    }
}

/// A variable name a user may bind: a lowercase letter first, then letters, digits and `_`.
fn variable_name(op: &str, v: Option<&Bson>, default: &str) -> Result<String> {
    let name = match v {
        None => return Ok(default.to_owned()),
        Some(Bson::String(s)) => s.clone(),
        Some(other) => {
            return Err(QueryError::failed_to_parse(format!("{op}: 'as' must be a string, got {other}")));
        }
    };
    let mut chars = name.chars();
    let ok =
        chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(QueryError::failed_to_parse(format!(
            "'{name}' starts with an invalid character for a user variable name"
        )));
    }
    Ok(name)
}

fn check_keys(op: &str, d: &Document, allowed: &[&str]) -> Result<()> {
    match d.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(QueryError::failed_to_parse(format!("Unrecognized parameter to {op}: {k}"))),
        None => Ok(()),
    }
}

/// The scoped expression `name` denotes, if it is one.
pub(crate) fn parse(name: &str, arg: &Bson) -> Result<Option<Scoped>> {
    Ok(Some(match name {
        "$let" => {
            let d = object(name, arg)?;
            check_keys(name, d, &["vars", "in"])?;
            let (Some(Bson::Document(vars)), Some(body)) = (d.get("vars"), d.get("in")) else {
                return Err(QueryError::failed_to_parse("$let requires 'vars' (an object) and 'in'"));
            };
            let vars = vars
                .iter()
                .map(|(k, v)| Ok((variable_name(name, Some(&Bson::String(k.clone())), "")?, Expr::parse(v)?)))
                .collect::<Result<Vec<_>>>()?;
            Scoped::Let { vars, body: Expr::parse(body)? }
        }
        "$map" => {
            let d = object(name, arg)?;
            check_keys(name, d, &["input", "as", "in"])?;
            let (Some(input), Some(body)) = (d.get("input"), d.get("in")) else {
                return Err(QueryError::failed_to_parse("$map requires 'input' and 'in'"));
            };
            Scoped::Map {
                input: Expr::parse(input)?,
                name: variable_name(name, d.get("as"), "this")?,
                body: Expr::parse(body)?,
            }
        }
        "$filter" => {
            let d = object(name, arg)?;
            check_keys(name, d, &["input", "as", "cond", "limit"])?;
            let (Some(input), Some(cond)) = (d.get("input"), d.get("cond")) else {
                return Err(QueryError::failed_to_parse("$filter requires 'input' and 'cond'"));
            };
            Scoped::Filter {
                input: Expr::parse(input)?,
                name: variable_name(name, d.get("as"), "this")?,
                cond: Expr::parse(cond)?,
                limit: d.get("limit").map(Expr::parse).transpose()?,
            }
        }
        "$reduce" => {
            let d = object(name, arg)?;
            check_keys(name, d, &["input", "initialValue", "in"])?;
            let (Some(input), Some(initial), Some(body)) = (d.get("input"), d.get("initialValue"), d.get("in")) else {
                // MongoDB: Location40079 / 40080 / 40081.
                return Err(QueryError::failed_to_parse("$reduce requires 'input', 'initialValue' and 'in'"));
            };
            Scoped::Reduce { input: Expr::parse(input)?, initial: Expr::parse(initial)?, body: Expr::parse(body)? }
        }
        _ => return Ok(None),
    }))
}

impl Scoped {
    pub(crate) fn eval(&self, root: &Document, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
        match self {
            Scoped::Let { vars, body } => {
                let values = vars
                    .iter()
                    .map(|(_, e)| Ok(e.eval_in(root, scope)?.unwrap_or(Bson::Undefined)))
                    .collect::<Result<Vec<_>>>()?;
                bind(vars.iter().map(|(n, _)| n.as_str()).zip(values.iter()), scope, &|s| body.eval_in(root, s))
            }
            Scoped::Map { input, name, body } => {
                let Some(items) = array_input("$map", input.eval_in(root, scope)?)? else {
                    return Ok(Some(Bson::Null));
                };
                let mut out = Vec::with_capacity(items.len());
                for item in &items {
                    let s = Scope::One { name, value: item, parent: scope };
                    out.push(body.eval_in(root, Some(&s))?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Scoped::Filter { input, name, cond, limit } => {
                let Some(items) = array_input("$filter", input.eval_in(root, scope)?)? else {
                    return Ok(Some(Bson::Null));
                };
                let limit = match limit.as_ref().map(|l| l.eval_in(root, scope)).transpose()?.flatten() {
                    None | Some(Bson::Null) => usize::MAX,
                    Some(Bson::Int32(n)) if n > 0 => n as usize,
                    Some(Bson::Int64(n)) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    Some(Bson::Double(f)) if f >= 1.0 && f.fract() == 0.0 => f as usize,
                    // MongoDB: Location327391 / 327392.
                    Some(other) => {
                        return Err(QueryError::bad_value(format!(
                            "$filter: limit must be a positive integer, got {other}"
                        )));
                    }
                };
                let mut out = Vec::new();
                for item in items {
                    if out.len() >= limit {
                        break;
                    }
                    let s = Scope::One { name, value: &item, parent: scope };
                    if truthy(cond.eval_in(root, Some(&s))?.as_ref()) {
                        out.push(item);
                    }
                }
                Ok(Some(Bson::Array(out)))
            }
            Scoped::Reduce { input, initial, body } => {
                let Some(items) = array_input("$reduce", input.eval_in(root, scope)?)? else {
                    return Ok(Some(Bson::Null));
                };
                let mut acc = initial.eval_in(root, scope)?;
                for item in &items {
                    let value = acc.take().unwrap_or(Bson::Null);
                    let v = Scope::One { name: "value", value: &value, parent: scope };
                    let this = Scope::One { name: "this", value: item, parent: Some(&v) };
                    acc = body.eval_in(root, Some(&this))?;
                }
                Ok(acc)
            }
        }
    }
}

/// The array an iterating expression runs over: `None` for null or missing (the result is null).
fn array_input(op: &str, v: Option<Bson>) -> Result<Option<Vec<Bson>>> {
    match v {
        None | Some(Bson::Null | Bson::Undefined) => Ok(None),
        Some(Bson::Array(a)) => Ok(Some(a)),
        // MongoDB: Location16883 ($map) / 28651 ($filter).
        Some(other) => Err(QueryError::new(
            ErrorCode::TypeMismatch,
            format!("input to {op} must be an array not {}", crate::display::type_name(&other)),
        )),
    }
}

/// Evaluates `f` with each `(name, value)` bound, outermost first.
fn bind<'a>(
    mut bindings: impl Iterator<Item = (&'a str, &'a Bson)>,
    scope: Option<&Scope<'_>>,
    f: &dyn Fn(Option<&Scope<'_>>) -> Result<Option<Bson>>,
) -> Result<Option<Bson>> {
    match bindings.next() {
        None => f(scope),
        Some((name, value)) => {
            let s = Scope::One { name, value, parent: scope };
            bind(bindings, Some(&s), f)
        }
    }
}
