//! Aggregation expressions: field paths (`"$a.b"`), variables (`"$$ROOT"`), literals, object and
//! array expressions, and operator expressions (`{$add: [...]}`), parsed once and evaluated per
//! document.
//!
//! Invariants: evaluation yields `None` for "missing" (distinct from null, as in MongoDB, where
//! missing sorts before null and is dropped from objects); a field path over an array of
//! documents maps over the documents and skips the rest; `CURRENT` is always `ROOT`. Variables
//! bound by `$let`, `$map` and `$filter` (`scoped`) are looked up in a [`Scope`] chain; a name
//! no enclosing expression binds fails at evaluation (Location17276).

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::operators::{self, Operator};
use crate::error::{QueryError, Result};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Literal(Bson),
    /// `$a.b`: a path from the current document.
    Field(Vec<String>),
    /// `$$ROOT.a`, `$$CURRENT`: a path from the whole document.
    Root(Vec<String>),
    /// `$$REMOVE`: always missing, so `$project`/`$addFields` drop the field.
    Remove,
    Object(Vec<(String, Expr)>),
    Array(Vec<Expr>),
    Op(Operator, Vec<Expr>),
    /// `$$name.a.b`: a variable bound by an enclosing `$let`, `$map` or `$filter`.
    Var(String, Vec<String>),
    /// `$let`, `$map`, `$filter`: expressions that bind variables.
    Scoped(Box<super::scoped::Scoped>),
}

/// Variables in scope during evaluation, innermost first.
pub(crate) enum Scope<'a> {
    /// One variable bound by `$let`, `$map` or `$filter`, then the enclosing scope.
    One { name: &'a str, value: &'a Bson, parent: Option<&'a Scope<'a>> },
    /// A command's `let` variables: the outermost scope of a pipeline.
    Many(&'a [(String, Bson)]),
}

impl Scope<'_> {
    fn get(&self, name: &str) -> Option<&Bson> {
        match self {
            Scope::One { name: n, value, parent } => {
                if *n == name {
                    Some(value)
                } else {
                    parent.and_then(|p| p.get(name))
                }
            }
            Scope::Many(vars) => vars.iter().find(|(n, _)| n == name).map(|(_, v)| v),
        }
    }
}

impl Expr {
    pub(crate) fn parse(v: &Bson) -> Result<Expr> {
        match v {
            Bson::String(s) if s.starts_with("$$") => parse_variable(&s[2..]),
            Bson::String(s) if s.starts_with('$') => Ok(Expr::Field(parse_field_path(&s[1..])?)),
            Bson::Document(d) => match d.keys().next() {
                Some(k) if k.starts_with('$') => parse_operator(d),
                _ => parse_object(d),
            },
            Bson::Array(a) => Ok(Expr::Array(a.iter().map(Expr::parse).collect::<Result<_>>()?)),
            other => Ok(Expr::Literal(other.clone())),
        }
    }

    /// The value of the expression for `root`, `None` when missing.
    pub(crate) fn eval(&self, root: &Document) -> Result<Option<Bson>> {
        self.eval_in(root, None)
    }

    /// [`Expr::eval`] with the variables of enclosing expressions.
    pub(crate) fn eval_in(&self, root: &Document, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
        match self {
            Expr::Literal(v) => Ok(Some(v.clone())),
            Expr::Field(parts) | Expr::Root(parts) => Ok(lookup(root, parts)),
            Expr::Remove => Ok(None),
            Expr::Object(fields) => {
                let mut out = Document::new();
                for (k, e) in fields {
                    if let Some(v) = e.eval_in(root, scope)? {
                        out.insert(k.clone(), v);
                    }
                }
                Ok(Some(Bson::Document(out)))
            }
            // A missing element of an array literal becomes null: arrays cannot have holes.
            Expr::Array(items) => Ok(Some(Bson::Array(
                items.iter().map(|e| Ok(e.eval_in(root, scope)?.unwrap_or(Bson::Null))).collect::<Result<_>>()?,
            ))),
            Expr::Op(op, args) => operators::eval(*op, args, root, scope),
            Expr::Var(name, path) => match scope.and_then(|s| s.get(name)) {
                Some(v) if path.is_empty() => Ok(Some(v.clone())),
                Some(Bson::Document(d)) => Ok(lookup(d, path)),
                Some(Bson::Array(a)) => {
                    let wrapped = bson::doc! { "v": Bson::Array(a.clone()) };
                    let mut full = vec!["v".to_owned()];
                    full.extend(path.iter().cloned());
                    Ok(lookup(&wrapped, &full))
                }
                Some(_) => Ok(None),
                None => Err(QueryError::new(ErrorCode::Location17276, format!("Use of undefined variable: {name}"))),
            },
            Expr::Scoped(s) => s.eval(root, scope),
        }
    }
}

/// `{$dateToString: {date, format, onNull, timezone}}` as `[date, format, onNull]`.
fn parse_date_to_string(named: &Document) -> Result<Expr> {
    for k in named.keys() {
        if !matches!(k.as_str(), "date" | "format" | "onNull" | "timezone") {
            return Err(QueryError::failed_to_parse(format!("Unrecognized argument to $dateToString: {k}")));
        }
    }
    let Some(date) = named.get("date") else {
        return Err(QueryError::failed_to_parse("Missing 'date' parameter to $dateToString"));
    };
    let format = match (named.get("format"), named.get("timezone")) {
        (Some(f), _) => Expr::parse(f)?,
        // MongoDB: a local time is printed without the `Z` of UTC.
        (None, Some(_)) => Expr::Literal(Bson::String(super::convert::LOCAL_DATE_FORMAT.to_owned())),
        (None, None) => Expr::Literal(Bson::String(super::convert::DEFAULT_DATE_FORMAT.to_owned())),
    };
    let on_null = named.get("onNull").map_or(Ok(Expr::Literal(Bson::Null)), Expr::parse)?;
    let timezone = named.get("timezone").map_or(Ok(Expr::Literal(Bson::Null)), Expr::parse)?;
    Ok(Expr::Op(Operator::DateToString, vec![Expr::parse(date)?, format, on_null, timezone]))
}

/// `{$switch: {branches: [{case, then}, …], default}}` as `[case, then, …, default?]`.
fn parse_switch(named: &Document) -> Result<Expr> {
    let mut args = Vec::new();
    for (k, v) in named {
        match (k.as_str(), v) {
            ("branches", Bson::Array(branches)) => {
                for b in branches {
                    let Bson::Document(b) = b else {
                        return Err(QueryError::failed_to_parse("$switch expected each branch to be an object"));
                    };
                    let (Some(case), Some(then)) = (b.get("case"), b.get("then")) else {
                        return Err(QueryError::failed_to_parse(
                            "$switch requires each branch have a 'case' and 'then'",
                        ));
                    };
                    if b.len() != 2 {
                        return Err(QueryError::failed_to_parse("$switch found an unknown argument to a branch"));
                    }
                    args.push(Expr::parse(case)?);
                    args.push(Expr::parse(then)?);
                }
            }
            ("branches", _) => return Err(QueryError::failed_to_parse("$switch expected an array for 'branches'")),
            ("default", _) => {}
            (other, _) => {
                return Err(QueryError::failed_to_parse(format!("$switch found an unknown argument: {other}")));
            }
        }
    }
    if args.is_empty() {
        return Err(QueryError::failed_to_parse("$switch requires at least one branch."));
    }
    if let Some(d) = named.get("default") {
        args.push(Expr::parse(d)?);
    }
    Ok(Expr::Op(Operator::Switch, args))
}

/// `a.b.c` after the `$`, checked as MongoDB's `FieldPath` does.
pub(crate) fn parse_field_path(path: &str) -> Result<Vec<String>> {
    if path.is_empty() {
        // MongoDB: Location16872.
        return Err(QueryError::bad_value("'$' by itself is not a valid FieldPath"));
    }
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    for part in &parts {
        if part.is_empty() {
            return Err(QueryError::new(ErrorCode::Location15998, "FieldPath field names may not be empty strings."));
        }
        if part.starts_with('$') {
            // MongoDB: Location16410.
            return Err(QueryError::bad_value(format!(
                "FieldPath field names may not start with '$'. Consider using $getField or $setField. (in '{path}')"
            )));
        }
    }
    Ok(parts)
}

fn parse_variable(s: &str) -> Result<Expr> {
    let (name, rest) = match s.split_once('.') {
        Some((name, rest)) => (name, Some(rest)),
        None => (s, None),
    };
    let path = match rest {
        Some(rest) => parse_field_path(rest)?,
        None => Vec::new(),
    };
    match name {
        "ROOT" | "CURRENT" => Ok(Expr::Root(path)),
        "REMOVE" => Ok(Expr::Remove),
        "" => Err(QueryError::bad_value("empty variable names are not allowed")),
        user if user.starts_with(|c: char| c.is_ascii_lowercase()) => Ok(Expr::Var(user.to_owned(), path)),
        // MongoDB: Location17276. $$NOW, $$CLUSTER_TIME and the like are not provided yet.
        other => Err(QueryError::new(ErrorCode::Location17276, format!("Use of undefined variable: {other}"))),
    }
}

fn parse_object(d: &Document) -> Result<Expr> {
    let mut fields = Vec::with_capacity(d.len());
    for (k, v) in d {
        if k.starts_with('$') {
            // MongoDB: Location16410 (a `$` key after a plain one).
            return Err(QueryError::bad_value(format!(
                "FieldPath field names may not start with '$'. Consider using $getField or $setField. (in '{k}')"
            )));
        }
        if k.contains('.') {
            // MongoDB: Location16412.
            return Err(QueryError::bad_value(format!(
                "FieldPath field names may not contain '.'. Consider using $getField or $setField. (in '{k}')"
            )));
        }
        if k.is_empty() {
            return Err(QueryError::new(ErrorCode::Location15998, "FieldPath field names may not be empty strings."));
        }
        fields.push((k.clone(), Expr::parse(v)?));
    }
    Ok(Expr::Object(fields))
}

fn parse_operator(d: &Document) -> Result<Expr> {
    if d.len() != 1 {
        // MongoDB: Location15983.
        return Err(QueryError::bad_value(format!(
            "an expression specification must contain exactly one field, the name of the \
             expression. Found {} fields in {}",
            d.len(),
            crate::display::document(d)
        )));
    }
    let Some((name, arg)) = d.iter().next() else {
        return Err(QueryError::bad_value("empty expression"));
    };
    if name == "$literal" {
        return Ok(Expr::Literal(arg.clone()));
    }
    if let Some(scoped) = super::scoped::parse(name, arg)? {
        return Ok(Expr::Scoped(Box::new(scoped)));
    }
    if name == "$function" {
        // docs/query-language.md, "JavaScript": refused until the sandboxed engine is in.
        return Err(QueryError::new(
            ErrorCode::NotImplemented,
            "$function (server-side JavaScript) is not supported yet",
        ));
    }
    let op = Operator::from_name(name).ok_or_else(|| {
        QueryError::new(ErrorCode::InvalidPipelineOperator, format!("Unrecognized expression '{name}'"))
    })?;
    if op == Operator::Cond
        && let Bson::Document(named) = arg
    {
        return parse_cond_object(named);
    }
    match (op, arg) {
        (Operator::DateToString, Bson::Document(named)) => return parse_date_to_string(named),
        (Operator::DateToString, _) => {
            return Err(QueryError::failed_to_parse("$dateToString only supports an object as its argument"));
        }
        (Operator::Switch, Bson::Document(named)) => return parse_switch(named),
        (Operator::Switch, _) => {
            return Err(QueryError::failed_to_parse("$switch requires an object as an argument"));
        }
        (Operator::Year | Operator::Month | Operator::DayOfMonth, Bson::Document(named))
            if named.contains_key("date") =>
        {
            for k in named.keys() {
                if k != "date" && k != "timezone" {
                    return Err(QueryError::failed_to_parse(format!("unrecognized option to {name}: \"{k}\"")));
                }
            }
            let date = Expr::parse(named.get("date").unwrap_or(&Bson::Null))?;
            let timezone = named.get("timezone").map_or(Ok(Expr::Literal(Bson::Null)), Expr::parse)?;
            return Ok(Expr::Op(op, vec![date, timezone]));
        }
        _ => {}
    }
    if let Some(args) = super::ops::parse_named(op, arg)? {
        return Ok(Expr::Op(op, args));
    }
    let args = match arg {
        Bson::Array(items) => items.iter().map(Expr::parse).collect::<Result<Vec<_>>>()?,
        single => vec![Expr::parse(single)?],
    };
    operators::check_arity(op, args.len())?;
    Ok(Expr::Op(op, args))
}

/// `{$cond: {if: ..., then: ..., else: ...}}`, normalised to the three-argument form.
fn parse_cond_object(d: &Document) -> Result<Expr> {
    let (mut cond, mut then, mut otherwise) = (None, None, None);
    for (k, v) in d {
        let slot = match k.as_str() {
            "if" => &mut cond,
            "then" => &mut then,
            "else" => &mut otherwise,
            // MongoDB: Location17083.
            other => {
                return Err(QueryError::bad_value(format!("Unrecognized parameter to $cond: {other}")));
            }
        };
        *slot = Some(Expr::parse(v)?);
    }
    let missing = |name: &str| QueryError::bad_value(format!("Missing '{name}' parameter to $cond"));
    Ok(Expr::Op(
        Operator::Cond,
        vec![
            cond.ok_or_else(|| missing("if"))?,
            then.ok_or_else(|| missing("then"))?,
            otherwise.ok_or_else(|| missing("else"))?,
        ],
    ))
}

/// `$a.b` over `doc`: through documents; over an array, the values of the rest of the path in
/// its documents (other elements skipped, missing results dropped).
pub(crate) fn lookup(doc: &Document, parts: &[String]) -> Option<Bson> {
    let Some((first, rest)) = parts.split_first() else {
        return Some(Bson::Document(doc.clone()));
    };
    descend(doc.get(first)?, rest)
}

fn descend(v: &Bson, rest: &[String]) -> Option<Bson> {
    let Some((first, tail)) = rest.split_first() else {
        return Some(v.clone());
    };
    match v {
        Bson::Document(d) => descend(d.get(first)?, tail),
        Bson::Array(a) => Some(Bson::Array(
            a.iter()
                .filter_map(|e| match e {
                    Bson::Document(d) => descend(d.get(first)?, tail),
                    _ => None,
                })
                .collect(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn eval(expr: Bson, root: &Document) -> Option<Bson> {
        Expr::parse(&expr).unwrap().eval(root).unwrap()
    }

    #[test]
    fn field_paths_and_variables() {
        let root = doc! {"a": {"b": 1}, "arr": [{"x": 1}, 5, {"y": 2}, {"x": [3]}]};
        assert_eq!(eval(bson!("$a.b"), &root), Some(bson!(1)));
        assert_eq!(eval(bson!("$a.c"), &root), None);
        assert_eq!(eval(bson!("$arr.x"), &root), Some(bson!([1, [3]])));
        assert_eq!(eval(bson!("$$ROOT.a"), &root), Some(bson!({"b": 1})));
        assert_eq!(eval(bson!("$$CURRENT"), &root), Some(Bson::Document(root.clone())));
        assert_eq!(eval(bson!("$$REMOVE"), &root), None);
    }

    #[test]
    fn literals_objects_and_arrays() {
        let root = doc! {"a": 1};
        assert_eq!(eval(bson!(5), &root), Some(bson!(5)));
        assert_eq!(eval(bson!({"$literal": "$a"}), &root), Some(bson!("$a")));
        assert_eq!(eval(bson!({"x": "$a", "y": "$nope", "z": {"w": 2}}), &root), Some(bson!({"x": 1, "z": {"w": 2}})));
        assert_eq!(eval(bson!(["$a", "$nope"]), &root), Some(bson!([1, null])));
    }

    #[test]
    fn parse_errors() {
        let code = |v: Bson| Expr::parse(&v).unwrap_err().code;
        let err = Expr::parse(&bson!({"$foo": 1})).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidPipelineOperator);
        assert_eq!(err.message, "Unrecognized expression '$foo'");
        assert_eq!(code(bson!("$")), ErrorCode::BadValue);
        assert_eq!(code(bson!("$a..b")), ErrorCode::Location15998);
        assert_eq!(code(bson!("$$NOPE")), ErrorCode::Location17276);
        assert_eq!(code(bson!({"$add": [1], "x": 1})), ErrorCode::BadValue);
        assert_eq!(code(bson!({"a": 1, "$b": 1})), ErrorCode::BadValue);
        assert_eq!(code(bson!({"a.b": 1})), ErrorCode::BadValue);
        assert_eq!(code(bson!({"$cond": {"if": true, "then": 1}})), ErrorCode::BadValue);
        assert_eq!(code(bson!({"$cond": {"if": true, "then": 1, "else": 2, "x": 1}})), ErrorCode::BadValue);
    }
}
