//! Comparison and document operators: `$cmp`; `$max $min $sum $avg` as expressions (over one
//! array argument, or over their arguments); `$mergeObjects`; `$getField $setField
//! $unsetField` (fields whose names a path cannot spell, such as `a.b` or `$x`); `$isNumber
//! $isArray`; `$rand`; the bitwise `$bitAnd $bitOr $bitXor $bitNot` (ints and longs only);
//! `$bsonSize $binarySize`; `$tsSecond $tsIncrement`.
//!
//! Rules, as MongoDB's: `$sum`/`$avg` skip non-numbers (so `$sum` of nothing is 0 and `$avg`
//! of nothing null); `$max`/`$min` skip null and missing; with several arguments an array
//! argument is a value, not a list.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::{Args, nullish, type_error};
use crate::aggregate::operators::{Num, Operator, compare_opt, type_of};
use crate::error::{QueryError, Result};
use crate::order::compare_values;

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    match op {
        Cmp => Ok(Some(Bson::Int32(match compare_opt(&args.get(0)?, &args.get(1)?) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }))),
        Max | Min | Sum | Avg => {
            let values = operands(args)?;
            Ok(Some(match op {
                Sum => sum(&values)?.0.into(),
                Avg => match sum(&values)? {
                    (_, 0) => Bson::Null,
                    (total, n) => Bson::Double(total.as_f64() / n as f64),
                },
                _ => {
                    let want = if op == Max { Ordering::Greater } else { Ordering::Less };
                    let mut best: Option<Bson> = None;
                    for v in values.into_iter().filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) {
                        if best.as_ref().is_none_or(|b| compare_values(&v, b) == want) {
                            best = Some(v);
                        }
                    }
                    best.unwrap_or(Bson::Null)
                }
            }))
        }
        MergeObjects => {
            let mut out = Document::new();
            for v in args.all()? {
                match v {
                    v if nullish(&v) => {}
                    Some(Bson::Document(d)) => {
                        for (k, v) in d {
                            out.insert(k, v);
                        }
                    }
                    // MongoDB: Location40400.
                    v => {
                        return Err(type_error(format!(
                            "$mergeObjects requires object inputs, but input {} is of type {}",
                            crate::display::value(v.as_ref().unwrap_or(&Bson::Null)),
                            type_of(&v)
                        )));
                    }
                }
            }
            Ok(Some(Bson::Document(out)))
        }
        GetField => {
            let field = field_name(op, args.get(0)?)?;
            match args.get(1)? {
                Some(Bson::Document(d)) => Ok(d.get(&field).cloned()),
                v if nullish(&v) => Ok(Some(Bson::Null)),
                // MongoDB: Location3041705.
                v => Err(type_error(format!(
                    "$getField requires 'input' to evaluate to type Object, but got {}",
                    type_of(&v)
                ))),
            }
        }
        SetField | UnsetField => {
            let field = field_name(op, args.get(0)?)?;
            let mut doc = match args.get(1)? {
                Some(Bson::Document(d)) => d,
                v if nullish(&v) => return Ok(Some(Bson::Null)),
                // MongoDB: Location4161105.
                v => {
                    return Err(type_error(format!(
                        "{} requires 'input' to evaluate to type Object, but got {}",
                        op.name(),
                        type_of(&v)
                    )));
                }
            };
            match if op == SetField { args.get(2)? } else { None } {
                Some(v) => {
                    doc.insert(field, v);
                }
                None => {
                    doc.remove(&field);
                }
            }
            Ok(Some(Bson::Document(doc)))
        }
        IsNumber => Ok(Some(Bson::Boolean(matches!(
            args.get(0)?,
            Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
        )))),
        IsArray => Ok(Some(Bson::Boolean(matches!(args.get(0)?, Some(Bson::Array(_)))))),
        Rand => Ok(Some(Bson::Double(rand::random::<f64>()))),
        BitAnd | BitOr | BitXor | BitNot => bits(op, args),
        BsonSize => match args.get(0)? {
            Some(Bson::Document(d)) => {
                let bytes = d.to_vec().map_err(|e| QueryError::bad_value(format!("$bsonSize: {e}")))?;
                Ok(Some(Bson::Int32(i32::try_from(bytes.len()).unwrap_or(i32::MAX))))
            }
            v if nullish(&v) => Ok(Some(Bson::Null)),
            // MongoDB: Location31393.
            v => Err(type_error(format!("$bsonSize requires a document input, found: {}", type_of(&v)))),
        },
        BinarySize => match args.get(0)? {
            Some(Bson::String(s)) => Ok(Some(Bson::Int32(i32::try_from(s.len()).unwrap_or(i32::MAX)))),
            Some(Bson::Binary(b)) => Ok(Some(Bson::Int32(i32::try_from(b.bytes.len()).unwrap_or(i32::MAX)))),
            v if nullish(&v) => Ok(Some(Bson::Null)),
            // MongoDB: Location51276.
            v => Err(type_error(format!("$binarySize requires a string or BinData argument, found: {}", type_of(&v)))),
        },
        TsSecond | TsIncrement => match args.get(0)? {
            Some(Bson::Timestamp(t)) => {
                Ok(Some(Bson::Int64(i64::from(if op == TsSecond { t.time } else { t.increment }))))
            }
            v if nullish(&v) => Ok(Some(Bson::Null)),
            // MongoDB: Location5687301 / 5687302.
            v => Err(type_error(format!("Argument to {} must be a timestamp, but is {}", op.name(), type_of(&v)))),
        },
        other => Err(type_error(format!("{} is not a misc operator", other.name()))),
    }
}

/// The values `$max`…`$avg` range over: one array argument's elements, else the arguments.
fn operands(args: &Args<'_, '_>) -> Result<Vec<Bson>> {
    let all = args.all()?;
    if let [Some(Bson::Array(a))] = all.as_slice() {
        return Ok(a.clone());
    }
    Ok(all.into_iter().flatten().collect())
}

/// The sum of the numbers among `values`, and how many there were.
fn sum(values: &[Bson]) -> Result<(Num, usize)> {
    let mut total = Num::I32(0);
    let mut n = 0;
    for v in values {
        if let Some(x) = Num::of(v) {
            total = total.add(x?);
            n += 1;
        }
    }
    Ok((total, n))
}

fn field_name(op: Operator, v: Option<Bson>) -> Result<String> {
    match v {
        Some(Bson::String(s)) => Ok(s),
        // MongoDB: Location5654602 / 4161106.
        v => Err(QueryError::bad_value(format!(
            "{} requires 'field' to evaluate to type String, but got {}",
            op.name(),
            type_of(&v)
        ))),
    }
}

/// `$bitAnd $bitOr $bitXor $bitNot`: an int result when every operand is an int, else a long.
fn bits(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let (mut acc, mut long) = match op {
        Operator::BitAnd => (-1i64, false),
        _ => (0i64, false),
    };
    for v in args.all()? {
        let x = match v {
            Some(Bson::Int32(i)) => i64::from(i),
            Some(Bson::Int64(i)) => {
                long = true;
                i
            }
            v if nullish(&v) => return Ok(Some(Bson::Null)),
            // MongoDB: Location28765.
            v => {
                return Err(type_error(format!(
                    "{} only supports int and long operands, not {}",
                    op.name(),
                    type_of(&v)
                )));
            }
        };
        acc = match op {
            Operator::BitAnd => acc & x,
            Operator::BitOr => acc | x,
            Operator::BitXor => acc ^ x,
            _ => !x,
        };
    }
    // Every operand was an int, so the result is one too.
    Ok(Some(if long { Bson::Int64(acc) } else { Bson::Int32(acc as i32) }))
}
