//! Projections: `find`'s projection argument and the aggregation stages that reshape documents
//! field by field (`$project`, `$addFields`/`$set`, `$unset`).
//!
//! Owns: parsing a spec into a tree of per-field actions and applying it with MongoDB 4.4+
//! semantics.
//!
//! Invariants:
//! - A projection is exactly one of inclusion (keep the named fields; `_id` unless `_id: 0`;
//!   computed fields appended in spec order), exclusion (drop the named fields) or add-fields
//!   (keep everything, set computed fields in place). Only a top-level `_id` may be excluded in an
//!   inclusion projection; no other mixing parses.
//! - No path in the tree is a prefix of another (`a` and `a.b` together are refused).
//! - Sub-paths reach into arrays: each element is projected; in an inclusion, non-document
//!   elements are dropped; in an exclusion they are kept.
//! - Expressions always see the whole input document, never a sub-document or a partly
//!   projected one.
//!
//! Not yet: positional `a.$` and `$meta` (both `NotImplemented`).

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::aggregate::expr::{Expr, Scope};
use crate::error::{QueryError, Result};
use crate::filter::Filter;

pub struct Projection {
    tree: Tree,
    kind: Kind,
    /// The spec as given, for `Debug` (filters inside `$elemMatch` are not printable).
    source: Document,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Inclusion,
    Exclusion,
    AddFields,
}

/// Which dialect a spec is written in: `find` knows `$slice`/`$elemMatch`; `$project` treats
/// every `$`-object as an expression; `$addFields` treats every value as an expression.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Find,
    Project,
    AddFields,
}

#[derive(Default)]
struct Tree {
    fields: Vec<(String, Node)>,
    /// Whether an expression sits somewhere below: such subtrees create output even where the
    /// input has no matching field.
    computed: bool,
}

enum Node {
    Include,
    Exclude,
    Slice { skip: Option<i64>, limit: i64 },
    ElemMatch(Filter),
    Expr(Expr),
    Sub(Tree),
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Projection({:?}, {})", self.kind, self.source)
    }
}

impl Projection {
    /// Parses `find`'s projection. `{}` keeps whole documents.
    pub fn parse(spec: &Document) -> Result<Projection> {
        Parser::run(spec, Mode::Find)
    }

    /// Parses a `$project` stage's spec, which must name at least one field.
    pub(crate) fn parse_project(spec: &Document) -> Result<Projection> {
        if spec.is_empty() {
            // MongoDB: Location51272.
            return Err(QueryError::bad_value(
                "Invalid $project :: caused by :: projection specification must have at least one field",
            ));
        }
        Parser::run(spec, Mode::Project)
    }

    /// Parses `$addFields`/`$set`.
    pub(crate) fn parse_add_fields(spec: &Document) -> Result<Projection> {
        Parser::run(spec, Mode::AddFields)
    }

    /// The exclusion `$unset` means.
    pub(crate) fn exclusion_of(paths: &[String]) -> Result<Projection> {
        let spec: Document = paths.iter().map(|p| (p.clone(), Bson::Int32(0))).collect();
        Parser::run(&spec, Mode::Project)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// True when the projection returns documents unchanged (`{}`).
    pub fn is_identity(&self) -> bool {
        self.tree.fields.is_empty() && self.kind != Kind::Inclusion
    }

    pub fn apply(&self, doc: &Document) -> Result<Document> {
        self.apply_in(doc, None)
    }

    /// [`Projection::apply`] with variables in scope (a pipeline's `let`).
    pub(crate) fn apply_in(&self, doc: &Document, scope: Option<&Scope<'_>>) -> Result<Document> {
        match self.kind {
            Kind::Inclusion => include_doc(&self.tree, doc, doc, scope),
            Kind::Exclusion => exclude_doc(&self.tree, doc),
            Kind::AddFields => add_doc(&self.tree, doc, doc, scope),
        }
    }
}

struct Parser {
    mode: Mode,
    kind: Option<Kind>,
    elem_match: bool,
    tree: Tree,
}

impl Parser {
    fn run(spec: &Document, mode: Mode) -> Result<Projection> {
        let mut p = Parser { mode, kind: None, elem_match: false, tree: Tree::default() };
        for (key, value) in spec {
            p.entry(Vec::new(), key, value)?;
        }
        let kind = match mode {
            Mode::AddFields => Kind::AddFields,
            _ => p.kind.unwrap_or_else(|| {
                let id_included = matches!(p.tree.get("_id"), Some(Node::Include));
                if p.elem_match || id_included { Kind::Inclusion } else { Kind::Exclusion }
            }),
        };
        if kind == Kind::Inclusion && p.tree.get("_id").is_none() {
            p.tree.fields.push(("_id".to_string(), Node::Include));
        }
        Ok(Projection { tree: p.tree, kind, source: spec.clone() })
    }

    fn entry(&mut self, prefix: Vec<String>, key: &str, value: &Bson) -> Result<()> {
        let mut parts = prefix;
        for part in key.split('.') {
            if part.is_empty() {
                return Err(QueryError::new(
                    ErrorCode::Location15998,
                    "FieldPath field names may not be empty strings.",
                ));
            }
            if part == "$" && self.mode == Mode::Find {
                return Err(QueryError::new(
                    ErrorCode::NotImplemented,
                    format!("positional projection ('{key}') is not supported yet"),
                ));
            }
            if part.starts_with('$') {
                // MongoDB: Location16410.
                return Err(QueryError::bad_value(format!(
                    "FieldPath field names may not start with '$'. Consider using $getField or $setField. (in '{key}')"
                )));
            }
            parts.push(part.to_string());
        }
        let full = parts.join(".");
        let is_top_id = parts.len() == 1 && parts[0] == "_id";
        let node = match value {
            Bson::Document(d) if !d.is_empty() && !d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                for (k, v) in d {
                    self.entry(parts.clone(), k, v)?;
                }
                return Ok(());
            }
            Bson::Document(d) if d.is_empty() && self.mode != Mode::AddFields => {
                // MongoDB: Location51270.
                return Err(QueryError::bad_value(format!(
                    "An empty sub-projection is not a valid value. Found empty object at path {full}"
                )));
            }
            _ if self.mode == Mode::AddFields => Node::Expr(Expr::parse(value)?),
            Bson::Boolean(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let include = crate::aggregate::operators::truthy(Some(value));
                if !is_top_id {
                    self.set_kind(if include { Kind::Inclusion } else { Kind::Exclusion }, &full)?;
                }
                if include { Node::Include } else { Node::Exclude }
            }
            Bson::Document(d) if self.mode == Mode::Find => self.find_operator(d, &parts, &full, value)?,
            _ => {
                if self.kind == Some(Kind::Exclusion) {
                    // MongoDB: Location31310.
                    return Err(QueryError::bad_value(
                        "Cannot use expression other than $meta in exclusion projection",
                    ));
                }
                self.kind = Some(Kind::Inclusion);
                Node::Expr(Expr::parse(value)?)
            }
        };
        self.tree.insert(&parts, node, &full)
    }

    fn set_kind(&mut self, kind: Kind, path: &str) -> Result<()> {
        match (self.kind, kind) {
            (Some(Kind::Exclusion), Kind::Inclusion) => Err(QueryError::new(
                ErrorCode::Location31253,
                format!("Cannot do inclusion on field {path} in exclusion projection"),
            )),
            (Some(Kind::Inclusion), Kind::Exclusion) => Err(QueryError::new(
                ErrorCode::Location31254,
                format!("Cannot do exclusion on field {path} in inclusion projection"),
            )),
            _ => {
                self.kind = Some(kind);
                Ok(())
            }
        }
    }

    /// `{$slice: ...}`, `{$elemMatch: ...}`, `{$meta: ...}` or an expression, in a find spec.
    fn find_operator(&mut self, d: &Document, parts: &[String], full: &str, value: &Bson) -> Result<Node> {
        let first = d.keys().next().map(String::as_str).unwrap_or("");
        match (first, d.get(first)) {
            ("$slice", Some(arg)) if d.len() == 1 => parse_slice(arg),
            ("$elemMatch", Some(arg)) if d.len() == 1 => {
                let Bson::Document(cond) = arg else {
                    return Err(QueryError::bad_value("elemMatch: Invalid argument, object required."));
                };
                if parts.len() > 1 {
                    return Err(QueryError::bad_value(format!(
                        "Cannot use $elemMatch projection on a nested field: {full}"
                    )));
                }
                self.elem_match = true;
                Ok(Node::ElemMatch(Filter::parse(&doc! { "v": { "$elemMatch": cond.clone() } })?))
            }
            ("$meta", _) => Err(QueryError::new(ErrorCode::NotImplemented, "$meta projections are not supported yet")),
            _ => {
                if self.kind == Some(Kind::Exclusion) {
                    return Err(QueryError::bad_value(
                        "Cannot use expression other than $meta in exclusion projection",
                    ));
                }
                self.kind = Some(Kind::Inclusion);
                Ok(Node::Expr(Expr::parse(value)?))
            }
        }
    }
}

fn parse_slice(arg: &Bson) -> Result<Node> {
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(f) if f.is_finite() => Some(f.trunc() as i64),
        _ => None,
    };
    match arg {
        Bson::Array(a) => {
            if a.len() != 2 {
                return Err(QueryError::bad_value("$slice array wrong size"));
            }
            let (Some(skip), Some(limit)) = (int(&a[0]), int(&a[1])) else {
                return Err(QueryError::bad_value("$slice array elements must be numbers"));
            };
            if limit <= 0 {
                return Err(QueryError::bad_value("$slice limit must be positive"));
            }
            Ok(Node::Slice { skip: Some(skip), limit })
        }
        other => match int(other) {
            Some(limit) => Ok(Node::Slice { skip: None, limit }),
            None => Err(QueryError::bad_value("$slice only supports numbers and [skip, limit] arrays")),
        },
    }
}

impl Tree {
    fn get(&self, key: &str) -> Option<&Node> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, n)| n)
    }

    fn insert(&mut self, parts: &[String], node: Node, full: &str) -> Result<()> {
        // MongoDB: Location31249/31250.
        let collision = || QueryError::bad_value(format!("Path collision at {full}"));
        let Some((first, rest)) = parts.split_first() else {
            return Err(collision());
        };
        if matches!(node, Node::Expr(_)) {
            self.computed = true;
        }
        let pos = self.fields.iter().position(|(k, _)| k == first);
        if rest.is_empty() {
            if pos.is_some() {
                return Err(collision());
            }
            self.fields.push((first.clone(), node));
            return Ok(());
        }
        let idx = match pos {
            Some(i) => i,
            None => {
                self.fields.push((first.clone(), Node::Sub(Tree::default())));
                self.fields.len() - 1
            }
        };
        match &mut self.fields[idx].1 {
            Node::Sub(sub) => sub.insert(rest, node, full),
            _ => Err(collision()),
        }
    }
}

fn slice(v: &Bson, skip: Option<i64>, limit: i64) -> Bson {
    let Bson::Array(a) = v else { return v.clone() };
    let len = a.len();
    let clamp = |n: i64| usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
    let (start, count) = match skip {
        None if limit >= 0 => (0, clamp(limit)),
        None => (len.saturating_sub(clamp(limit)), len),
        Some(s) if s >= 0 => (clamp(s).min(len), clamp(limit)),
        Some(s) => (len.saturating_sub(clamp(s)), clamp(limit)),
    };
    Bson::Array(a.iter().skip(start).take(count).cloned().collect())
}

fn elem_match(filter: &Filter, v: &Bson) -> Option<Bson> {
    let Bson::Array(a) = v else { return None };
    a.iter().find(|e| filter.matches(&doc! { "v": [ (*e).clone() ] })).map(|e| Bson::Array(vec![e.clone()]))
}

fn include_doc(tree: &Tree, d: &Document, root: &Document, scope: Option<&Scope<'_>>) -> Result<Document> {
    let mut out = Document::new();
    for (k, v) in d {
        match tree.get(k) {
            None | Some(Node::Exclude | Node::Expr(_)) => {}
            Some(Node::Include) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Node::Slice { skip, limit }) => {
                out.insert(k.clone(), slice(v, *skip, *limit));
            }
            Some(Node::ElemMatch(f)) => {
                if let Some(r) = elem_match(f, v) {
                    out.insert(k.clone(), r);
                }
            }
            Some(Node::Sub(t)) => {
                if let Some(r) = include_value(t, v, root, scope)? {
                    out.insert(k.clone(), r);
                }
            }
        }
    }
    if tree.computed {
        for (k, node) in &tree.fields {
            match node {
                Node::Expr(e) => {
                    if let Some(v) = e.eval_in(root, scope)? {
                        out.insert(k.clone(), v);
                    }
                }
                Node::Sub(t) if t.computed && !d.contains_key(k) => {
                    out.insert(k.clone(), Bson::Document(include_doc(t, &Document::new(), root, scope)?));
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

fn include_value(tree: &Tree, v: &Bson, root: &Document, scope: Option<&Scope<'_>>) -> Result<Option<Bson>> {
    match v {
        Bson::Document(d) => Ok(Some(Bson::Document(include_doc(tree, d, root, scope)?))),
        Bson::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            for e in a {
                if let Some(r) = include_value(tree, e, root, scope)? {
                    out.push(r);
                }
            }
            Ok(Some(Bson::Array(out)))
        }
        _ if tree.computed => Ok(Some(Bson::Document(include_doc(tree, &Document::new(), root, scope)?))),
        _ => Ok(None),
    }
}

fn exclude_doc(tree: &Tree, d: &Document) -> Result<Document> {
    let mut out = Document::new();
    for (k, v) in d {
        match tree.get(k) {
            Some(Node::Exclude) => {}
            None | Some(Node::Include | Node::Expr(_)) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Node::Slice { skip, limit }) => {
                out.insert(k.clone(), slice(v, *skip, *limit));
            }
            Some(Node::ElemMatch(f)) => {
                if let Some(r) = elem_match(f, v) {
                    out.insert(k.clone(), r);
                }
            }
            Some(Node::Sub(t)) => {
                out.insert(k.clone(), exclude_value(t, v)?);
            }
        }
    }
    Ok(out)
}

fn exclude_value(tree: &Tree, v: &Bson) -> Result<Bson> {
    match v {
        Bson::Document(d) => Ok(Bson::Document(exclude_doc(tree, d)?)),
        Bson::Array(a) => Ok(Bson::Array(a.iter().map(|e| exclude_value(tree, e)).collect::<Result<_>>()?)),
        other => Ok(other.clone()),
    }
}

fn add_doc(tree: &Tree, d: &Document, root: &Document, scope: Option<&Scope<'_>>) -> Result<Document> {
    let mut out = d.clone();
    for (k, node) in &tree.fields {
        match node {
            // Inserting over an existing key keeps its position, as MongoDB's `setField` does.
            Node::Expr(e) => match e.eval_in(root, scope)? {
                Some(v) => {
                    out.insert(k.clone(), v);
                }
                None => {
                    out.remove(k);
                }
            },
            Node::Sub(t) => {
                let new = match out.get(k) {
                    Some(v) => add_value(t, v, root, scope)?,
                    None => Bson::Document(add_doc(t, &Document::new(), root, scope)?),
                };
                out.insert(k.clone(), new);
            }
            _ => {}
        }
    }
    Ok(out)
}

fn add_value(tree: &Tree, v: &Bson, root: &Document, scope: Option<&Scope<'_>>) -> Result<Bson> {
    match v {
        Bson::Document(d) => Ok(Bson::Document(add_doc(tree, d, root, scope)?)),
        Bson::Array(a) => Ok(Bson::Array(a.iter().map(|e| add_value(tree, e, root, scope)).collect::<Result<_>>()?)),
        _ => Ok(Bson::Document(add_doc(tree, &Document::new(), root, scope)?)),
    }
}

#[cfg(test)]
mod tests;
