//! Array operators: `$arrayElemAt`, `$concatArrays`, `$first $last $firstN $lastN $maxN $minN` (expression
//! forms), `$indexOfArray`, `$range`, `$reverseArray`, `$slice`, `$zip`, `$arrayToObject
//! $objectToArray`, `$sortArray`, `$allElementsTrue $anyElementTrue`. (`$reduce`, which binds
//! variables, is in `scoped`.)
//!
//! Bounded: `$range` refuses to build more than [`RANGE_MEMORY_BYTES_MAX`] worth of elements,
//! as MongoDB does, so one expression cannot take the shard's memory.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::{Args, integral, nullish, type_error};
use crate::aggregate::operators::{Operator, truthy, type_of};
use crate::error::{QueryError, Result};
use crate::order::{compare_values, values_equal};
use crate::sort::SortSpec;

/// The most a `$range` may build, in bytes (MongoDB's `internalQueryMaxRangeBytes`, 64 MiB).
pub(crate) const RANGE_MEMORY_BYTES_MAX: usize = 64 << 20;

/// What one `$range` element costs towards that bound (MongoDB counts a `Value`, 16 bytes).
const RANGE_ELEMENT_BYTES: usize = 16;

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    let name = op.name();
    match op {
        ArrayElemAt => array_elem_at(args.get(0)?, args.get(1)?),
        ConcatArrays => {
            let mut out = Vec::new();
            for v in args.all()? {
                match v {
                    Some(Bson::Array(a)) => out.extend(a),
                    v if nullish(&v) => return Ok(Some(Bson::Null)),
                    // MongoDB: Location28664.
                    v => return Err(type_error(format!("$concatArrays only supports arrays, not {}", type_of(&v)))),
                }
            }
            Ok(Some(Bson::Array(out)))
        }
        First | Last => {
            let v = args.get(0)?;
            if let Some(Bson::Array(a)) = &v
                && a.is_empty()
            {
                return Ok(None);
            }
            if !nullish(&v) && !matches!(v, Some(Bson::Array(_))) {
                // MongoDB: Location28689.
                return Err(type_error(format!("{name}'s argument must be an array, but is {}", type_of(&v))));
            }
            array_elem_at(v, Some(Bson::Int32(if op == First { 0 } else { -1 })))
        }
        FirstN | LastN | MaxN | MinN => {
            let n = match args.get(1)? {
                Some(v) if integral(&v).is_some_and(|n| n > 0) => {
                    usize::try_from(integral(&v).unwrap_or(1)).unwrap_or(usize::MAX)
                }
                // MongoDB: Location5787908 / 5787902.
                v => {
                    return Err(QueryError::bad_value(format!(
                        "{name}: 'n' must be a positive integer, found {}",
                        v.as_ref().map_or("missing".to_owned(), crate::display::value)
                    )));
                }
            };
            let Some(mut items) = array(name, args.get(0)?)? else { return Ok(Some(Bson::Null)) };
            Ok(Some(Bson::Array(match op {
                FirstN => items.into_iter().take(n).collect(),
                LastN => items.split_off(items.len().saturating_sub(n)),
                _ => {
                    items.retain(|v| !matches!(v, Bson::Null | Bson::Undefined));
                    items.sort_by(|a, b| if op == MaxN { compare_values(b, a) } else { compare_values(a, b) });
                    items.truncate(n);
                    items
                }
            })))
        }
        IndexOfArray => {
            let v = args.get(0)?;
            if nullish(&v) {
                return Ok(Some(Bson::Null));
            }
            let Some(Bson::Array(a)) = v else {
                // MongoDB: Location40090.
                return Err(type_error(format!(
                    "$indexOfArray requires an array as a first argument, found: {}",
                    type_of(&v)
                )));
            };
            let needle = args.get(1)?.unwrap_or(Bson::Undefined);
            let start = if args.len() > 2 { position(name, "starting index", args.get(2)?)? } else { 0 };
            let end = if args.len() > 3 { position(name, "ending index", args.get(3)?)? } else { a.len() };
            let found = a.iter().enumerate().take(end).skip(start).find(|(_, e)| values_equal(e, &needle));
            Ok(Some(found.map_or(Bson::Int32(-1), |(i, _)| Bson::Int32(i32::try_from(i).unwrap_or(i32::MAX)))))
        }
        Range => range(args),
        ReverseArray => match args.get(0)? {
            Some(Bson::Array(mut a)) => {
                a.reverse();
                Ok(Some(Bson::Array(a)))
            }
            v if nullish(&v) => Ok(Some(Bson::Null)),
            // MongoDB: Location34435.
            v => Err(type_error(format!(
                "The argument to $reverseArray must be an array, but was of type: {}",
                type_of(&v)
            ))),
        },
        Slice => slice(args),
        Zip => zip(args),
        ArrayToObject => array_to_object(args.get(0)?),
        ObjectToArray => match args.get(0)? {
            Some(Bson::Document(d)) => {
                Ok(Some(Bson::Array(d.into_iter().map(|(k, v)| Bson::Document(bson::doc! {"k": k, "v": v})).collect())))
            }
            v if nullish(&v) => Ok(Some(Bson::Null)),
            // MongoDB: Location40390.
            v => Err(type_error(format!("$objectToArray requires a document input, found: {}", type_of(&v)))),
        },
        SortArray => sort_array(args),
        AllElementsTrue | AnyElementTrue => match args.get(0)? {
            Some(Bson::Array(a)) => {
                let all = op == AllElementsTrue;
                Ok(Some(Bson::Boolean(if all {
                    a.iter().all(|e| truthy(Some(e)))
                } else {
                    a.iter().any(|e| truthy(Some(e)))
                })))
            }
            // MongoDB: Location17040 / 17041.
            v => Err(type_error(format!("{name}'s argument must be an array, but is {}", type_of(&v)))),
        },
        other => Err(type_error(format!("{} is not an array operator", other.name()))),
    }
}

/// An array argument: `None` for null or missing.
fn array(name: &str, v: Option<Bson>) -> Result<Option<Vec<Bson>>> {
    match v {
        Some(Bson::Array(a)) => Ok(Some(a)),
        v if nullish(&v) => Ok(None),
        // MongoDB: Location5154700.
        v => Err(type_error(format!("{name} requires 'input' to be an array, found {}", type_of(&v)))),
    }
}

fn position(name: &str, what: &str, v: Option<Bson>) -> Result<usize> {
    match v.as_ref().and_then(integral) {
        Some(n) => usize::try_from(n)
            // MongoDB: Location40097.
            .map_err(|_| QueryError::bad_value(format!("{name} requires a nonnegative {what}, found: {n}"))),
        // MongoDB: Location40096.
        None => Err(type_error(format!("{name} requires an integral {what}, found a value of type: {}", type_of(&v)))),
    }
}

/// An argument that must be an int32 (`$range`, `$slice`).
fn int32(name: &str, what: &str, v: &Option<Bson>) -> Result<i64> {
    match v.as_ref().map(|b| (b, integral(b))) {
        Some((_, Some(n))) if i32::try_from(n).is_ok() => Ok(n),
        Some((b, Some(_))) => Err(QueryError::bad_value(format!(
            "{name} requires {what} that can be represented as a 32-bit integer, found value: {}",
            crate::display::value(b)
        ))),
        _ => Err(type_error(format!("{name} requires {what} of integral type, found: {}", type_of(v)))),
    }
}

fn range(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let start = int32("$range", "a starting value", &args.get(0)?)?;
    let end = int32("$range", "an ending value", &args.get(1)?)?;
    let step = if args.len() > 2 { int32("$range", "a step value", &args.get(2)?)? } else { 1 };
    if step == 0 {
        // MongoDB: Location34449.
        return Err(QueryError::bad_value("$range requires a non-zero step value"));
    }
    let count = if (step > 0 && end > start) || (step < 0 && end < start) {
        (end - start).unsigned_abs().div_ceil(step.unsigned_abs())
    } else {
        0
    };
    let bytes = usize::try_from(count).unwrap_or(usize::MAX).saturating_mul(RANGE_ELEMENT_BYTES);
    if bytes > RANGE_MEMORY_BYTES_MAX {
        // MongoDB: Location548702.
        return Err(QueryError::new(
            ErrorCode::ExceededMemoryLimit,
            format!(
                "$range would use too much memory ({bytes} bytes) and cannot spill to disk. Memory limit: \
                 {RANGE_MEMORY_BYTES_MAX} bytes"
            ),
        ));
    }
    let out = (0..count as i64).map(|i| Bson::Int32((start + i * step) as i32)).collect();
    Ok(Some(Bson::Array(out)))
}

fn slice(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let v = args.get(0)?;
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(a)) = v else {
        // MongoDB: Location28724.
        return Err(type_error(format!("First argument to $slice must be an array, but is of type: {}", type_of(&v))));
    };
    let second = args.get(1)?;
    if nullish(&second) {
        return Ok(Some(Bson::Null));
    }
    let len = a.len() as i64;
    let (from, count) = if args.len() == 2 {
        let n = int32("$slice", "a second argument", &second)?;
        if n >= 0 { (0, n) } else { ((len + n).max(0), -n) }
    } else {
        let third = args.get(2)?;
        if nullish(&third) {
            return Ok(Some(Bson::Null));
        }
        let pos = int32("$slice", "a second argument", &second)?;
        let n = int32("$slice", "a third argument", &third)?;
        if n <= 0 {
            // MongoDB: Location28729.
            return Err(QueryError::bad_value(format!("Third argument to $slice must be positive: {n}")));
        }
        (if pos >= 0 { pos.min(len) } else { (len + pos).max(0) }, n)
    };
    let from = usize::try_from(from).unwrap_or(0);
    let count = usize::try_from(count).unwrap_or(0);
    Ok(Some(Bson::Array(a.into_iter().skip(from).take(count).collect())))
}

fn zip(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let inputs = match args.get(0)? {
        Some(Bson::Array(a)) => a,
        // MongoDB: Location34461.
        v => return Err(type_error(format!("inputs must be an array of expressions, found {}", type_of(&v)))),
    };
    let longest = match args.get(1)? {
        None => false,
        Some(Bson::Boolean(b)) => b,
        // MongoDB: Location34463.
        v => return Err(type_error(format!("useLongestLength must be a bool, found {}", type_of(&v)))),
    };
    let defaults = match args.get(2)? {
        None => None,
        Some(Bson::Array(d)) if longest && d.len() == inputs.len() => Some(d),
        // MongoDB: Location34466.
        Some(Bson::Array(_)) if !longest => {
            return Err(QueryError::bad_value("cannot specify defaults unless useLongestLength is true"));
        }
        // MongoDB: Location34467.
        Some(Bson::Array(_)) => {
            return Err(QueryError::bad_value("defaults and inputs must have the same length"));
        }
        // MongoDB: Location34462.
        v => return Err(type_error(format!("defaults must be an array, found {}", type_of(&v)))),
    };
    let mut arrays = Vec::with_capacity(inputs.len());
    for input in inputs {
        match input {
            Bson::Array(a) => arrays.push(a),
            Bson::Null | Bson::Undefined => return Ok(Some(Bson::Null)),
            // MongoDB: Location34468.
            other => {
                return Err(type_error(format!(
                    "$zip found a non-array expression in input: {}",
                    crate::display::value(&other)
                )));
            }
        }
    }
    let lens = arrays.iter().map(Vec::len);
    let n = if longest { lens.max().unwrap_or(0) } else { lens.min().unwrap_or(0) };
    let out = (0..n)
        .map(|i| {
            Bson::Array(
                arrays
                    .iter()
                    .enumerate()
                    .map(|(j, a)| {
                        a.get(i)
                            .cloned()
                            .unwrap_or_else(|| defaults.as_ref().and_then(|d| d.get(j)).cloned().unwrap_or(Bson::Null))
                    })
                    .collect(),
            )
        })
        .collect();
    Ok(Some(Bson::Array(out)))
}

fn array_to_object(v: Option<Bson>) -> Result<Option<Bson>> {
    let items = match v {
        Some(Bson::Array(a)) => a,
        v if nullish(&v) => return Ok(Some(Bson::Null)),
        // MongoDB: Location40386.
        v => return Err(type_error(format!("$arrayToObject requires an array input, found: {}", type_of(&v)))),
    };
    let mut out = Document::new();
    for item in items {
        let (k, v) = match item {
            Bson::Array(mut pair) if pair.len() == 2 => {
                let v = pair.pop().unwrap_or(Bson::Null);
                (pair.pop().unwrap_or(Bson::Null), v)
            }
            Bson::Document(mut d) if d.len() == 2 && d.contains_key("k") && d.contains_key("v") => {
                (d.remove("k").unwrap_or(Bson::Null), d.remove("v").unwrap_or(Bson::Null))
            }
            // MongoDB: Location40397 / 40392.
            other => {
                return Err(QueryError::bad_value(format!(
                    "$arrayToObject requires an array of key-value pairs, where each pair is either a 2-element \
                     array or an object with exactly the fields 'k' and 'v', found: {}",
                    crate::display::value(&other)
                )));
            }
        };
        let Bson::String(k) = k else {
            // MongoDB: Location40395.
            return Err(type_error(format!(
                "$arrayToObject requires keys to be of type string, found: {}",
                crate::display::type_name(&k)
            )));
        };
        if k.contains('\0') {
            // MongoDB: Location4940400.
            return Err(QueryError::bad_value("Key field cannot contain an embedded null byte"));
        }
        out.insert(k, v);
    }
    Ok(Some(Bson::Document(out)))
}

fn sort_array(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let by = args.get(1)?;
    let items = match args.get(0)? {
        Some(Bson::Array(a)) => a,
        v if nullish(&v) => return Ok(Some(Bson::Null)),
        // MongoDB: Location2942504.
        v => {
            return Err(type_error(format!(
                "The input argument to $sortArray must be an array, but was of type: {}",
                type_of(&v)
            )));
        }
    };
    let mut items = items;
    match by {
        Some(Bson::Document(spec)) => {
            let spec = SortSpec::parse(&spec)?;
            let empty = Document::new();
            items.sort_by(|a, b| {
                let da = if let Bson::Document(d) = a { d } else { &empty };
                let db = if let Bson::Document(d) = b { d } else { &empty };
                spec.compare(da, db)
            });
        }
        Some(ref v) if matches!(integral(v), Some(1 | -1)) => {
            let descending = integral(v) == Some(-1);
            items.sort_by(|a, b| if descending { compare_values(b, a) } else { compare_values(a, b) });
        }
        // MongoDB: Location2942505.
        _ => {
            return Err(QueryError::bad_value(
                "$sortArray requires sortBy to be 1, -1, or a sort specification object",
            ));
        }
    }
    Ok(Some(Bson::Array(items)))
}

fn array_elem_at(array: Option<Bson>, index: Option<Bson>) -> Result<Option<Bson>> {
    if nullish(&array) || nullish(&index) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(a)) = array else {
        // MongoDB: Location28689.
        return Err(type_error(format!("$arrayElemAt's first argument must be an array, but is {}", type_of(&array))));
    };
    let idx = match &index {
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) if i32::try_from(*i).is_ok() => *i,
        Some(Bson::Double(f)) if f.fract() == 0.0 && *f >= f64::from(i32::MIN) && *f <= f64::from(i32::MAX) => {
            *f as i64
        }
        Some(v @ (Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            // MongoDB: Location28691.
            return Err(QueryError::bad_value(format!(
                "$arrayElemAt's second argument must be representable as a 32-bit integer: {}",
                crate::display::value(v)
            )));
        }
        _ => {
            // MongoDB: Location28690.
            return Err(type_error(format!(
                "$arrayElemAt's second argument must be a numeric value, but is {}",
                type_of(&index)
            )));
        }
    };
    let len = a.len() as i64;
    let at = if idx < 0 { len + idx } else { idx };
    Ok(usize::try_from(at).ok().and_then(|i| a.get(i)).cloned())
}
