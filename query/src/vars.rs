//! A command's `let` variables (`find`, `update`, `delete`, `findAndModify`, `aggregate`):
//! parsed and evaluated once per command, then seen as `$$name` by `$expr` in filters, by
//! pipeline updates and by every stage of an aggregation.
//!
//! Invariants: names follow MongoDB's rules for user variables (a lowercase ASCII letter or a
//! non-ASCII character first, then letters, digits and `_`; Location16866/16867/16868); each
//! value is an aggregation expression evaluated with no document (a field path there is
//! missing, as in MongoDB), so evaluation errors surface when the command starts.

use std::sync::Arc;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::aggregate::expr::Expr;
use crate::error::{QueryError, Result};

/// The evaluated variables, cheap to clone into every filter and pipeline of a command.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LetVars(Arc<[(String, Bson)]>);

impl LetVars {
    /// Parses and evaluates `let`; `None` gives no variables.
    pub fn parse(lets: Option<&Document>) -> Result<LetVars> {
        let Some(lets) = lets else { return Ok(LetVars::default()) };
        let mut vars = Vec::with_capacity(lets.len());
        for (name, v) in lets {
            check_user_variable_name(name)?;
            let value = Expr::parse(v)?.eval(&Document::new())?.unwrap_or(Bson::Undefined);
            vars.push((name.clone(), value));
        }
        Ok(LetVars(vars.into()))
    }

    /// The `let` of a command body: absent or null is none; anything but an object is refused
    /// as MongoDB's IDL parser refuses it (TypeMismatch).
    pub fn from_command(body: &Document, cmd: &str) -> Result<LetVars> {
        match body.get("let") {
            None | Some(Bson::Null) => Ok(LetVars::default()),
            Some(Bson::Document(d)) => LetVars::parse(Some(d)),
            Some(other) => Err(QueryError::type_mismatch(format!(
                "BSON field '{cmd}.let' is the wrong type '{}', expected type 'object'",
                crate::display::type_name(other)
            ))),
        }
    }

    /// Variables already evaluated (`$lookup`'s per-document `let` on top of the command's).
    pub(crate) fn from_pairs(vars: Vec<(String, Bson)>) -> LetVars {
        LetVars(vars.into())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_slice(&self) -> &[(String, Bson)] {
        &self.0
    }
}

/// MongoDB's `variableValidation::validateNameForUserWrite`.
pub(crate) fn check_user_variable_name(name: &str) -> Result<()> {
    let Some(first) = name.chars().next() else {
        return Err(QueryError::new(ErrorCode::Location16866, "empty variable names are not allowed"));
    };
    if first.is_ascii() && !first.is_ascii_lowercase() {
        return Err(QueryError::new(
            ErrorCode::Location16867,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || *c == '_')) {
        return Err(QueryError::new(
            ErrorCode::Location16868,
            format!(
                "'{name}' contains an invalid character for a variable name: '{c}'; only letters, digits and '_' may \
                 follow the first character"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn evaluates_once_without_a_document() {
        let v = LetVars::parse(Some(&doc! {"a": {"$add": [1, 2]}, "b": "$x", "c": "lit"})).unwrap();
        assert_eq!(
            v.as_slice(),
            &[
                ("a".to_owned(), Bson::Int32(3)),
                ("b".to_owned(), Bson::Undefined),
                ("c".to_owned(), Bson::String("lit".to_owned()))
            ]
        );
    }

    #[test]
    fn bad_names_and_types() {
        let code = |d: Document| LetVars::parse(Some(&d)).unwrap_err().code;
        assert_eq!(code(doc! {"": 1}), ErrorCode::Location16866);
        assert_eq!(code(doc! {"A": 1}), ErrorCode::Location16867);
        assert_eq!(code(doc! {"_a": 1}), ErrorCode::Location16867);
        assert_eq!(code(doc! {"a-b": 1}), ErrorCode::Location16868);
        assert_eq!(code(doc! {"a": {"$divide": [1, 0]}}), ErrorCode::BadValue);
        assert_eq!(code(doc! {"a": {"$nope": 1}}), ErrorCode::InvalidPipelineOperator);
        let err = LetVars::from_command(&doc! {"find": "c", "let": 5}, "FindCommandRequest").unwrap_err();
        assert_eq!(err.code, ErrorCode::TypeMismatch);
        assert!(LetVars::from_command(&doc! {"find": "c"}, "x").unwrap().is_empty());
        assert!(LetVars::parse(Some(&doc! {"é": 1, "a_1B": 2})).is_ok());
    }
}
