//! The window functions of `$setWindowFields`: accumulators over a window (`$sum $avg $min $max
//! $count $push $addToSet $first $last $stdDevPop $stdDevSamp`), the order-based ones (`$rank
//! $denseRank $documentNumber $shift`), the gap fillers `$fill` desugars to (`$locf
//! $linearFill`) and the calculus ones (`$derivative $integral`).
//!
//! Invariants: a window moving forward is updated, not recomputed, when the function allows it
//! (`$sum $avg $count $stdDev*` drop what leaves; the others extend while the lower bound stays);
//! missing inputs are skipped as `$group` skips them; the `Partition` is sorted already.
//!
//! Must not: hold anything past one partition, or see documents of another partition.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::{Bound, TimeUnit, Window, unit_millis};
use crate::aggregate::expr::{Expr, Scope};
use crate::aggregate::operators::Num;
use crate::error::{QueryError, Result};
use crate::order::{compare_values, number_as_f64};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acc {
    Sum,
    Avg,
    Min,
    Max,
    Count,
    Push,
    AddToSet,
    First,
    Last,
    StdDevPop,
    StdDevSamp,
}

pub(crate) enum Function {
    Acc(Acc, Expr),
    Rank,
    DenseRank,
    DocumentNumber,
    Shift { output: Expr, by: i64, default: Bson },
    Locf(Expr),
    LinearFill(Expr),
    Derivative { input: Expr, unit: Option<i64> },
    Integral { input: Expr, unit: Option<i64> },
}

/// One sorted partition, as the functions see it.
pub(crate) struct Partition<'a> {
    /// Each document's input value (the function's expression), `None` when missing.
    pub(crate) inputs: &'a [Option<Bson>],
    /// Each document's single `sortBy` value (`None` without one).
    pub(crate) sort_values: &'a [Option<Bson>],
    pub(crate) docs: &'a [Document],
}

fn bad(message: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(message)
}

fn require_one_sort_key(name: &str, sort_fields: usize) -> Result<()> {
    if sort_fields != 1 {
        // MongoDB: Location5371602.
        return Err(bad(format!(
            "{name} must be specified with a top level sortBy expression with exactly one element"
        )));
    }
    Ok(())
}

fn empty_args(name: &str, arg: &Bson) -> Result<()> {
    match arg {
        Bson::Document(d) if d.is_empty() => Ok(()),
        _ => Err(bad(format!("{name} takes no arguments, i.e. {name}: {{}}"))),
    }
}

impl Function {
    /// `{<function>: <arg>, window: {…}}` under `sort_fields` sort keys.
    pub(crate) fn parse(spec: &Document, sort_fields: usize) -> Result<(Function, Window)> {
        let mut function = None;
        let mut window = None;
        for (k, v) in spec {
            if k == "window" {
                window = Some(parse_window(v, sort_fields)?);
            } else if function.is_some() {
                return Err(bad(format!("Window function found an unknown argument: {k}")));
            } else {
                function = Some((k.as_str(), v));
            }
        }
        let Some((name, arg)) = function else {
            return Err(bad("Expected a window function in each $setWindowFields output field"));
        };
        let acc = |a: Acc| -> Result<Function> {
            if matches!(arg, Bson::Array(_)) {
                return Err(bad(format!("The {name} accumulator is a unary operator")));
            }
            Ok(Function::Acc(a, Expr::parse(arg)?))
        };
        let no_window = |f: Function| -> Result<Function> {
            if window.is_some() {
                return Err(bad(format!("{name} does not accept a 'window' field")));
            }
            Ok(f)
        };
        let f = match name {
            "$sum" => acc(Acc::Sum)?,
            "$avg" => acc(Acc::Avg)?,
            "$min" => acc(Acc::Min)?,
            "$max" => acc(Acc::Max)?,
            "$push" => acc(Acc::Push)?,
            "$addToSet" => acc(Acc::AddToSet)?,
            "$first" => acc(Acc::First)?,
            "$last" => acc(Acc::Last)?,
            "$stdDevPop" => acc(Acc::StdDevPop)?,
            "$stdDevSamp" => acc(Acc::StdDevSamp)?,
            "$count" => {
                empty_args(name, arg)?;
                Function::Acc(Acc::Count, Expr::Literal(Bson::Int32(1)))
            }
            "$rank" | "$denseRank" | "$documentNumber" => {
                empty_args(name, arg)?;
                require_one_sort_key(name, sort_fields)?;
                no_window(match name {
                    "$rank" => Function::Rank,
                    "$denseRank" => Function::DenseRank,
                    _ => Function::DocumentNumber,
                })?
            }
            "$shift" => {
                if sort_fields == 0 {
                    return Err(bad("$shift requires a sortBy"));
                }
                no_window(parse_shift(arg)?)?
            }
            "$locf" => no_window(Function::Locf(Expr::parse(arg)?))?,
            "$linearFill" => {
                require_one_sort_key(name, sort_fields)?;
                no_window(Function::LinearFill(Expr::parse(arg)?))?
            }
            "$derivative" | "$integral" => {
                require_one_sort_key(name, sort_fields)?;
                let Bson::Document(d) = arg else {
                    return Err(bad(format!("{name} expects an object with 'input' and optional 'unit'")));
                };
                let (mut input, mut unit) = (None, None);
                for (k, v) in d {
                    match k.as_str() {
                        "input" => input = Some(Expr::parse(v)?),
                        "unit" => unit = Some(unit_millis(v)?),
                        other => return Err(bad(format!("{name} got unexpected argument: {other}"))),
                    }
                }
                let input = input.ok_or_else(|| bad(format!("{name} requires an 'input' expression")))?;
                if name == "$derivative" {
                    if window.is_none() {
                        return Err(bad("$derivative requires explicit window bounds"));
                    }
                    Function::Derivative { input, unit }
                } else {
                    Function::Integral { input, unit }
                }
            }
            other => return Err(bad(format!("Unrecognized window function, {other}"))),
        };
        Ok((f, window.unwrap_or(Window::Documents(Bound::Unbounded, Bound::Unbounded))))
    }

    /// Each document's input value.
    pub(crate) fn inputs(&self, docs: &[Document], scope: Option<&Scope<'_>>) -> Result<Vec<Option<Bson>>> {
        let expr = match self {
            Function::Acc(_, e)
            | Function::Shift { output: e, .. }
            | Function::Locf(e)
            | Function::LinearFill(e)
            | Function::Derivative { input: e, .. }
            | Function::Integral { input: e, .. } => e,
            Function::Rank | Function::DenseRank | Function::DocumentNumber => return Ok(vec![None; docs.len()]),
        };
        docs.iter().map(|d| expr.eval_in(d, scope)).collect()
    }

    /// The function's value for every document of the partition; `window(i)` gives document
    /// `i`'s window as inclusive indexes.
    pub(crate) fn compute(
        &self,
        p: &Partition<'_>,
        window: impl Fn(usize) -> Result<Option<(usize, usize)>>,
    ) -> Result<Vec<Bson>> {
        let n = p.docs.len();
        let mut out = Vec::with_capacity(n);
        match self {
            Function::Acc(kind, _) => {
                let mut run = Running::new(*kind);
                for i in 0..n {
                    out.push(run.window(p.inputs, window(i)?)?);
                }
            }
            Function::DocumentNumber => out.extend((1..=n).map(int_or_long)),
            Function::Rank | Function::DenseRank => {
                let (mut rank, mut dense) = (0usize, 0usize);
                for i in 0..n {
                    let same = i > 0 && sort_key_equal(p.sort_values, i - 1, i);
                    if !same {
                        rank = i + 1;
                        dense += 1;
                    }
                    out.push(int_or_long(if matches!(self, Function::Rank) { rank } else { dense }));
                }
            }
            Function::Shift { by, default, .. } => {
                for i in 0..n {
                    let at = (i as i64).checked_add(*by).filter(|j| *j >= 0 && (*j as usize) < n);
                    out.push(match at {
                        Some(j) => p.inputs[j as usize].clone().unwrap_or(Bson::Null),
                        None => default.clone(),
                    });
                }
            }
            Function::Locf(_) => {
                let mut last = Bson::Null;
                for v in p.inputs {
                    if let Some(v) = v.as_ref().filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) {
                        last = v.clone();
                    }
                    out.push(last.clone());
                }
            }
            Function::LinearFill(_) => out = linear_fill(p)?,
            Function::Derivative { unit, .. } => {
                for i in 0..n {
                    out.push(match window(i)? {
                        Some((lo, hi)) if lo < hi => {
                            let (x0, x1) = (axis(p, lo, *unit, "$derivative")?, axis(p, hi, *unit, "$derivative")?);
                            match (num(&p.inputs[lo]), num(&p.inputs[hi])) {
                                (Some(y0), Some(y1)) if x1 != x0 => Bson::Double((y1 - y0) / (x1 - x0)),
                                _ => Bson::Null,
                            }
                        }
                        _ => Bson::Null,
                    });
                }
            }
            Function::Integral { unit, .. } => {
                for i in 0..n {
                    out.push(match window(i)? {
                        Some((lo, hi)) => {
                            let mut area = 0.0;
                            for j in lo..hi {
                                let dx = axis(p, j + 1, *unit, "$integral")? - axis(p, j, *unit, "$integral")?;
                                if let (Some(a), Some(b)) = (num(&p.inputs[j]), num(&p.inputs[j + 1])) {
                                    area += dx * (a + b) / 2.0;
                                }
                            }
                            Bson::Double(area)
                        }
                        None => Bson::Null,
                    });
                }
            }
        }
        Ok(out)
    }
}

fn parse_shift(arg: &Bson) -> Result<Function> {
    let Bson::Document(d) = arg else { return Err(bad("Argument to $shift must be an object")) };
    let (mut output, mut by, mut default) = (None, None, Bson::Null);
    for (k, v) in d {
        match k.as_str() {
            "output" => output = Some(Expr::parse(v)?),
            "by" => {
                by = Some(match v {
                    Bson::Int32(n) => i64::from(*n),
                    Bson::Int64(n) => *n,
                    Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9e15 => *f as i64,
                    _ => return Err(bad("'$shift:by' field must be an integer, but found a non-integer")),
                })
            }
            "default" => match Expr::parse(v)? {
                Expr::Literal(c) => default = c,
                _ => return Err(bad("'$shift:default' expression must yield a constant value.")),
            },
            other => return Err(bad(format!("Unknown argument in $shift: {other}"))),
        }
    }
    let output = output.ok_or_else(|| bad("$shift requires an 'output' expression."))?;
    let by = by.ok_or_else(|| bad("$shift requires 'by' as an integer value."))?;
    Ok(Function::Shift { output, by, default })
}

fn bound(v: &Bson, documents: bool) -> Result<Bound> {
    match v {
        Bson::String(s) if s == "unbounded" => Ok(Bound::Unbounded),
        Bson::String(s) if s == "current" => Ok(Bound::Current),
        v => match number_as_f64(v) {
            Some(f) if documents && f.fract() == 0.0 && f.is_finite() => Ok(Bound::Offset(f)),
            Some(f) if !documents && f.is_finite() => Ok(Bound::Offset(f)),
            _ if documents => Err(bad("Numeric document-based bounds must be an integer")),
            _ => Err(bad("Range-based bounds expression must be a number")),
        },
    }
}

fn offset(b: Bound, unbounded: f64) -> f64 {
    match b {
        Bound::Unbounded => unbounded,
        Bound::Current => 0.0,
        Bound::Offset(o) => o,
    }
}

fn parse_window(v: &Bson, sort_fields: usize) -> Result<Window> {
    let Bson::Document(d) = v else { return Err(bad("'window' field must be an object")) };
    let (mut documents, mut range, mut unit) = (None, None, None);
    for (k, v) in d {
        match k.as_str() {
            "documents" => documents = Some(v),
            "range" => range = Some(v),
            "unit" => unit = Some(TimeUnit::parse(v)?),
            other => {
                return Err(bad(format!(
                    "'window' field that started with 'documents' or 'range' got unknown field: {other}"
                )));
            }
        }
    }
    let pair = |v: &Bson, documents: bool| -> Result<(Bound, Bound)> {
        match v {
            Bson::Array(a) if a.len() == 2 => {
                let (lo, hi) = (bound(&a[0], documents)?, bound(&a[1], documents)?);
                if offset(lo, f64::NEG_INFINITY) > offset(hi, f64::INFINITY) {
                    return Err(bad("Lower bound must not exceed upper bound"));
                }
                Ok((lo, hi))
            }
            _ => Err(bad("Window bounds must be a 2-element array")),
        }
    };
    match (documents, range) {
        (Some(_), Some(_)) => Err(bad("Window bounds can specify either 'documents' or 'range', not both")),
        (Some(v), None) => {
            if unit.is_some() {
                return Err(bad("Document-based bounds can't have a 'unit'"));
            }
            let (lo, hi) = pair(v, true)?;
            if sort_fields == 0 && (lo, hi) != (Bound::Unbounded, Bound::Unbounded) {
                return Err(bad("Document-based bounds require a sortBy"));
            }
            Ok(Window::Documents(lo, hi))
        }
        (None, Some(v)) => {
            if sort_fields != 1 {
                return Err(bad("Range-based bounds require sortBy a single field"));
            }
            let (lo, hi) = pair(v, false)?;
            let whole = |b: Bound| !matches!(b, Bound::Offset(o) if o.fract() != 0.0);
            if unit.is_some() && !(whole(lo) && whole(hi)) {
                return Err(bad("With a 'unit', range-based bounds must be whole numbers"));
            }
            Ok(Window::Range(lo, hi, unit))
        }
        (None, None) => Err(bad("'window' field must specify 'documents' or 'range'")),
    }
}

fn int_or_long(n: usize) -> Bson {
    i32::try_from(n).map_or_else(|_| Bson::Int64(i64::try_from(n).unwrap_or(i64::MAX)), Bson::Int32)
}

fn num(v: &Option<Bson>) -> Option<f64> {
    v.as_ref().filter(|v| !matches!(v, Bson::Decimal128(_))).and_then(number_as_f64)
}

fn sort_key_equal(values: &[Option<Bson>], a: usize, b: usize) -> bool {
    let null = Bson::Null;
    compare_values(values[a].as_ref().unwrap_or(&null), values[b].as_ref().unwrap_or(&null)) == Ordering::Equal
}

/// Document `i`'s position on the `sortBy` axis (dates in `unit`s), for `$derivative`,
/// `$integral` and `$linearFill`.
fn axis(p: &Partition<'_>, i: usize, unit: Option<i64>, name: &str) -> Result<f64> {
    match (&p.sort_values[i], unit) {
        (Some(Bson::DateTime(d)), Some(u)) => Ok(d.timestamp_millis() as f64 / u as f64),
        (Some(Bson::DateTime(d)), None) if name == "$linearFill" => Ok(d.timestamp_millis() as f64),
        (Some(Bson::DateTime(_)), None) => {
            Err(QueryError::bad_value(format!("{name} where the sortBy is a Date requires an 'unit'")))
        }
        (Some(v), None) if number_as_f64(v).is_some() => Ok(number_as_f64(v).unwrap_or(0.0)),
        (v, _) => Err(QueryError::bad_value(format!(
            "{name} requires the sortBy field to be a number{}, got {}",
            if unit.is_some() { " or a date with 'unit'" } else { "" },
            v.as_ref().map_or("missing", crate::display::type_name)
        ))),
    }
}

fn linear_fill(p: &Partition<'_>) -> Result<Vec<Bson>> {
    let n = p.docs.len();
    let present: Vec<usize> =
        (0..n).filter(|&i| !matches!(p.inputs[i], None | Some(Bson::Null | Bson::Undefined))).collect();
    let mut out = Vec::with_capacity(n);
    let mut next_at = 0usize;
    for i in 0..n {
        if let Some(v) = p.inputs[i].as_ref().filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) {
            out.push(v.clone());
            next_at += 1;
            continue;
        }
        let prev = next_at.checked_sub(1).map(|k| present[k]);
        let next = present.get(next_at).copied();
        out.push(match (prev, next) {
            (Some(a), Some(b)) => {
                let (xa, xb, xi) = (
                    axis(p, a, None, "$linearFill")?,
                    axis(p, b, None, "$linearFill")?,
                    axis(p, i, None, "$linearFill")?,
                );
                match (num(&p.inputs[a]), num(&p.inputs[b])) {
                    (Some(ya), Some(yb)) if xb != xa => Bson::Double(ya + (yb - ya) * (xi - xa) / (xb - xa)),
                    _ => {
                        return Err(QueryError::type_mismatch(
                            "$linearFill only supports numeric types for the input expression",
                        ));
                    }
                }
            }
            _ => Bson::Null,
        });
    }
    Ok(out)
}

/// A value ordered by MongoDB's comparison, for `$addToSet`.
struct Ord(Bson);
impl PartialEq for Ord {
    fn eq(&self, o: &Self) -> bool {
        compare_values(&self.0, &o.0) == Ordering::Equal
    }
}
impl Eq for Ord {}
impl PartialOrd for Ord {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(std::cmp::Ord::cmp(self, o))
    }
}
impl std::cmp::Ord for Ord {
    fn cmp(&self, o: &Self) -> Ordering {
        compare_values(&self.0, &o.0)
    }
}

/// An accumulator over the current window, moved along the partition.
struct Running {
    kind: Acc,
    at: Option<(usize, usize)>,
    sum: Num,
    /// Numeric values in the window (`$avg`, `$stdDev*`) or documents (`$count`).
    count: u64,
    mean: f64,
    m2: f64,
    extreme: Option<Bson>,
    items: Vec<Bson>,
    seen: BTreeSet<Ord>,
    last: Bson,
}

impl Running {
    fn new(kind: Acc) -> Running {
        Running {
            kind,
            at: None,
            sum: Num::I32(0),
            count: 0,
            mean: 0.0,
            m2: 0.0,
            extreme: None,
            items: Vec::new(),
            seen: BTreeSet::new(),
            last: Bson::Null,
        }
    }

    fn reset(&mut self) {
        *self = Running::new(self.kind);
    }

    fn removable(&self) -> bool {
        matches!(self.kind, Acc::Sum | Acc::Avg | Acc::Count | Acc::StdDevPop | Acc::StdDevSamp)
    }

    /// The value over `inputs[lo..=hi]`, moving from the previous window.
    fn window(&mut self, inputs: &[Option<Bson>], w: Option<(usize, usize)>) -> Result<Bson> {
        if matches!(self.kind, Acc::First | Acc::Last) {
            return Ok(match w {
                Some((lo, hi)) => inputs[if self.kind == Acc::First { lo } else { hi }].clone().unwrap_or(Bson::Null),
                None => Bson::Null,
            });
        }
        if w != self.at {
            match (self.at, w) {
                (_, None) => self.reset(),
                (Some((plo, phi)), Some((lo, hi)))
                    if lo >= plo && hi >= phi && lo <= phi + 1 && (lo == plo || self.removable()) =>
                {
                    for v in &inputs[plo..lo] {
                        self.remove(v.as_ref())?;
                    }
                    for v in &inputs[phi + 1..=hi] {
                        self.add(v.as_ref())?;
                    }
                }
                (_, Some((lo, hi))) => {
                    self.reset();
                    for v in &inputs[lo..=hi] {
                        self.add(v.as_ref())?;
                    }
                }
            }
            self.at = w;
            self.last = self.value();
        }
        Ok(self.last.clone())
    }

    fn add(&mut self, v: Option<&Bson>) -> Result<()> {
        match self.kind {
            Acc::Count => self.sum = self.sum.add(Num::I32(1)),
            Acc::Sum | Acc::Avg => {
                if let Some(n) = v.and_then(Num::of) {
                    self.sum = self.sum.add(n?);
                    self.count += 1;
                }
            }
            Acc::StdDevPop | Acc::StdDevSamp => {
                if let Some(n) = v.and_then(Num::of) {
                    let x = n?.as_f64();
                    self.count += 1;
                    let d = x - self.mean;
                    self.mean += d / self.count as f64;
                    self.m2 += d * (x - self.mean);
                }
            }
            Acc::Min | Acc::Max => {
                let want = if self.kind == Acc::Min { Ordering::Less } else { Ordering::Greater };
                if let Some(v) = v.filter(|v| !matches!(v, Bson::Null | Bson::Undefined))
                    && self.extreme.as_ref().is_none_or(|c| compare_values(v, c) == want)
                {
                    self.extreme = Some(v.clone());
                }
            }
            Acc::Push => self.items.extend(v.cloned()),
            Acc::AddToSet => {
                if let Some(v) = v
                    && self.seen.insert(Ord(v.clone()))
                {
                    self.items.push(v.clone());
                }
            }
            Acc::First | Acc::Last => {}
        }
        Ok(())
    }

    fn remove(&mut self, v: Option<&Bson>) -> Result<()> {
        match self.kind {
            Acc::Count => self.sum = self.sum.sub(Num::I32(1)),
            Acc::Sum | Acc::Avg => {
                if let Some(n) = v.and_then(Num::of) {
                    self.sum = self.sum.sub(n?);
                    self.count -= 1;
                }
            }
            Acc::StdDevPop | Acc::StdDevSamp => {
                if let Some(n) = v.and_then(Num::of) {
                    let x = n?.as_f64();
                    if self.count <= 1 {
                        (self.count, self.mean, self.m2) = (0, 0.0, 0.0);
                    } else {
                        let old_mean = (self.mean * self.count as f64 - x) / (self.count - 1) as f64;
                        self.m2 -= (x - self.mean) * (x - old_mean);
                        self.mean = old_mean;
                        self.count -= 1;
                        self.m2 = self.m2.max(0.0);
                    }
                }
            }
            _ => {
                return Err(QueryError::new(ErrorCode::InternalError, "window accumulator cannot remove values"));
            }
        }
        Ok(())
    }

    fn value(&self) -> Bson {
        match self.kind {
            Acc::Sum | Acc::Count => self.sum.into(),
            Acc::Avg if self.count == 0 => Bson::Null,
            Acc::Avg => Bson::Double(self.sum.as_f64() / self.count as f64),
            Acc::Min | Acc::Max => self.extreme.clone().unwrap_or(Bson::Null),
            Acc::Push | Acc::AddToSet => Bson::Array(self.items.clone()),
            Acc::StdDevPop if self.count == 0 => Bson::Null,
            Acc::StdDevSamp if self.count < 2 => Bson::Null,
            Acc::StdDevPop => Bson::Double((self.m2 / self.count as f64).sqrt()),
            Acc::StdDevSamp => Bson::Double((self.m2 / (self.count - 1) as f64).sqrt()),
            Acc::First | Acc::Last => Bson::Null,
        }
    }
}
