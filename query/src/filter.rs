//! Query filters (`find`, `update`, `delete`, `$match`, `$pull`, ...): parsing with MongoDB's
//! errors and matching with MongoDB's semantics.
//!
//! Owns [`Filter`] and the planner helpers re-exported from [`extract`]: [`id_equality`],
//! [`id_range`], [`equality_fields`].
//!
//! Semantics (MongoDB 8.0):
//! - A path reaches values as described in `path.rs`; a path predicate matches when any reached
//!   value matches. An array at the end of the path offers its elements and itself, so
//!   `{a: 1}` and `{a: [1, 2]}` both match `{a: [1, 2]}`.
//! - Comparisons (`$eq $gt $gte $lt $lte`, implicit equality, `$in`) only match values of the
//!   operand's canonical type bracket; `$gt: 5` never matches a string. MinKey and MaxKey
//!   operands compare with every type. NaN only matches `$eq`/`$gte`/`$lte` NaN.
//! - Null equality (`{a: null}`, `$in: [null]`, `$gte`/`$lte: null`) also matches a missing
//!   field, but not `undefined` (the 8.0 change).
//! - Negations (`$ne`, `$nin`, `$not`, `$exists: false`) hold when the positive predicate holds
//!   for no reached value, so they match missing fields.
//! - `$size` and `$elemMatch` look at arrays as a whole, never at elements of an array.
//! - A regex literal in equality position is a `$regex`; `$eq` of a regex is equality with the
//!   regex value.
//!
//! - `$expr` evaluates an aggregation expression against the whole document (truthiness as in
//!   MongoDB's `coerceToBool`) and sees the command's `let` variables ([`Filter::with_vars`]).
//!   Its evaluation errors fail the operation: callers that can report errors use
//!   [`Filter::try_matches`]; [`Filter::matches`] treats them as no match.
//! - `$jsonSchema` (`schema.rs`) checks the whole document against a JSON Schema subset.
//!
//! - Strings compare bytewise unless [`Filter::with_collation`] gives a non-simple collation
//!   (`collation.rs`), under which `$eq $ne $in $nin $gt $gte $lt $lte` compare collation keys;
//!   `$regex` stays binary, as in MongoDB.
//!
//! Not supported yet (refused with `NotImplemented`): `$where`, `$text`, geo and bit operators,
//! `$expr` under a non-simple collation. See docs/query-language.md.

mod expr;
mod extract;
mod index_bounds;
mod parse;
pub(crate) mod regex;
mod schema;
mod types;

#[cfg(test)]
mod tests;

use bson::Document;

use crate::error::QueryError;

pub use extract::{KeyRange, equality_fields, field_equalities, field_range, id_equality, id_range};
pub use index_bounds::{field_key_intervals, regex_key_prefix};

/// A parsed query filter, ready to test documents.
#[derive(Debug, Clone)]
pub struct Filter {
    root: expr::Expr,
    /// An `$expr` occurs, so evaluation can fail; without one `try_matches` is `matches`.
    can_fail: bool,
}

impl Filter {
    /// Parses a filter document. Errors carry MongoDB's codes: `BadValue` for malformed
    /// operators, `NotImplemented` for operators Shoal does not support yet.
    pub fn parse(filter: &Document) -> Result<Filter, QueryError> {
        let root = parse::parse_filter(filter, 0)?;
        Ok(Filter { can_fail: root.can_fail(), root })
    }

    /// The empty filter.
    pub fn match_all() -> Filter {
        Filter { root: expr::Expr::Const(true), can_fail: false }
    }

    /// The filter with the command's `let` variables visible to its `$expr`s.
    pub fn with_vars(mut self, vars: &crate::vars::LetVars) -> Filter {
        if self.can_fail {
            self.root.set_vars(vars);
        }
        self
    }

    /// The filter with its string comparisons (`$eq $ne $in $nin $gt $gte $lt $lte`, implicit
    /// equality, inside `$elemMatch` and `$not` too) under `collation`; `$regex` stays binary,
    /// as in MongoDB. `$expr` with a non-simple collation is refused (NotImplemented): its
    /// comparisons would be binary where MongoDB's use the collation.
    pub fn with_collation(mut self, collation: crate::collation::Collation) -> Result<Filter, QueryError> {
        if collation.is_simple() {
            return Ok(self);
        }
        if self.can_fail {
            return Err(QueryError::new(
                shoal_proto::ErrorCode::NotImplemented,
                "$expr with a collation other than the simple one is not supported by Shoal yet",
            ));
        }
        self.root.set_collation(collation);
        Ok(self)
    }

    /// Whether `doc` satisfies the filter; an `$expr` that fails to evaluate does not match.
    pub fn matches(&self, doc: &Document) -> bool {
        self.root.matches(doc)
    }

    /// Whether evaluation can fail (an `$expr` occurs), so callers should use `try_matches`.
    pub fn can_fail(&self) -> bool {
        self.can_fail
    }

    /// Whether `doc` satisfies the filter, or the error an `$expr` raised evaluating it.
    #[inline]
    pub fn try_matches(&self, doc: &Document) -> Result<bool, QueryError> {
        if self.can_fail { self.root.try_matches(doc) } else { Ok(self.root.matches(doc)) }
    }

    /// True for the empty filter (or one made only of `$comment`), which matches everything.
    pub fn is_match_all(&self) -> bool {
        matches!(self.root, expr::Expr::Const(true))
    }
}
