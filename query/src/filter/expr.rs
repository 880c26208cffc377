//! The parsed form of a filter and its evaluation against one document.
//!
//! An [`Expr`] is a tree of logical nodes over [`Expr::Path`] leaves. A path leaf matches when
//! at least one value its path reaches (see `path.rs`) passes its [`Test`]. Negations (`$ne`,
//! `$nin`, `$not`, `$exists: false`) are `Expr::Not` around the positive leaf, so `{a: {$ne: 1}}`
//! means "no value of `a` equals 1", MongoDB's meaning for arrays.
//!
//! A [`Test`] looks at one value at a time (`None` = the path was missing there), like
//! MongoDB's `matchesSingleElement`.

use std::cmp::Ordering;
use std::ops::ControlFlow;

use bson::{Bson, Document};

use super::regex::Pattern;
use super::types::TypeSet;
use crate::collation::Collation;
use crate::order::{canonical_type, compare_values};
use crate::path::{self, LeafArrays};

#[derive(Debug, Clone)]
pub(crate) enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Nor(Vec<Expr>),
    Not(Box<Expr>),
    Const(bool),
    Path {
        path: FieldPath,
        test: Test,
    },
    /// `$expr`: an aggregation expression over the whole document; matches when truthy. Only at
    /// the top level (inside `$and`/`$or`/`$nor`), never inside `$elemMatch`.
    Agg(Box<AggMatch>),
    /// `$jsonSchema`: the whole document against a schema. Top level only, as `$expr`.
    Schema(Box<super::schema::Schema>),
}

/// The operand of `$expr` and the command's `let` variables it sees.
#[derive(Debug, Clone)]
pub(crate) struct AggMatch {
    pub(crate) expr: crate::aggregate::expr::Expr,
    pub(crate) vars: crate::vars::LetVars,
}

impl AggMatch {
    fn eval(&self, doc: &Document) -> Result<bool, crate::QueryError> {
        let scope = crate::aggregate::expr::Scope::Many(self.vars.as_slice());
        let v = self.expr.eval_in(doc, Some(&scope))?;
        Ok(crate::aggregate::operators::truthy(v.as_ref()))
    }
}

/// A dotted path, split once at parse time.
#[derive(Debug, Clone)]
pub(crate) struct FieldPath {
    pub(crate) parts: Vec<String>,
}

impl FieldPath {
    pub(crate) fn new(dotted: &str) -> Self {
        Self { parts: dotted.split('.').map(str::to_owned).collect() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Lt,
    Lte,
    Gt,
    Gte,
}

#[derive(Debug, Clone)]
pub(crate) enum Test {
    Cmp(CmpOp, Bson),
    /// A comparison under a non-simple collation: the operand is already collated; the value
    /// is collated when tested.
    CmpCollated(CmpOp, Bson, Collation),
    In(InList),
    Exists,
    Type(TypeSet),
    Regex(Box<Pattern>),
    Mod {
        divisor: i64,
        remainder: i64,
    },
    Size(i64),
    /// Some element of the array is a document (or array) matching the filter.
    ElemMatchObject(Box<Expr>),
    /// Some element of the array passes every test.
    ElemMatchValue(Vec<Test>),
    /// Only inside `$elemMatch` value form, where tests apply to one element.
    Not(Box<Test>),
    /// Only inside `$elemMatch` value form (`$all`, several operators on one element).
    And(Vec<Test>),
}

/// The operand of `$in`: values sorted in BSON order for binary search, plus regexes.
#[derive(Debug, Clone, Default)]
pub(crate) struct InList {
    pub(crate) sorted: Vec<Bson>,
    pub(crate) has_null: bool,
    pub(crate) regexes: Vec<Pattern>,
    /// The values in `sorted` are collated by it (regexes still see the original values).
    pub(crate) collation: Collation,
}

impl InList {
    pub(crate) fn new(mut values: Vec<Bson>, regexes: Vec<Pattern>) -> Self {
        values.sort_by(compare_values);
        values.dedup_by(|a, b| compare_values(a, b) == Ordering::Equal);
        let has_null = values.iter().any(|v| matches!(v, Bson::Null));
        Self { sorted: values, has_null, regexes, collation: Collation::Simple }
    }

    fn set_collation(&mut self, collation: Collation) {
        let values = std::mem::take(&mut self.sorted);
        let regexes = std::mem::take(&mut self.regexes);
        *self = InList::new(values.iter().map(|v| collation.collate(v).into_owned()).collect(), regexes);
        self.collation = collation;
    }

    fn contains(&self, v: &Bson) -> bool {
        let v = self.collation.collate(v);
        self.sorted.binary_search_by(|probe| compare_values(probe, &v)).is_ok()
    }
}

impl Expr {
    pub(crate) fn matches(&self, doc: &Document) -> bool {
        match self {
            Expr::And(children) => children.iter().all(|c| c.matches(doc)),
            Expr::Or(children) => children.iter().any(|c| c.matches(doc)),
            Expr::Nor(children) => !children.iter().any(|c| c.matches(doc)),
            Expr::Not(child) => !child.matches(doc),
            Expr::Const(b) => *b,
            Expr::Path { path, test } => {
                let found = path::visit(doc, &path.parts, test.leaf_arrays(), &mut |v| {
                    if test.matches(v) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                });
                found.is_break()
            }
            // Callers that can report errors use `try_matches`; here a failed evaluation
            // selects nothing.
            Expr::Agg(a) => a.eval(doc).unwrap_or(false),
            Expr::Schema(schema) => schema.matches(doc),
        }
    }

    /// [`Expr::matches`] that reports `$expr`'s evaluation errors (`$divide` by zero, an
    /// undefined variable) instead of treating them as no match, as MongoDB fails the operation.
    pub(crate) fn try_matches(&self, doc: &Document) -> Result<bool, crate::QueryError> {
        match self {
            Expr::And(children) => {
                for c in children {
                    if !c.try_matches(doc)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Expr::Or(children) | Expr::Nor(children) => {
                let mut any = false;
                for c in children {
                    if c.try_matches(doc)? {
                        any = true;
                        break;
                    }
                }
                Ok(any == matches!(self, Expr::Or(_)))
            }
            Expr::Not(child) => Ok(!child.try_matches(doc)?),
            Expr::Agg(a) => a.eval(doc),
            other => Ok(other.matches(doc)),
        }
    }

    /// Whether `$expr` or `$jsonSchema` occurs in the logical tree (they look at the whole
    /// document, so `$elemMatch` may not hold them).
    pub(crate) fn has_whole_document_operator(&self) -> bool {
        match self {
            Expr::And(c) | Expr::Or(c) | Expr::Nor(c) => c.iter().any(Expr::has_whole_document_operator),
            Expr::Not(c) => c.has_whole_document_operator(),
            Expr::Agg(_) | Expr::Schema(_) => true,
            Expr::Const(_) | Expr::Path { .. } => false,
        }
    }

    /// Whether evaluation can fail (an `$expr` somewhere).
    pub(crate) fn can_fail(&self) -> bool {
        match self {
            Expr::And(c) | Expr::Or(c) | Expr::Nor(c) => c.iter().any(Expr::can_fail),
            Expr::Not(c) => c.can_fail(),
            Expr::Agg(_) => true,
            Expr::Schema(_) | Expr::Const(_) | Expr::Path { .. } => false,
        }
    }

    /// Makes every string comparison of the tree use `collation` (`$regex` is not affected, as
    /// in MongoDB; `$expr` is given it by [`AggMatch`]'s own comparisons, which stay binary).
    pub(crate) fn set_collation(&mut self, collation: Collation) {
        match self {
            Expr::And(c) | Expr::Or(c) | Expr::Nor(c) => c.iter_mut().for_each(|e| e.set_collation(collation)),
            Expr::Not(c) => c.set_collation(collation),
            Expr::Path { test, .. } => test.set_collation(collation),
            Expr::Agg(_) | Expr::Schema(_) | Expr::Const(_) => {}
        }
    }

    /// Gives every `$expr` the command's `let` variables.
    pub(crate) fn set_vars(&mut self, vars: &crate::vars::LetVars) {
        match self {
            Expr::And(c) | Expr::Or(c) | Expr::Nor(c) => c.iter_mut().for_each(|e| e.set_vars(vars)),
            Expr::Not(c) => c.set_vars(vars),
            Expr::Agg(a) => a.vars = vars.clone(),
            Expr::Schema(_) | Expr::Const(_) | Expr::Path { .. } => {}
        }
    }
}

impl Test {
    /// `$size` and `$elemMatch` look at an array as a whole (MongoDB's `kNoTraversal`); every
    /// other test also sees the elements of an array the path ends at.
    fn leaf_arrays(&self) -> LeafArrays {
        match self {
            Test::Size(_) | Test::ElemMatchObject(_) | Test::ElemMatchValue(_) => LeafArrays::Array,
            _ => LeafArrays::ElementsThenArray,
        }
    }

    fn set_collation(&mut self, collation: Collation) {
        match self {
            Test::Cmp(op, rhs) if crate::collation::has_string(rhs) => {
                *self = Test::CmpCollated(*op, collation.collate(rhs).into_owned(), collation);
            }
            Test::In(list) => list.set_collation(collation),
            Test::ElemMatchObject(e) => e.set_collation(collation),
            Test::ElemMatchValue(tests) | Test::And(tests) => tests.iter_mut().for_each(|t| t.set_collation(collation)),
            Test::Not(t) => t.set_collation(collation),
            _ => {}
        }
    }

    pub(crate) fn matches(&self, v: Option<&Bson>) -> bool {
        match self {
            Test::Cmp(op, rhs) => compare_matches(*op, rhs, v),
            Test::CmpCollated(op, rhs, collation) => {
                compare_matches(*op, rhs, v.map(|v| collation.collate(v)).as_deref())
            }
            Test::In(list) => match v {
                None => list.has_null,
                Some(v) => list.contains(v) || list.regexes.iter().any(|re| re.matches_value(v)),
            },
            Test::Exists => v.is_some(),
            Test::Type(set) => v.is_some_and(|v| set.contains(v)),
            Test::Regex(re) => v.is_some_and(|v| re.matches_value(v)),
            Test::Mod { divisor, remainder } => {
                v.and_then(truncate_to_i64).is_some_and(|n| n.wrapping_rem(*divisor) == *remainder)
            }
            Test::Size(n) => matches!(v, Some(Bson::Array(a)) if a.len() as i64 == *n),
            Test::ElemMatchObject(filter) => match v {
                Some(Bson::Array(a)) => a.iter().any(|e| match e {
                    Bson::Document(d) => filter.matches(d),
                    Bson::Array(inner) => filter.matches(&array_as_document(inner)),
                    _ => false,
                }),
                _ => false,
            },
            Test::ElemMatchValue(tests) => match v {
                Some(Bson::Array(a)) => a.iter().any(|e| tests.iter().all(|t| t.matches(Some(e)))),
                _ => false,
            },
            Test::Not(inner) => !inner.matches(v),
            Test::And(tests) => tests.iter().all(|t| t.matches(v)),
        }
    }
}

/// MongoDB's `ComparisonMatchExpression::matchesSingleElement`: values only compare within
/// their canonical type bracket, with the exceptions spelled out below.
fn compare_matches(op: CmpOp, rhs: &Bson, v: Option<&Bson>) -> bool {
    let inclusive = matches!(op, CmpOp::Eq | CmpOp::Lte | CmpOp::Gte);
    let Some(v) = v else {
        // A missing field behaves as null for equality, and sits outside every bracket but the
        // one that MinKey and MaxKey bounds span.
        return match rhs {
            Bson::Null => inclusive,
            Bson::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            Bson::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            _ => false,
        };
    };
    if canonical_type(v) != canonical_type(rhs) {
        return match rhs {
            Bson::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            Bson::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            _ => false,
        };
    }
    if op != CmpOp::Eq {
        // NaN equals NaN but is neither less nor greater than any number.
        let (lhs_nan, rhs_nan) = (is_nan(v), is_nan(rhs));
        if lhs_nan || rhs_nan {
            return inclusive && lhs_nan && rhs_nan;
        }
    }
    let o = compare_values(v, rhs);
    match op {
        CmpOp::Eq => o == Ordering::Equal,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Lte => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Gte => o != Ordering::Less,
    }
}

pub(crate) fn is_nan(v: &Bson) -> bool {
    match v {
        Bson::Double(f) => f.is_nan(),
        Bson::Decimal128(d) => {
            matches!(crate::keystring::decimal::decode(d), crate::keystring::decimal::Decimal::NaN)
        }
        _ => false,
    }
}

/// A number truncated toward zero, if it is finite and fits in an i64 (`$mod`'s dividend).
pub(crate) fn truncate_to_i64(v: &Bson) -> Option<i64> {
    use crate::keystring::decimal::{Decimal, decode};
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(f) => {
            let t = f.trunc();
            // -2^63 is representable; 2^63 is not.
            (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&t).then_some(t as i64)
        }
        Bson::Decimal128(d) => match decode(d) {
            Decimal::Finite { neg, coefficient, exponent } => {
                let magnitude = if exponent >= 0 {
                    10u128.checked_pow(exponent.unsigned_abs())?.checked_mul(coefficient)?
                } else {
                    10u128.checked_pow(exponent.unsigned_abs()).map_or(0, |p| coefficient / p)
                };
                let signed =
                    if neg { 0i128.checked_sub_unsigned(magnitude)? } else { i128::try_from(magnitude).ok()? };
                i64::try_from(signed).ok()
            }
            _ => None,
        },
        _ => None,
    }
}

/// An array seen as the document `{"0": e0, "1": e1, ...}`, as `$elemMatch` sees nested arrays.
fn array_as_document(a: &[Bson]) -> Document {
    a.iter().enumerate().map(|(i, e)| (i.to_string(), e.clone())).collect()
}
