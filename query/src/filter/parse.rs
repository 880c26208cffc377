//! Parsing a filter document into an [`Expr`], with MongoDB's error codes and messages.
//!
//! Operators on one field (`{a: {$gt: 1, $lt: 5}}`) are first read as [`Clause`]s, which become
//! path expressions at field level (each one over all values of the path independently, so
//! `{a: [0, 10]}` matches that filter) or tests of one element inside `$elemMatch`'s value form
//! (all on the same element).
//!
//! Invariant: nesting is bounded by [`MAX_DEPTH`], so no filter can exhaust the stack.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::expr::{AggMatch, CmpOp, Expr, FieldPath, InList, Test};
use super::regex::Pattern;
use super::types::TypeSet;
use crate::error::QueryError;

/// MongoDB's limit on the depth of a query tree.
pub(crate) const MAX_DEPTH: usize = 100;

/// What one operator of a field contributes.
enum Clause {
    Test(Test),
    /// `$ne`, `$nin`, `$exists: false`: true when no value passes the test.
    NotTest(Test),
    /// `$not`: true unless all of the inner clauses hold.
    Not(Vec<Clause>),
    /// `$all`: every test passes (each on its own value at field level). Empty matches nothing.
    All(Vec<Test>),
}

pub(crate) fn parse_filter(filter: &Document, depth: usize) -> Result<Expr, QueryError> {
    if depth > MAX_DEPTH {
        return Err(QueryError::bad_value(format!("exceeded maximum query tree depth of {MAX_DEPTH}")));
    }
    let mut children = Vec::with_capacity(filter.len());
    for (key, value) in filter {
        if key.starts_with('$') {
            if let Some(expr) = parse_top_level(key, value, depth)? {
                children.push(expr);
            }
        } else {
            children.push(parse_field(key, value, depth)?);
        }
    }
    Ok(and(children))
}

fn and(mut children: Vec<Expr>) -> Expr {
    if children.len() > 1 {
        return Expr::And(children);
    }
    // One child stands alone; none is always true.
    children.pop().unwrap_or(Expr::Const(true))
}

/// A top-level `$` key; `None` for keys that do not constrain (`$comment`).
fn parse_top_level(key: &str, value: &Bson, depth: usize) -> Result<Option<Expr>, QueryError> {
    let list = |value: &Bson| -> Result<Vec<Expr>, QueryError> {
        let Bson::Array(items) = value else {
            return Err(QueryError::bad_value(format!("{key} must be an array")));
        };
        if items.is_empty() {
            return Err(QueryError::bad_value("$and/$or/$nor must be a nonempty array"));
        }
        items
            .iter()
            .map(|item| match item {
                Bson::Document(d) => parse_filter(d, depth + 1),
                _ => Err(QueryError::bad_value("$or/$and/$nor entries need to be full objects")),
            })
            .collect()
    };
    Ok(Some(match key {
        "$and" => Expr::And(list(value)?),
        "$or" => Expr::Or(list(value)?),
        "$nor" => Expr::Nor(list(value)?),
        "$comment" => return Ok(None),
        "$alwaysTrue" => Expr::Const(true),
        "$alwaysFalse" => Expr::Const(false),
        "$expr" => Expr::Agg(Box::new(AggMatch {
            expr: crate::aggregate::expr::Expr::parse(value)?,
            vars: crate::vars::LetVars::default(),
        })),
        "$jsonSchema" => match value {
            Bson::Document(schema) => Expr::Schema(Box::new(super::schema::Schema::parse(schema)?)),
            // MongoDB: TypeMismatch, "$jsonSchema must be an object".
            other => {
                return Err(QueryError::type_mismatch(format!(
                    "$jsonSchema must be an object, not {}",
                    crate::display::type_name(other)
                )));
            }
        },
        "$where" | "$text" | "$sampleRate" => {
            return Err(QueryError::new(ErrorCode::NotImplemented, format!("{key} is not supported by Shoal yet")));
        }
        _ => {
            return Err(QueryError::bad_value(format!("unknown top level operator: {key}")));
        }
    }))
}

/// Whether an object in value position is a set of operators rather than a value to equal.
/// DBRefs (`{$ref, $id, $db}`) are values.
pub(crate) fn is_operator_document(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$') && !matches!(k.as_str(), "$ref" | "$id" | "$db"))
}

fn parse_field(path: &str, value: &Bson, depth: usize) -> Result<Expr, QueryError> {
    let path = FieldPath::new(path);
    let clauses = match value {
        Bson::Document(d) if is_operator_document(d) => parse_operators(d, depth)?,
        Bson::RegularExpression(r) => {
            vec![Clause::Test(Test::Regex(Box::new(Pattern::new(r.pattern.as_str(), r.options.as_str())?)))]
        }
        other => vec![Clause::Test(equality(other)?)],
    };
    Ok(and(clauses.into_iter().map(|c| clause_to_expr(&path, c)).collect()))
}

fn clause_to_expr(path: &FieldPath, clause: Clause) -> Expr {
    match clause {
        Clause::Test(test) => Expr::Path { path: path.clone(), test },
        Clause::NotTest(test) => Expr::Not(Box::new(Expr::Path { path: path.clone(), test })),
        Clause::Not(inner) => Expr::Not(Box::new(and(inner.into_iter().map(|c| clause_to_expr(path, c)).collect()))),
        Clause::All(tests) if tests.is_empty() => Expr::Const(false),
        Clause::All(tests) => {
            Expr::And(tests.into_iter().map(|test| Expr::Path { path: path.clone(), test }).collect())
        }
    }
}

fn clause_to_test(clause: Clause) -> Test {
    match clause {
        Clause::Test(test) => test,
        Clause::NotTest(test) => Test::Not(Box::new(test)),
        Clause::Not(inner) => Test::Not(Box::new(Test::And(inner.into_iter().map(clause_to_test).collect()))),
        // An empty $all matches nothing; an empty conjunction negated is exactly that.
        Clause::All(tests) if tests.is_empty() => Test::Not(Box::new(Test::And(Vec::new()))),
        Clause::All(tests) => Test::And(tests),
    }
}

fn equality(value: &Bson) -> Result<Test, QueryError> {
    Ok(Test::Cmp(CmpOp::Eq, comparable(value)?))
}

fn comparable(value: &Bson) -> Result<Bson, QueryError> {
    if matches!(value, Bson::Undefined) {
        return Err(QueryError::bad_value("cannot compare to undefined"));
    }
    Ok(value.clone())
}

/// The operators of one field: `{$gt: 1, $lt: 5}`.
fn parse_operators(ops: &Document, depth: usize) -> Result<Vec<Clause>, QueryError> {
    if depth > MAX_DEPTH {
        return Err(QueryError::bad_value(format!("exceeded maximum query tree depth of {MAX_DEPTH}")));
    }
    let mut clauses = Vec::with_capacity(ops.len());
    let mut regex_done = false;
    for (op, arg) in ops {
        let clause = match op.as_str() {
            "$eq" => Clause::Test(equality(arg)?),
            "$ne" => {
                if matches!(arg, Bson::RegularExpression(_)) {
                    return Err(QueryError::bad_value("Can't have regex as arg to $ne."));
                }
                Clause::NotTest(equality(arg)?)
            }
            "$lt" => Clause::Test(comparison(CmpOp::Lt, op, arg)?),
            "$lte" => Clause::Test(comparison(CmpOp::Lte, op, arg)?),
            "$gt" => Clause::Test(comparison(CmpOp::Gt, op, arg)?),
            "$gte" => Clause::Test(comparison(CmpOp::Gte, op, arg)?),
            "$in" => Clause::Test(Test::In(in_list(op, arg)?)),
            "$nin" => Clause::NotTest(Test::In(in_list(op, arg)?)),
            "$exists" => {
                if truthy(arg) {
                    Clause::Test(Test::Exists)
                } else {
                    Clause::NotTest(Test::Exists)
                }
            }
            "$type" => Clause::Test(Test::Type(TypeSet::parse(arg)?)),
            "$mod" => Clause::Test(parse_mod(arg)?),
            "$size" => Clause::Test(Test::Size(parse_size(arg)?)),
            "$all" => parse_all(arg, depth)?,
            "$elemMatch" => Clause::Test(parse_elem_match(arg, depth)?),
            "$not" => Clause::Not(parse_not(arg, depth)?),
            "$regex" | "$options" => {
                if regex_done {
                    continue;
                }
                regex_done = true;
                Clause::Test(Test::Regex(Box::new(parse_regex_operator(ops)?)))
            }
            "$comment" => continue,
            "$near" | "$nearSphere" | "$geoWithin" | "$geoIntersects" | "$within" | "$bitsAllSet" | "$bitsAllClear"
            | "$bitsAnySet" | "$bitsAnyClear" => {
                return Err(QueryError::new(ErrorCode::NotImplemented, format!("{op} is not supported by Shoal yet")));
            }
            _ => return Err(QueryError::bad_value(format!("unknown operator: {op}"))),
        };
        clauses.push(clause);
    }
    Ok(clauses)
}

fn comparison(op: CmpOp, name: &str, arg: &Bson) -> Result<Test, QueryError> {
    if matches!(arg, Bson::RegularExpression(_)) {
        return Err(QueryError::bad_value(format!("Can't have RegEx as arg to {name}")));
    }
    Ok(Test::Cmp(op, comparable(arg)?))
}

/// MongoDB's `BSONElement::trueValue`.
fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(f) => *f != 0.0,
        Bson::Decimal128(_) => !crate::order::values_equal(v, &Bson::Int32(0)),
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

fn in_list(op: &str, arg: &Bson) -> Result<InList, QueryError> {
    let Bson::Array(items) = arg else {
        return Err(QueryError::bad_value(format!("{op} needs an array")));
    };
    let mut values = Vec::with_capacity(items.len());
    let mut regexes = Vec::new();
    for item in items {
        match item {
            Bson::RegularExpression(r) => regexes.push(Pattern::new(r.pattern.as_str(), r.options.as_str())?),
            Bson::Document(d) if is_operator_document(d) => {
                return Err(QueryError::bad_value(format!("cannot nest $ under {op}")));
            }
            Bson::Undefined => {
                return Err(QueryError::bad_value("InMatchExpression equality cannot be undefined"));
            }
            other => values.push(other.clone()),
        }
    }
    Ok(InList::new(values, regexes))
}

fn parse_regex_operator(ops: &Document) -> Result<Pattern, QueryError> {
    let options = match ops.get("$options") {
        None => None,
        Some(Bson::String(s)) => Some(s.as_str()),
        Some(_) => return Err(QueryError::bad_value("$options has to be a string")),
    };
    match ops.get("$regex") {
        None => Err(QueryError::bad_value("$options needs a $regex")),
        Some(Bson::String(pattern)) => Pattern::new(pattern, options.unwrap_or("")),
        Some(Bson::RegularExpression(r)) => {
            // Only flags given in both places conflict; an empty `$options` defers to the literal.
            let options = options.filter(|o| !o.is_empty());
            if options.is_some() && !r.options.as_str().is_empty() {
                return Err(QueryError::bad_value("options set in both $regex and $options"));
            }
            Pattern::new(r.pattern.as_str(), options.unwrap_or(r.options.as_str()))
        }
        Some(_) => Err(QueryError::bad_value("$regex has to be a string")),
    }
}

fn parse_mod(arg: &Bson) -> Result<Test, QueryError> {
    let Bson::Array(items) = arg else {
        return Err(QueryError::bad_value("malformed mod, needs to be an array"));
    };
    match items.len() {
        0 | 1 => return Err(QueryError::bad_value("malformed mod, not enough elements")),
        2 => {}
        _ => return Err(QueryError::bad_value("malformed mod, too many elements")),
    }
    let operand = |v: &Bson, what: &str| -> Result<i64, QueryError> {
        if !matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)) {
            return Err(QueryError::bad_value(format!("malformed mod, {what} not a number")));
        }
        super::expr::truncate_to_i64(v).ok_or_else(|| {
            QueryError::bad_value(format!(
                "malformed mod, {what} value is invalid :: caused by :: Out of bounds coercing to integral value"
            ))
        })
    };
    let divisor = operand(&items[0], "divisor")?;
    let remainder = operand(&items[1], "remainder")?;
    if divisor == 0 {
        return Err(QueryError::bad_value("divisor cannot be 0"));
    }
    Ok(Test::Mod { divisor, remainder })
}

fn parse_size(arg: &Bson) -> Result<i64, QueryError> {
    if !matches!(arg, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)) {
        return Err(QueryError::bad_value("$size needs a number"));
    }
    let n = super::expr::truncate_to_i64(arg)
        .filter(|n| crate::order::values_equal(&Bson::Int64(*n), arg))
        .ok_or_else(|| QueryError::bad_value(format!("$size must be a whole number, got {arg}")))?;
    if n < 0 {
        return Err(QueryError::bad_value(format!("$size may not be negative, got {n}")));
    }
    Ok(n)
}

fn parse_all(arg: &Bson, depth: usize) -> Result<Clause, QueryError> {
    let Bson::Array(items) = arg else {
        return Err(QueryError::bad_value("$all needs an array"));
    };
    /// The argument of an item `{$elemMatch: arg, ...}` (the operator first).
    fn elem_match_arg(v: &Bson) -> Option<&Bson> {
        match v {
            Bson::Document(d) => d.iter().next().filter(|(k, _)| *k == "$elemMatch").map(|(_, arg)| arg),
            _ => None,
        }
    }
    let elem_match_form = items.first().and_then(elem_match_arg).is_some();
    let mut tests = Vec::with_capacity(items.len());
    for item in items {
        let elem_match = elem_match_arg(item);
        if elem_match_form != elem_match.is_some() {
            return Err(QueryError::bad_value("$all/$elemMatch has to be consistent"));
        }
        if let Some(arg) = elem_match {
            tests.push(parse_elem_match(arg, depth)?);
            continue;
        }
        let test = match item {
            Bson::Document(d) if is_operator_document(d) => {
                return Err(QueryError::bad_value("no $ expressions in $all"));
            }
            Bson::RegularExpression(r) => Test::Regex(Box::new(Pattern::new(r.pattern.as_str(), r.options.as_str())?)),
            other => equality(other)?,
        };
        tests.push(test);
    }
    Ok(Clause::All(tests))
}

fn parse_elem_match(arg: &Bson, depth: usize) -> Result<Test, QueryError> {
    let Bson::Document(d) = arg else {
        return Err(QueryError::bad_value("$elemMatch needs an Object"));
    };
    let value_form = is_operator_document(d)
        && !d.keys().next().is_some_and(|k| {
            matches!(
                k.as_str(),
                "$and"
                    | "$or"
                    | "$nor"
                    | "$where"
                    | "$expr"
                    | "$text"
                    | "$jsonSchema"
                    | "$comment"
                    | "$alwaysTrue"
                    | "$alwaysFalse"
            )
        });
    if value_form {
        let clauses = parse_operators(d, depth + 1)?;
        Ok(Test::ElemMatchValue(clauses.into_iter().map(clause_to_test).collect()))
    } else {
        let inner = parse_filter(d, depth + 1)?;
        if inner.has_whole_document_operator() {
            return Err(QueryError::bad_value("$expr and $jsonSchema can only be applied to the top-level document"));
        }
        Ok(Test::ElemMatchObject(Box::new(inner)))
    }
}

fn parse_not(arg: &Bson, depth: usize) -> Result<Vec<Clause>, QueryError> {
    match arg {
        Bson::RegularExpression(r) => {
            Ok(vec![Clause::Test(Test::Regex(Box::new(Pattern::new(r.pattern.as_str(), r.options.as_str())?)))])
        }
        Bson::Document(d) if d.is_empty() => Err(QueryError::bad_value("$not cannot be empty")),
        Bson::Document(d) => parse_operators(d, depth + 1),
        _ => Err(QueryError::bad_value("$not needs a regex or a document")),
    }
}
