//! `$jsonSchema`: a document against a JSON Schema (draft 4, MongoDB's subset and extensions).
//!
//! Supported keywords: `bsonType`, `type` (`object array number boolean string null`),
//! `required`, `properties`, `patternProperties`, `additionalProperties`, `minProperties`,
//! `maxProperties`, `minimum`/`maximum` (+ `exclusiveMinimum`/`exclusiveMaximum`), `multipleOf`,
//! `minLength`, `maxLength`, `pattern`, `enum`, `items` (schema or tuple), `additionalItems`,
//! `minItems`, `maxItems`, `uniqueItems`, `allOf`, `anyOf`, `oneOf`, `not`, and the annotations
//! `title` and `description`.
//!
//! Semantics (as MongoDB): a keyword only constrains values of the type it is about
//! (`minimum` passes a string; `required` passes a number); a property that is absent passes
//! its `properties` schema. Parse errors: an unknown keyword is FailedToParse ("Unknown
//! $jsonSchema keyword"), keywords MongoDB refuses (`$ref`, `$schema`, `default`,
//! `definitions`, `format`, `id`) are FailedToParse too, `dependencies` (which MongoDB has) is
//! NotImplemented, a keyword of the wrong BSON type is TypeMismatch, a bad value (negative
//! length, empty `required`) is FailedToParse.
//!
//! Invariant: nesting is bounded by the filter's `MAX_DEPTH`.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::parse::MAX_DEPTH;
use super::regex::Pattern;
use super::types::TypeSet;
use crate::error::QueryError;
use crate::order::{canonical_type, compare_values, values_equal};

#[derive(Debug, Clone)]
pub(crate) struct Schema {
    types: Option<TypeSet>,
    checks: Vec<Check>,
}

#[derive(Debug, Clone)]
enum Additional {
    Allowed(bool),
    Schema(Box<Schema>),
}

#[derive(Debug, Clone)]
enum Check {
    Minimum {
        limit: Bson,
        exclusive: bool,
    },
    Maximum {
        limit: Bson,
        exclusive: bool,
    },
    MultipleOf(f64),
    MinLength(usize),
    MaxLength(usize),
    Pattern(Box<Pattern>),
    Enum(Vec<Bson>),
    Required(Vec<String>),
    Properties(Vec<(String, Schema)>),
    PatternProperties(Vec<(Pattern, Schema)>),
    /// Properties named by neither `properties` nor `patternProperties` (the names and patterns
    /// are copied here so the check stands alone).
    AdditionalProperties {
        named: Vec<String>,
        patterns: Vec<Pattern>,
        rule: Additional,
    },
    MinProperties(usize),
    MaxProperties(usize),
    Items(Box<Schema>),
    /// `items` as an array (a tuple), with `additionalItems` for what follows.
    TupleItems {
        items: Vec<Schema>,
        additional: Additional,
    },
    MinItems(usize),
    MaxItems(usize),
    UniqueItems,
    AllOf(Vec<Schema>),
    AnyOf(Vec<Schema>),
    OneOf(Vec<Schema>),
    Not(Box<Schema>),
}

fn failed(msg: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(msg)
}

fn wrong_type(keyword: &str, want: &str) -> QueryError {
    QueryError::type_mismatch(format!("$jsonSchema keyword '{keyword}' must be {want}"))
}

fn is_number(v: &Bson) -> bool {
    matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
}

fn as_f64(v: &Bson) -> Option<f64> {
    crate::order::number_as_f64(v)
}

fn count(keyword: &str, v: &Bson) -> Result<usize, QueryError> {
    if !is_number(v) {
        return Err(wrong_type(keyword, "a number"));
    }
    let n = super::expr::truncate_to_i64(v)
        .filter(|n| values_equal(&Bson::Int64(*n), v))
        .ok_or_else(|| failed(format!("$jsonSchema keyword '{keyword}' must be a representable as a long integer")))?;
    usize::try_from(n).map_err(|_| failed(format!("$jsonSchema keyword '{keyword}' must be a non-negative integer")))
}

fn schema_list(keyword: &str, v: &Bson, depth: usize) -> Result<Vec<Schema>, QueryError> {
    let Bson::Array(items) = v else {
        return Err(wrong_type(keyword, "an array"));
    };
    if items.is_empty() {
        return Err(failed(format!("$jsonSchema keyword '{keyword}' must be a non-empty array")));
    }
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => Schema::parse_at(d, depth + 1),
            _ => Err(wrong_type(keyword, "an array of objects")),
        })
        .collect()
}

fn sub_schema(keyword: &str, v: &Bson, depth: usize) -> Result<Schema, QueryError> {
    match v {
        Bson::Document(d) => Schema::parse_at(d, depth + 1),
        _ => Err(wrong_type(keyword, "an object")),
    }
}

fn additional(keyword: &str, v: &Bson, depth: usize) -> Result<Additional, QueryError> {
    match v {
        Bson::Boolean(b) => Ok(Additional::Allowed(*b)),
        Bson::Document(d) => Ok(Additional::Schema(Box::new(Schema::parse_at(d, depth + 1)?))),
        _ => Err(wrong_type(keyword, "a boolean or an object")),
    }
}

/// `type`'s JSON names as `$type` aliases (`integer` is not one MongoDB takes).
fn json_type(name: &str) -> Result<&'static str, QueryError> {
    Ok(match name {
        "object" => "object",
        "array" => "array",
        "number" => "number",
        "boolean" => "bool",
        "string" => "string",
        "null" => "null",
        "integer" => return Err(QueryError::bad_value("JSON type 'integer' is not currently supported.")),
        other => return Err(QueryError::bad_value(format!("Unknown type name alias: {other}"))),
    })
}

fn type_names(
    keyword: &str,
    v: &Bson,
    map: impl Fn(&str) -> Result<String, QueryError>,
) -> Result<TypeSet, QueryError> {
    let names: Vec<&str> = match v {
        Bson::String(s) => vec![s.as_str()],
        Bson::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Bson::String(s) => Ok(s.as_str()),
                _ => Err(wrong_type(keyword, "a string or an array of strings")),
            })
            .collect::<Result<_, _>>()?,
        Bson::Array(_) => return Err(failed(format!("$jsonSchema keyword '{keyword}' must name at least one type"))),
        _ => return Err(wrong_type(keyword, "a string or an array of strings")),
    };
    let aliases = names.into_iter().map(|n| map(n).map(Bson::String)).collect::<Result<_, _>>()?;
    TypeSet::parse(&Bson::Array(aliases))
}

impl Schema {
    pub(crate) fn parse(d: &Document) -> Result<Schema, QueryError> {
        Schema::parse_at(d, 0)
    }

    fn parse_at(d: &Document, depth: usize) -> Result<Schema, QueryError> {
        if depth > MAX_DEPTH {
            return Err(QueryError::bad_value(format!("exceeded maximum query tree depth of {MAX_DEPTH}")));
        }
        let mut types = None;
        let mut checks = Vec::new();
        if d.contains_key("type") && d.contains_key("bsonType") {
            return Err(failed("Cannot specify both $jsonSchema keywords 'type' and 'bsonType'"));
        }
        for (k, v) in d {
            match k.as_str() {
                "bsonType" => types = Some(type_names(k, v, |s| Ok(s.to_owned()))?),
                "type" => types = Some(type_names(k, v, |s| json_type(s).map(str::to_owned))?),
                "minimum" | "maximum" => {
                    if !is_number(v) {
                        return Err(wrong_type(k, "a number"));
                    }
                    let flag = if k == "minimum" { "exclusiveMinimum" } else { "exclusiveMaximum" };
                    let exclusive = match d.get(flag) {
                        None => false,
                        Some(Bson::Boolean(b)) => *b,
                        Some(_) => return Err(wrong_type(flag, "a boolean")),
                    };
                    let limit = v.clone();
                    checks.push(if k == "minimum" {
                        Check::Minimum { limit, exclusive }
                    } else {
                        Check::Maximum { limit, exclusive }
                    });
                }
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    let bound = if k == "exclusiveMinimum" { "minimum" } else { "maximum" };
                    if !matches!(v, Bson::Boolean(_)) {
                        return Err(wrong_type(k, "a boolean"));
                    }
                    if !d.contains_key(bound) {
                        return Err(failed(format!(
                            "$jsonSchema keyword '{bound}' must be a present if {k} is present"
                        )));
                    }
                }
                "multipleOf" => {
                    let f = as_f64(v).ok_or_else(|| wrong_type(k, "a number"))?;
                    if f.is_nan() || f <= 0.0 {
                        return Err(failed("$jsonSchema keyword 'multipleOf' must have a positive value"));
                    }
                    checks.push(Check::MultipleOf(f));
                }
                "minLength" => checks.push(Check::MinLength(count(k, v)?)),
                "maxLength" => checks.push(Check::MaxLength(count(k, v)?)),
                "pattern" => {
                    let Bson::String(p) = v else { return Err(wrong_type(k, "a string")) };
                    checks.push(Check::Pattern(Box::new(Pattern::new(p, "")?)));
                }
                "enum" => {
                    let Bson::Array(items) = v else { return Err(wrong_type(k, "an array")) };
                    if items.is_empty() {
                        return Err(failed("$jsonSchema keyword 'enum' cannot be an empty array"));
                    }
                    checks.push(Check::Enum(items.iter().map(unordered_fields).collect()));
                }
                "required" => {
                    let Bson::Array(items) = v else { return Err(wrong_type(k, "an array")) };
                    if items.is_empty() {
                        return Err(failed("$jsonSchema keyword 'required' cannot be an empty array"));
                    }
                    let mut names = Vec::with_capacity(items.len());
                    for item in items {
                        let Bson::String(s) = item else { return Err(wrong_type(k, "an array of strings")) };
                        if names.contains(s) {
                            return Err(failed("$jsonSchema keyword 'required' array cannot contain duplicate values"));
                        }
                        names.push(s.clone());
                    }
                    checks.push(Check::Required(names));
                }
                "properties" => {
                    let Bson::Document(props) = v else { return Err(wrong_type(k, "an object")) };
                    let parsed = props
                        .iter()
                        .map(|(name, s)| Ok((name.clone(), sub_schema(k, s, depth)?)))
                        .collect::<Result<_, QueryError>>()?;
                    checks.push(Check::Properties(parsed));
                }
                "patternProperties" => checks.push(Check::PatternProperties(pattern_properties(v, depth)?)),
                "additionalProperties" => {
                    let named = match d.get("properties") {
                        Some(Bson::Document(p)) => p.keys().cloned().collect(),
                        _ => Vec::new(),
                    };
                    let patterns = match d.get("patternProperties") {
                        Some(v) => pattern_properties(v, depth)?.into_iter().map(|(p, _)| p).collect(),
                        None => Vec::new(),
                    };
                    checks.push(Check::AdditionalProperties { named, patterns, rule: additional(k, v, depth)? });
                }
                "minProperties" => checks.push(Check::MinProperties(count(k, v)?)),
                "maxProperties" => checks.push(Check::MaxProperties(count(k, v)?)),
                "items" => match v {
                    Bson::Document(s) => checks.push(Check::Items(Box::new(Schema::parse_at(s, depth + 1)?))),
                    Bson::Array(_) => {
                        let items = schema_list(k, v, depth)?;
                        let additional = match d.get("additionalItems") {
                            None => Additional::Allowed(true),
                            Some(a) => additional("additionalItems", a, depth)?,
                        };
                        checks.push(Check::TupleItems { items, additional });
                    }
                    _ => return Err(wrong_type(k, "an array or an object")),
                },
                // Only meaningful beside a tuple `items`, where it is read; still checked here.
                "additionalItems" => {
                    additional(k, v, depth)?;
                }
                "minItems" => checks.push(Check::MinItems(count(k, v)?)),
                "maxItems" => checks.push(Check::MaxItems(count(k, v)?)),
                "uniqueItems" => match v {
                    Bson::Boolean(true) => checks.push(Check::UniqueItems),
                    Bson::Boolean(false) => {}
                    _ => return Err(wrong_type(k, "a boolean")),
                },
                "allOf" => checks.push(Check::AllOf(schema_list(k, v, depth)?)),
                "anyOf" => checks.push(Check::AnyOf(schema_list(k, v, depth)?)),
                "oneOf" => checks.push(Check::OneOf(schema_list(k, v, depth)?)),
                "not" => checks.push(Check::Not(Box::new(sub_schema(k, v, depth)?))),
                "title" | "description" => {
                    if !matches!(v, Bson::String(_)) {
                        return Err(wrong_type(k, "a string"));
                    }
                }
                "dependencies" => {
                    return Err(QueryError::new(
                        ErrorCode::NotImplemented,
                        "$jsonSchema keyword 'dependencies' is not supported by Shoal yet",
                    ));
                }
                "$ref" | "$schema" | "default" | "definitions" | "format" | "id" => {
                    return Err(failed(format!("$jsonSchema keyword '{k}' is not currently supported")));
                }
                other => return Err(failed(format!("Unknown $jsonSchema keyword: {other}"))),
            }
        }
        Ok(Schema { types, checks })
    }

    /// A document, at the top level or as a value.
    pub(crate) fn matches(&self, doc: &Document) -> bool {
        if let Some(types) = &self.types
            && !types.contains_object()
        {
            return false;
        }
        self.checks.iter().all(|c| c.matches_object(doc) && c.matches_any(Value::Doc(doc)))
    }

    fn matches_value(&self, v: &Bson) -> bool {
        if let Bson::Document(d) = v {
            return self.matches(d);
        }
        if let Some(types) = &self.types
            && !types.contains(v)
        {
            return false;
        }
        self.checks.iter().all(|c| c.matches_scalar(v) && c.matches_any(Value::Other(v)))
    }

    fn matches_either(&self, v: Value<'_>) -> bool {
        match v {
            Value::Doc(d) => self.matches(d),
            Value::Other(v) => self.matches_value(v),
        }
    }
}

/// A value under test: documents are borrowed as such so the top level needs no wrapping.
#[derive(Clone, Copy)]
enum Value<'a> {
    Doc(&'a Document),
    Other(&'a Bson),
}

/// `v` with the fields of every document in it sorted by name.
fn unordered_fields(v: &Bson) -> Bson {
    match v {
        Bson::Document(d) => {
            let mut fields: Vec<(&String, &Bson)> = d.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            Bson::Document(fields.into_iter().map(|(k, v)| (k.clone(), unordered_fields(v))).collect())
        }
        Bson::Array(a) => Bson::Array(a.iter().map(unordered_fields).collect()),
        other => other.clone(),
    }
}

fn pattern_properties(v: &Bson, depth: usize) -> Result<Vec<(Pattern, Schema)>, QueryError> {
    let Bson::Document(d) = v else { return Err(wrong_type("patternProperties", "an object")) };
    d.iter().map(|(p, s)| Ok((Pattern::new(p, "")?, sub_schema("patternProperties", s, depth)?))).collect()
}

fn additional_ok(rule: &Additional, v: &Bson) -> bool {
    match rule {
        Additional::Allowed(b) => *b,
        Additional::Schema(s) => s.matches_value(v),
    }
}

fn compare_number(v: &Bson, limit: &Bson) -> Option<std::cmp::Ordering> {
    if !is_number(v) || super::expr::is_nan(v) || super::expr::is_nan(limit) {
        return None;
    }
    debug_assert_eq!(canonical_type(v), canonical_type(limit));
    Some(compare_values(v, limit))
}

impl Check {
    /// The keywords about objects (others pass).
    fn matches_object(&self, d: &Document) -> bool {
        match self {
            Check::Required(names) => names.iter().all(|n| d.contains_key(n)),
            Check::Properties(props) => props.iter().all(|(n, s)| d.get(n).is_none_or(|v| s.matches_value(v))),
            Check::PatternProperties(pats) => {
                d.iter().all(|(k, v)| pats.iter().all(|(p, s)| !p.matches_str(k) || s.matches_value(v)))
            }
            Check::AdditionalProperties { named, patterns, rule } => d
                .iter()
                .filter(|(k, _)| !named.contains(k) && !patterns.iter().any(|p| p.matches_str(k)))
                .all(|(_, v)| additional_ok(rule, v)),
            Check::MinProperties(n) => d.len() >= *n,
            Check::MaxProperties(n) => d.len() <= *n,
            _ => true,
        }
    }

    /// The keywords about numbers, strings and arrays (others pass).
    fn matches_scalar(&self, v: &Bson) -> bool {
        use std::cmp::Ordering::{Greater, Less};
        match (self, v) {
            (Check::Minimum { limit, exclusive }, _) => match compare_number(v, limit) {
                None => !is_number(v),
                Some(o) => o == Greater || (!exclusive && o != Less),
            },
            (Check::Maximum { limit, exclusive }, _) => match compare_number(v, limit) {
                None => !is_number(v),
                Some(o) => o == Less || (!exclusive && o != Greater),
            },
            (Check::MultipleOf(m), _) if is_number(v) => as_f64(v).is_some_and(|x| (x / m).fract() == 0.0),
            (Check::MinLength(n), Bson::String(s)) => s.chars().count() >= *n,
            (Check::MaxLength(n), Bson::String(s)) => s.chars().count() <= *n,
            (Check::Pattern(p), Bson::String(s)) => p.matches_str(s),
            (Check::Items(s), Bson::Array(a)) => a.iter().all(|e| s.matches_value(e)),
            (Check::TupleItems { items, additional }, Bson::Array(a)) => {
                a.iter().zip(items).all(|(e, s)| s.matches_value(e))
                    && a.iter().skip(items.len()).all(|e| additional_ok(additional, e))
            }
            (Check::MinItems(n), Bson::Array(a)) => a.len() >= *n,
            (Check::MaxItems(n), Bson::Array(a)) => a.len() <= *n,
            (Check::UniqueItems, Bson::Array(a)) => {
                a.iter().enumerate().all(|(i, x)| a[..i].iter().all(|y| !values_equal(x, y)))
            }
            _ => true,
        }
    }

    /// The keywords about any value.
    fn matches_any(&self, v: Value<'_>) -> bool {
        match self {
            // MongoDB compares `enum` members with field order ignored.
            Check::Enum(values) => {
                let v = match v {
                    Value::Doc(d) => unordered_fields(&Bson::Document(d.clone())),
                    Value::Other(v) => unordered_fields(v),
                };
                values.iter().any(|e| values_equal(e, &v))
            }
            Check::AllOf(list) => list.iter().all(|s| s.matches_either(v)),
            Check::AnyOf(list) => list.iter().any(|s| s.matches_either(v)),
            Check::OneOf(list) => list.iter().filter(|s| s.matches_either(v)).count() == 1,
            Check::Not(s) => !s.matches_either(v),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests;
