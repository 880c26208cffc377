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
//! Not supported yet (refused with `NotImplemented`): `$where`, `$text`, `$expr`, `$jsonSchema`,
//! geo and bit operators. Collations are not supported: strings compare bytewise.

mod expr;
mod extract;
mod index_bounds;
mod parse;
mod regex;
mod types;

#[cfg(test)]
mod tests;

use bson::Document;

use crate::error::QueryError;

pub use extract::{KeyRange, equality_fields, field_equalities, field_range, id_equality, id_range};
pub use index_bounds::field_key_intervals;

/// A parsed query filter, ready to test documents.
#[derive(Debug, Clone)]
pub struct Filter {
    root: expr::Expr,
}

impl Filter {
    /// Parses a filter document. Errors carry MongoDB's codes: `BadValue` for malformed
    /// operators, `NotImplemented` for operators Shoal does not support yet.
    pub fn parse(filter: &Document) -> Result<Filter, QueryError> {
        Ok(Filter { root: parse::parse_filter(filter, 0)? })
    }

    /// Whether `doc` satisfies the filter.
    pub fn matches(&self, doc: &Document) -> bool {
        self.root.matches(doc)
    }

    /// True for the empty filter (or one made only of `$comment`), which matches everything.
    pub fn is_match_all(&self) -> bool {
        matches!(self.root, expr::Expr::Const(true))
    }
}
