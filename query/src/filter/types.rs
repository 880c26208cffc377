//! `$type`: BSON type codes and their string aliases.
//!
//! Invariant: a [`TypeSet`] is never empty (MongoDB refuses `$type: []`).

use bson::Bson;

use crate::error::QueryError;
use crate::filter::expr::truncate_to_i64;

/// The types `$type` accepts: explicit codes plus the `"number"` alias.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypeSet {
    codes: Vec<i32>,
    any_number: bool,
}

const ALIASES: &[(&str, i32)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

impl TypeSet {
    pub(crate) fn parse(arg: &Bson) -> Result<Self, QueryError> {
        let mut set = TypeSet::default();
        match arg {
            Bson::Array(items) => {
                for item in items {
                    set.add(item)?;
                }
            }
            other => set.add(other)?,
        }
        if set.codes.is_empty() && !set.any_number {
            return Err(QueryError::failed_to_parse("$type must match at least one type"));
        }
        Ok(set)
    }

    fn add(&mut self, item: &Bson) -> Result<(), QueryError> {
        match item {
            Bson::String(name) if name == "number" => self.any_number = true,
            Bson::String(name) => {
                let code = ALIASES
                    .iter()
                    .find(|(alias, _)| alias == name)
                    .map(|(_, code)| *code)
                    .ok_or_else(|| QueryError::bad_value(format!("Unknown type name alias: {name}")))?;
                self.codes.push(code);
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let whole = truncate_to_i64(item).filter(|n| crate::order::values_equal(&Bson::Int64(*n), item));
                let code = whole
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| ALIASES.iter().any(|(_, code)| code == n))
                    .ok_or_else(|| QueryError::bad_value(format!("Invalid numerical type code: {item}")))?;
                self.codes.push(code);
            }
            other => {
                return Err(QueryError::type_mismatch(format!(
                    "type must be represented as a number or a string, got {other}"
                )));
            }
        }
        Ok(())
    }

    /// Whether embedded documents (`object`, 3) are in the set.
    pub(crate) fn contains_object(&self) -> bool {
        self.codes.contains(&3)
    }

    pub(crate) fn contains(&self, v: &Bson) -> bool {
        let is_number = matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_));
        (self.any_number && is_number) || self.codes.contains(&type_code(v))
    }
}

/// The BSON type byte of a value, MinKey as -1.
pub(crate) fn type_code(v: &Bson) -> i32 {
    match v {
        Bson::MinKey => -1,
        other => i32::from(other.element_type() as u8),
    }
}
