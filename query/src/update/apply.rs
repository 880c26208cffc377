//! Applying parsed field updates to a document: walking dotted paths (creating documents and
//! padding arrays where a write needs them), the scalar operators, and the `_id` rules.
//!
//! Invariants: the caller hands in a scratch copy (errors may leave it half-written);
//! `parent_for_write` is the only place that creates intermediate fields; operators that only
//! remove (`$unset`, `$pop`, `$pull`, `$pullAll`, the source of `$rename`) never create anything
//! and treat a path through a scalar or an array as absent, as MongoDB does.

use std::collections::HashMap;

use bson::{Bson, Document, Timestamp};
use shoal_proto::ErrorCode;

use super::{FieldPath, FieldUpdate, Op, UpdateContext, arith, arrays, parse, positional};
use crate::display;
use crate::error::{QueryError, Result};
use crate::order::{compare_values, values_equal};

/// MongoDB refuses to pad an array past this many elements when a write names a far index.
pub(crate) const ARRAY_PAD_ELEMENTS_MAX: usize = 1_500_000;

pub(super) fn apply_all(
    ops: &[FieldUpdate],
    filters: &positional::ArrayFilters,
    query: Option<&crate::filter::Filter>,
    doc: &mut Document,
    ctx: &UpdateContext,
) -> Result<bool> {
    let original_id = doc.get("_id").cloned();
    let moved = read_renames(ops, doc, original_id.as_ref())?;
    // Positional paths name elements of the document as it was before this update.
    let mut concrete: Vec<(&FieldUpdate, FieldPath)> = Vec::with_capacity(ops.len());
    for fu in ops {
        for parts in positional::expand(&fu.path.parts, doc, filters, query)? {
            let path =
                if parts == fu.path.parts { fu.path.clone() } else { FieldPath { dotted: parts.join("."), parts } };
            concrete.push((fu, path));
        }
    }
    let mut changed = false;
    for (fu, path) in &concrete {
        changed |= apply_one(fu, path, doc, ctx, &moved, original_id.as_ref())?;
    }
    match (&original_id, doc.get("_id")) {
        (Some(before), after) if !after.is_some_and(|a| values_equal(before, a)) => {
            let path = ops
                .iter()
                .map(|fu| &fu.path)
                .find(|p| p.parts.first().is_some_and(|c| c == "_id"))
                .map_or("_id", |p| p.dotted.as_str());
            return Err(QueryError::new(
                ErrorCode::ImmutableField,
                format!("Performing an update on the path '{path}' would modify the immutable field '_id'"),
            ));
        }
        (None, Some(_)) => check_id_value(doc)?,
        _ => {}
    }
    move_id_first(doc);
    Ok(changed)
}

fn apply_one(
    fu: &FieldUpdate,
    path: &FieldPath,
    doc: &mut Document,
    ctx: &UpdateContext,
    moved: &HashMap<&str, Bson>,
    id: Option<&Bson>,
) -> Result<bool> {
    match &fu.op {
        Op::Set(v) => set(doc, path, v.clone()),
        Op::SetOnInsert(v) if ctx.is_upsert_insert => set(doc, path, v.clone()),
        Op::SetOnInsert(_) => Ok(false),
        Op::Unset => Ok(parent_existing(doc, &path.parts).is_some_and(|mut p| p.remove(path.last()))),
        Op::Inc(n) | Op::Mul(n) => {
            let (name, is_inc) = if matches!(fu.op, Op::Inc(_)) { ("$inc", true) } else { ("$mul", false) };
            rewrite(doc, path, true, |old| match old {
                None => Ok(Some(if is_inc { n.clone() } else { arith::zero_like(n) })),
                Some(old) if !parse::is_number(old) => Err(QueryError::type_mismatch(format!(
                    "Cannot apply {name} to a value of non-numeric type. {} has the field '{}' of \
                     non-numeric type {}",
                    id_doc(id),
                    path.last(),
                    display::type_name(old)
                ))),
                Some(old) => {
                    let result = if is_inc { arith::add(old, n) } else { arith::multiply(old, n) };
                    result.map(Some).map_err(|e| e.into_error(name, old, &id_doc(id)))
                }
            })
        }
        Op::Min(v) | Op::Max(v) => {
            let wanted =
                if matches!(fu.op, Op::Min(_)) { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater };
            rewrite(doc, path, true, |old| {
                Ok(match old {
                    Some(old) if compare_values(v, old) != wanted => None,
                    _ => Some(v.clone()),
                })
            })
        }
        Op::CurrentDate { timestamp } => {
            let value = if *timestamp {
                let secs = ctx.now.timestamp_millis().div_euclid(1000);
                // A zero increment means "fill in on insert" to MongoDB, so never write one.
                Bson::Timestamp(Timestamp { time: u32::try_from(secs.max(0)).unwrap_or(u32::MAX), increment: 1 })
            } else {
                Bson::DateTime(ctx.now)
            };
            set(doc, path, value)
        }
        Op::RenameFrom { .. } => {
            if moved.contains_key(path.dotted.as_str()) {
                Ok(parent_existing(doc, &path.parts).is_some_and(|mut p| p.remove(path.last())))
            } else {
                Ok(false)
            }
        }
        Op::RenameTo { from } => match moved.get(from.dotted.as_str()) {
            Some(v) => set(doc, path, v.clone()),
            None => Ok(false),
        },
        Op::Push(spec) => rewrite(doc, path, true, |old| arrays::push(old, spec, path.last(), &id_doc(id))),
        Op::AddToSet(values) => rewrite(doc, path, true, |old| arrays::add_to_set(old, values, path.last())),
        Op::Pop { first } => rewrite(doc, path, false, |old| arrays::pop(old, *first, &path.dotted)),
        Op::Pull(cond) => rewrite(doc, path, false, |old| arrays::pull(old, cond)),
        Op::PullAll(values) => rewrite(doc, path, false, |old| arrays::pull_all(old, values)),
    }
}

fn id_doc(id: Option<&Bson>) -> String {
    id.map_or_else(|| "{}".to_string(), |id| format!("{{{}}}", display::element("_id", id)))
}

/// Reads every `$rename` source before anything is written, so each moved value is the one the
/// document held when the update began.
fn read_renames<'o>(ops: &'o [FieldUpdate], doc: &Document, id: Option<&Bson>) -> Result<HashMap<&'o str, Bson>> {
    let mut moved = HashMap::new();
    let in_doc = || id.map_or_else(|| "no id".to_string(), |id| display::element("_id", id));
    for fu in ops {
        let Op::RenameFrom { to } = &fu.op else {
            continue;
        };
        let Some(value) = lookup_no_arrays(doc, &fu.path.parts).map_err(|array_field| {
            QueryError::bad_value(format!(
                "The source field cannot be an array element, '{}' in doc with {} has an array field called '{array_field}'",
                fu.path.dotted,
                in_doc()
            ))
        })?
        else {
            continue;
        };
        lookup_no_arrays(doc, &to.parts).map_err(|array_field| {
            QueryError::bad_value(format!(
                "The destination field cannot be an array element, '{}' in doc with {} has an array field called '{array_field}'",
                to.dotted,
                in_doc()
            ))
        })?;
        moved.insert(fu.path.dotted.as_str(), value.clone());
    }
    Ok(moved)
}

/// The value at `parts` without traversing arrays; `Err(name)` names an array met on the way.
fn lookup_no_arrays<'d>(doc: &'d Document, parts: &[String]) -> std::result::Result<Option<&'d Bson>, String> {
    let mut cur = doc;
    for (i, part) in parts.iter().enumerate() {
        let Some(v) = cur.get(part) else {
            return Ok(None);
        };
        if i + 1 == parts.len() {
            return Ok(Some(v));
        }
        match v {
            Bson::Document(d) => cur = d,
            Bson::Array(_) => return Err(part.clone()),
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn set(doc: &mut Document, path: &FieldPath, value: Bson) -> Result<bool> {
    let mut parent = parent_for_write(doc, &path.parts)?;
    if parent.get(path.last()).is_some_and(|old| identical(old, &value)) {
        return Ok(false);
    }
    parent.set(path.last(), value)?;
    Ok(true)
}

/// Replaces the value at `path` with what `f` computes from the old one (`None` from `f`: leave
/// it). `create` decides whether a missing path is built (writers) or means "nothing to do".
fn rewrite(
    doc: &mut Document,
    path: &FieldPath,
    create: bool,
    f: impl FnOnce(Option<&Bson>) -> Result<Option<Bson>>,
) -> Result<bool> {
    let parent = if create { Some(parent_for_write(doc, &path.parts)?) } else { parent_existing(doc, &path.parts) };
    let Some(mut parent) = parent else {
        return Ok(false);
    };
    let old = parent.get(path.last());
    let Some(new) = f(old)? else { return Ok(false) };
    if old.is_some_and(|old| identical(old, &new)) {
        return Ok(false);
    }
    parent.set(path.last(), new)?;
    Ok(true)
}

/// The container that holds (or will hold) the last component of a path.
enum Parent<'d, 'p> {
    Doc(&'d mut Document),
    /// An array and the name of the field holding it, for error messages.
    Arr(&'d mut Vec<Bson>, &'p str),
}

/// A non-negative decimal index, as MongoDB accepts array positions in update paths.
fn array_index(part: &str) -> Option<usize> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

fn cannot_create(field: &str, in_name: &str, in_value: &Bson) -> QueryError {
    QueryError::new(
        ErrorCode::PathNotViable,
        format!("Cannot create field '{field}' in element {{{}}}", display::element(in_name, in_value)),
    )
}

/// Grows `a` with nulls so that index `idx` is the next free slot or already exists.
fn pad(a: &mut Vec<Bson>, idx: usize) -> Result<()> {
    if idx > ARRAY_PAD_ELEMENTS_MAX && idx >= a.len() {
        return Err(QueryError::bad_value(format!("can't backfill more than {ARRAY_PAD_ELEMENTS_MAX} elements")));
    }
    while a.len() < idx {
        a.push(Bson::Null);
    }
    Ok(())
}

impl Parent<'_, '_> {
    fn get(&self, key: &str) -> Option<&Bson> {
        match self {
            Parent::Doc(d) => d.get(key),
            Parent::Arr(a, _) => array_index(key).and_then(|i| a.get(i)),
        }
    }

    fn set(&mut self, key: &str, value: Bson) -> Result<()> {
        match self {
            Parent::Doc(d) => {
                d.insert(key, value);
            }
            Parent::Arr(a, name) => {
                let Some(idx) = array_index(key) else {
                    return Err(cannot_create(key, name, &Bson::Array(a.clone())));
                };
                pad(a, idx)?;
                if idx == a.len() {
                    a.push(value);
                } else {
                    a[idx] = value;
                }
            }
        }
        Ok(())
    }

    /// Removes a field; an array element becomes null instead, keeping later positions.
    fn remove(&mut self, key: &str) -> bool {
        match self {
            Parent::Doc(d) => d.remove(key).is_some(),
            Parent::Arr(a, _) => match array_index(key).and_then(|i| a.get_mut(i)) {
                Some(Bson::Null) => false,
                Some(slot) => {
                    *slot = Bson::Null;
                    true
                }
                None => false,
            },
        }
    }
}

/// Walks to the parent of the last component, creating documents for missing fields and
/// padding arrays for numeric components past their end.
fn parent_for_write<'d, 'p>(root: &'d mut Document, parts: &'p [String]) -> Result<Parent<'d, 'p>> {
    let mut cur = Parent::Doc(root);
    for i in 0..parts.len().saturating_sub(1) {
        let (part, next) = (&parts[i], &parts[i + 1]);
        let slot: &'d mut Bson = match cur {
            Parent::Doc(d) => d.entry(part.clone()).or_insert_with(|| Bson::Document(Document::new())),
            Parent::Arr(a, name) => {
                let Some(idx) = array_index(part) else {
                    return Err(cannot_create(part, name, &Bson::Array(a.clone())));
                };
                pad(a, idx)?;
                if idx == a.len() {
                    a.push(Bson::Document(Document::new()));
                }
                &mut a[idx]
            }
        };
        cur = match slot {
            Bson::Document(d) => Parent::Doc(d),
            Bson::Array(a) => Parent::Arr(a, part),
            other => return Err(cannot_create(next, part, other)),
        };
    }
    Ok(cur)
}

/// Like `parent_for_write` but creating nothing: `None` when the path does not exist as
/// containers.
fn parent_existing<'d, 'p>(root: &'d mut Document, parts: &'p [String]) -> Option<Parent<'d, 'p>> {
    let mut cur = Parent::Doc(root);
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        let slot = match cur {
            Parent::Doc(d) => d.get_mut(part)?,
            Parent::Arr(a, _) => a.get_mut(array_index(part)?)?,
        };
        cur = match slot {
            Bson::Document(d) => Parent::Doc(d),
            Bson::Array(a) => Parent::Arr(a, part),
            _ => return None,
        };
    }
    Some(cur)
}

/// Writes one equality of an upsert's query into the seed document.
pub(super) fn set_seed(seed: &mut Document, dotted: &str, value: &Bson) -> Result<()> {
    let path = parse::parse_path(dotted)?;
    parent_for_write(seed, &path.parts)?.set(path.last(), value.clone())
}

/// `_id` values MongoDB refuses to store.
pub(super) fn check_id_value(doc: &Document) -> Result<()> {
    match doc.get("_id") {
        Some(v @ (Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined)) => Err(QueryError::new(
            ErrorCode::InvalidIdField,
            format!("The '_id' value cannot be of type {}", display::type_name(v)),
        )),
        _ => Ok(()),
    }
}

pub(super) fn move_id_first(doc: &mut Document) {
    if doc.contains_key("_id") && doc.keys().next().is_some_and(|k| k != "_id") {
        let mut reordered = Document::new();
        if let Some(id) = doc.remove("_id") {
            reordered.insert("_id", id);
        }
        reordered.extend(std::mem::take(doc));
        *doc = reordered;
    }
}

/// Binary identity (same types, same field order), which is what MongoDB uses to decide that a
/// write is a no-op: `$set: {a: 1.0}` over `a: 1` does change the document.
pub(super) fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        (Bson::Document(x), Bson::Document(y)) => identical_docs(x, y),
        (Bson::Array(x), Bson::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| identical(a, b)),
        _ => a == b,
    }
}

pub(crate) fn identical_docs(x: &Document, y: &Document) -> bool {
    x.len() == y.len() && x.iter().zip(y.iter()).all(|((k1, v1), (k2, v2))| k1 == k2 && identical(v1, v2))
}
