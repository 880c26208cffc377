//! Dotted paths (`a.b.0.c`) and what they reach in a document, with MongoDB's array semantics.
//!
//! Owns two lookups:
//!
//! - [`get_path`]: one value or none, no implicit array traversal; a numeric component indexes
//!   an array (`a.1` is the second element). For updates and projection.
//! - [`visit`] / [`traverse`] / [`lookup`]: every value the path reaches, as MongoDB's matcher
//!   walks it (`BSONElementIterator`). For filters, `distinct` and sort keys.
//!
//! The matcher walk, for a path `p.rest` at a document:
//! - the field `p` is absent, or a scalar with components still left: one **missing** marker
//!   (`None`; `{"a.b": null}` matches `{a: 4}`);
//! - a document with components left: continue in it;
//! - a value where the path ends: that value; if it is an array, per [`LeafArrays`] its elements
//!   and/or the array itself (only one level: `[[1]]` yields `[1]`, not `1`);
//! - an array with components left (`q.rest2` after it): for each element in order,
//!   - a document: continue in it with `q.rest2` (a document lacking `q` yields missing), and
//!     if `q` is that element's index, also with `rest2` (or the element itself if `rest2` is
//!     empty);
//!   - a non-document whose index is `q`: the element itself if `rest2` is empty, or, if it is
//!     an array, its elements walked with `rest2` as above;
//!   - anything else yields nothing: scalars inside arrays and nested arrays are not traversed,
//!     so `{"a.b": null}` does not match `{a: [1]}` or `{a: []}` but does match `{a: [{}]}`.
//!
//! Invariant: the walk only borrows; it never allocates per value besides the caller's output.

use std::ops::ControlFlow;

use bson::{Bson, Document};

/// What a walk yields where the path ends at an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafArrays {
    /// Each element, then the array itself: the matcher's default (`{a: 1}` and `{a: [1, 2]}`
    /// both match `{a: [1, 2]}`).
    ElementsThenArray,
    /// Each element only: `distinct` and sort keys.
    Elements,
    /// The array only: `$elemMatch`, `$size`.
    Array,
}

/// Splits a dotted path into its components.
pub fn split(path: &str) -> Vec<&str> {
    path.split('.').collect()
}

/// The value at `path` without implicit array traversal: documents are entered by field name,
/// arrays by a numeric component (`0`, `12`; no sign, no leading zero).
pub fn get_path<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let mut cur = doc.get(parts.next()?)?;
    for part in parts {
        cur = match cur {
            Bson::Document(d) => d.get(part)?,
            Bson::Array(a) => a.get(array_index(part)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// `part` as an array index, if it is written as one.
pub fn array_index(part: &str) -> Option<usize> {
    let canonical =
        !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && (part == "0" || !part.starts_with('0'));
    if canonical { part.parse().ok() } else { None }
}

/// Every value `path` reaches (see the module header), with `None` marking a place where a
/// document lacked the next field.
pub fn traverse<'a>(doc: &'a Document, path: &str, leaf: LeafArrays) -> Vec<Option<&'a Bson>> {
    let mut out = Vec::new();
    let _ = visit(doc, &split(path), leaf, &mut |v| {
        out.push(v);
        ControlFlow::<()>::Continue(())
    });
    out
}

/// The values `path` reaches for matching: leaf arrays give their elements and themselves;
/// missing places are left out. Over `{a: [{b: 1}, {b: [2, 3]}]}`, `a.b` gives
/// `1, 2, 3, [2, 3]`.
pub fn lookup<'a>(doc: &'a Document, path: &str) -> Vec<&'a Bson> {
    traverse(doc, path, LeafArrays::ElementsThenArray).into_iter().flatten().collect()
}

/// The values `path` reaches with leaf arrays replaced by their elements (`distinct`, sort
/// keys). Over `{a: [{b: 1}, {b: [2, 3]}]}`, `a.b` gives `1, 2, 3`.
pub fn lookup_unwound<'a>(doc: &'a Document, path: &str) -> Vec<&'a Bson> {
    traverse(doc, path, LeafArrays::Elements).into_iter().flatten().collect()
}

/// Calls `f` with every value the path (already split into `parts`) reaches, in document order,
/// stopping early when `f` breaks. `None` marks a missing field.
pub fn visit<'a, S: AsRef<str>, B>(
    doc: &'a Document,
    parts: &[S],
    leaf: LeafArrays,
    f: &mut impl FnMut(Option<&'a Bson>) -> ControlFlow<B>,
) -> ControlFlow<B> {
    let Some((first, rest)) = parts.split_first() else {
        // An empty path names nothing.
        return f(None);
    };
    let Some(v) = doc.get(first.as_ref()) else {
        return f(None);
    };
    visit_value(v, rest, leaf, f)
}

/// Walks `rest` from a value reached by the components before it.
fn visit_value<'a, S: AsRef<str>, B>(
    v: &'a Bson,
    rest: &[S],
    leaf: LeafArrays,
    f: &mut impl FnMut(Option<&'a Bson>) -> ControlFlow<B>,
) -> ControlFlow<B> {
    match v {
        Bson::Array(a) => visit_array(v, a, rest, leaf, f),
        _ if rest.is_empty() => f(Some(v)),
        Bson::Document(d) => visit(d, rest, leaf, f),
        _ => f(None),
    }
}

fn visit_array<'a, S: AsRef<str>, B>(
    array_value: &'a Bson,
    array: &'a [Bson],
    rest: &[S],
    leaf: LeafArrays,
    f: &mut impl FnMut(Option<&'a Bson>) -> ControlFlow<B>,
) -> ControlFlow<B> {
    let Some((next, after)) = rest.split_first() else {
        if leaf != LeafArrays::Array {
            for e in array {
                f(Some(e))?;
            }
        }
        if leaf != LeafArrays::Elements {
            f(Some(array_value))?;
        }
        return ControlFlow::Continue(());
    };
    let index = array_index(next.as_ref());
    for (i, e) in array.iter().enumerate() {
        let positional = index == Some(i);
        match e {
            Bson::Document(d) => {
                visit(d, rest, leaf, f)?;
                if positional {
                    if after.is_empty() {
                        f(Some(e))?;
                    } else {
                        visit(d, after, leaf, f)?;
                    }
                }
            }
            _ if positional && after.is_empty() => f(Some(e))?,
            Bson::Array(inner) if positional => visit_array(e, inner, after, leaf, f)?,
            _ => {}
        }
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn walk(d: &Document, path: &str) -> Vec<Option<Bson>> {
        traverse(d, path, LeafArrays::ElementsThenArray).into_iter().map(|v| v.cloned()).collect()
    }

    #[test]
    fn get_path_indexes_arrays_without_traversal() {
        let d = doc! {"a": {"b": [10, {"c": 5}]}, "x": [{"y": 1}]};
        assert_eq!(get_path(&d, "a.b.0"), Some(&Bson::Int32(10)));
        assert_eq!(get_path(&d, "a.b.1.c"), Some(&Bson::Int32(5)));
        assert_eq!(get_path(&d, "a.b.2"), None);
        assert_eq!(get_path(&d, "a.b.01"), None);
        assert_eq!(get_path(&d, "x.y"), None);
        assert_eq!(get_path(&d, "a.b.0.z"), None);
        assert_eq!(get_path(&d, "missing"), None);
    }

    #[test]
    fn implicit_traversal_and_leaf_expansion() {
        let d = doc! {"a": [{"b": 1}, {"b": [2, 3]}]};
        assert_eq!(walk(&d, "a.b"), vec![Some(bson!(1)), Some(bson!(2)), Some(bson!(3)), Some(bson!([2, 3]))]);
        assert_eq!(lookup_unwound(&d, "a.b"), vec![&bson!(1), &bson!(2), &bson!(3)]);
        let a = traverse(&d, "a.b", LeafArrays::Array);
        assert_eq!(a, vec![Some(&bson!(1)), Some(&bson!([2, 3]))]);
    }

    #[test]
    fn missing_markers_follow_mongodb() {
        // From jstests/core/null2.js and null_query_semantics.js.
        assert_eq!(walk(&doc! {"a": 4}, "a.b"), vec![None]);
        assert_eq!(walk(&doc! {}, "a.b"), vec![None]);
        assert_eq!(walk(&doc! {"a": [{}]}, "a.b"), vec![None]);
        assert_eq!(walk(&doc! {"a": []}, "a.b"), vec![]);
        assert_eq!(walk(&doc! {"a": [5, {"b": 5}]}, "a.b"), vec![Some(bson!(5))]);
        assert_eq!(walk(&doc! {"a": [[{"b": 1}]]}, "a.b"), vec![]);
        assert_eq!(walk(&doc! {"a": [{"b": []}, {"b": {"c": 1}}]}, "a.b.c"), vec![Some(bson!(1))]);
    }

    #[test]
    fn numeric_components() {
        let d = doc! {"a": [{"b": 1}, {"b": 2}]};
        // Element 0 lacks a field "0" (missing), then is indexed.
        assert_eq!(walk(&d, "a.0.b"), vec![None, Some(bson!(1)), None]);
        assert_eq!(walk(&d, "a.1"), vec![None, None, Some(bson!({"b": 2}))]);
        assert_eq!(walk(&doc! {"a": [7, [8, 9]]}, "a.1"), vec![Some(bson!([8, 9]))]);
        assert_eq!(walk(&doc! {"a": [[{"b": 1}], [{"b": 2}]]}, "a.1.b"), vec![Some(bson!(2))]);
        assert_eq!(walk(&doc! {"a": [1, 2]}, "a.01"), vec![]);
    }

    #[test]
    fn visit_stops_early() {
        let d = doc! {"a": [1, 2, 3]};
        let mut seen = 0;
        let r = visit(&d, &["a"], LeafArrays::Elements, &mut |_| {
            seen += 1;
            if seen == 2 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        });
        assert_eq!((r, seen), (ControlFlow::Break(()), 2));
    }
}
