//! The all-positional (`$[]`) and filtered positional (`$[<identifier>]`) update operators:
//! `arrayFilters` parsed and checked against the paths that use them, and a path with positional
//! components expanded, against the document being updated, into the concrete paths it names.
//!
//! Invariants: every identifier a path uses has exactly one filter and every filter is used (as
//! MongoDB checks, with its codes); a positional component applies only to an array that exists
//! (anything else is BadValue, MongoDB's "must exist in the document in order to apply array
//! updates"). Expansion reads the document before the update writes anything.
//!
//! The positional `$` names the first element of its array that the update's query matched:
//! the first index `i` for which the query matches the document with that array replaced by its
//! element `i` alone, provided the query does not already match with the array empty (then the
//! query says nothing about the array and there is no position, as MongoDB reports).

use std::collections::HashMap;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use super::FieldUpdate;
use crate::error::{QueryError, Result};
use crate::filter::Filter;

/// A positional path component.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Positional<'p> {
    /// `$`: the element the query matched.
    Matched,
    /// `$[]`: every element.
    All,
    /// `$[x]`: the elements `arrayFilters` entry `x` matches.
    Filtered(&'p str),
}

/// What a path component is, for positional purposes.
pub(crate) fn positional(part: &str) -> Option<Positional<'_>> {
    if part == "$" {
        return Some(Positional::Matched);
    }
    let inner = part.strip_prefix("$[")?.strip_suffix(']')?;
    Some(if inner.is_empty() { Positional::All } else { Positional::Filtered(inner) })
}

/// Whether an identifier is valid: a lowercase letter, then letters and digits.
pub(crate) fn valid_identifier(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// The parsed `arrayFilters` of an update statement, by identifier.
#[derive(Default)]
pub struct ArrayFilters {
    by_id: HashMap<String, Filter>,
}

impl std::fmt::Debug for ArrayFilters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.by_id.keys()).finish()
    }
}

impl ArrayFilters {
    /// Parses `arrayFilters` and checks them against the paths of `ops`.
    pub(crate) fn parse(filters: &[Document], ops: &[FieldUpdate]) -> Result<ArrayFilters> {
        let mut by_id = HashMap::new();
        for f in filters {
            let mut id: Option<&str> = None;
            for key in f.keys() {
                let top = key.split('.').next().unwrap_or("");
                match id {
                    None => id = Some(top),
                    Some(seen) if seen != top => {
                        return Err(QueryError::failed_to_parse(format!(
                            "Error parsing array filter :: caused by :: Expected a single top-level field name, \
                             found '{seen}' and '{top}'"
                        )));
                    }
                    Some(_) => {}
                }
            }
            let Some(id) = id else {
                return Err(QueryError::failed_to_parse(
                    "Cannot use an expression without a top-level field name in arrayFilters",
                ));
            };
            if !valid_identifier(id) {
                return Err(QueryError::bad_value(format!(
                    "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric \
                     string beginning with a lowercase letter, found '{id}'"
                )));
            }
            if by_id.contains_key(id) {
                return Err(QueryError::failed_to_parse(format!(
                    "Found multiple array filters with the same top-level field name {id}"
                )));
            }
            by_id.insert(id.to_owned(), Filter::parse(f)?);
        }
        let mut used: Vec<&str> = Vec::new();
        for fu in ops {
            for part in &fu.path.parts {
                if let Some(Positional::Filtered(id)) = positional(part) {
                    if !by_id.contains_key(id) {
                        return Err(QueryError::bad_value(format!(
                            "No array filter found for identifier '{id}' in path '{}'",
                            fu.path.dotted
                        )));
                    }
                    used.push(id);
                }
            }
        }
        if let Some(unused) = by_id.keys().find(|id| !used.contains(&id.as_str())) {
            return Err(QueryError::failed_to_parse(format!(
                "The array filter for identifier '{unused}' was not used in the update"
            )));
        }
        Ok(ArrayFilters { by_id })
    }

    fn matches(&self, id: &str, element: &Bson) -> bool {
        self.by_id.get(id).is_some_and(|f| f.matches(&doc! { id: element.clone() }))
    }
}

/// The concrete paths (components) `parts` names in `doc`: positional components replaced by the
/// indexes of the elements they select. A path without positional components is itself.
pub(crate) fn expand(
    parts: &[String],
    doc: &Document,
    filters: &ArrayFilters,
    query: Option<&Filter>,
) -> Result<Vec<Vec<String>>> {
    if !parts.iter().any(|p| positional(p).is_some()) {
        return Ok(vec![parts.to_vec()]);
    }
    // (concrete prefix, the value there, if any) for every branch so far.
    let root = Bson::Document(doc.clone());
    let mut branches: Vec<(Vec<String>, Option<&Bson>)> = vec![(Vec::new(), Some(&root))];
    for part in parts {
        let mut next = Vec::new();
        for (prefix, value) in branches {
            match positional(part) {
                Some(Positional::Matched) => {
                    let no_match = || {
                        QueryError::bad_value("The positional operator did not find the match needed from the query.")
                    };
                    let (Some(Bson::Array(elements)), Some(query)) = (value, query) else { return Err(no_match()) };
                    if query.matches(&with_value_at(doc, &prefix, Bson::Array(Vec::new()))) {
                        return Err(no_match());
                    }
                    let i = (0..elements.len())
                        .find(|i| query.matches(&with_value_at(doc, &prefix, Bson::Array(vec![elements[*i].clone()]))))
                        .ok_or_else(no_match)?;
                    let mut p = prefix.clone();
                    p.push(i.to_string());
                    next.push((p, Some(&elements[i])));
                }
                Some(which) => {
                    let Some(Bson::Array(elements)) = value else {
                        return Err(QueryError::new(
                            ErrorCode::BadValue,
                            format!(
                                "The path '{}' must exist in the document in order to apply array updates.",
                                prefix.join(".")
                            ),
                        ));
                    };
                    for (i, element) in elements.iter().enumerate() {
                        let selected = match which {
                            Positional::All | Positional::Matched => true,
                            Positional::Filtered(id) => filters.matches(id, element),
                        };
                        if selected {
                            let mut p = prefix.clone();
                            p.push(i.to_string());
                            next.push((p, Some(element)));
                        }
                    }
                }
                None => {
                    let child = match value {
                        Some(Bson::Document(d)) => d.get(part),
                        Some(Bson::Array(a)) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                        _ => None,
                    };
                    let mut p = prefix;
                    p.push(part.clone());
                    next.push((p, child));
                }
            }
        }
        branches = next;
    }
    Ok(branches.into_iter().map(|(p, _)| p).collect())
}

/// A copy of `doc` with the value at the concrete path `parts` (which exists) replaced.
fn with_value_at(doc: &Document, parts: &[String], value: Bson) -> Document {
    let mut out = doc.clone();
    let mut slot: Option<&mut Bson> = None;
    for (depth, part) in parts.iter().enumerate() {
        let next = match (depth, slot) {
            (0, _) => out.get_mut(part),
            (_, Some(Bson::Document(d))) => d.get_mut(part),
            (_, Some(Bson::Array(a))) => part.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        };
        slot = next;
        if slot.is_none() {
            return out;
        }
    }
    if let Some(s) = slot {
        *s = value;
    }
    out
}
