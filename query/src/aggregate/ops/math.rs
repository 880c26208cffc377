//! Arithmetic beyond `$add`…`$mod`: `$abs $ceil $floor $trunc $round $sqrt $pow $exp $ln $log
//! $log10`, and trigonometry (`$sin`…`$atanh`, `$atan2`, `$degreesToRadians`,
//! `$radiansToDegrees`).
//!
//! Rules, as MongoDB's: a null or missing operand gives null; integers stay integers where the
//! result is integral (`$abs`, `$ceil`, `$floor`, `$trunc`, `$round`, `$pow`), widening int32 to
//! int64 to double on overflow; everything else gives a double. `$round` of a double rounds half
//! to even on its 15-significant-digit decimal value (MongoDB goes through Decimal128 the same
//! way), so `$round: [2.675, 2]` is 2.68, not the binary 2.67. Decimal128 is refused
//! (`NotImplemented`), as in the rest of the arithmetic.

use bson::Bson;

use super::{Args, integral, nullish, number, type_error};
use crate::aggregate::operators::{Num, Operator};
use crate::display;
use crate::error::{QueryError, Result};

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    let name = op.name();
    let num = |i: usize| -> Result<Option<Num>> {
        number(&args.get(i)?, |t| format!("{name} only supports numeric types, not {t}"))
    };
    let Some(x) = num(0)? else { return Ok(Some(Bson::Null)) };
    let double = |f: f64| Ok(Some(Bson::Double(f)));
    match op {
        Abs => abs(x),
        Ceil => Ok(Some(integral_or(x, f64::ceil))),
        Floor => Ok(Some(integral_or(x, f64::floor))),
        Round | Trunc => {
            let place = match args.get(1)? {
                None if args.len() < 2 => 0,
                v if nullish(&v) => return Ok(Some(Bson::Null)),
                Some(v) => match integral(&v) {
                    Some(p) if (-20..100).contains(&p) => p as i32,
                    // MongoDB: Location51083.
                    _ => {
                        return Err(QueryError::bad_value(format!(
                            "{name} requires \"place\" argument to be an integer between -20 and 100, found {}",
                            display::value(&v)
                        )));
                    }
                },
                None => 0,
            };
            Ok(Some(round(x, place, op == Round)))
        }
        Sqrt => {
            let f = x.as_f64();
            if f < 0.0 {
                // MongoDB: Location28714.
                return Err(QueryError::bad_value("$sqrt's argument must be greater than or equal to 0"));
            }
            double(f.sqrt())
        }
        Exp => double(x.as_f64().exp()),
        Ln | Log10 => {
            let f = positive(name, x)?;
            double(if op == Ln { f.ln() } else { f.log10() })
        }
        Log => {
            let Some(base) = num(1)? else { return Ok(Some(Bson::Null)) };
            let f = positive(name, x)?;
            let b = base.as_f64();
            if !(b.is_nan() || b > 0.0 && b != 1.0) {
                // MongoDB: Location28759.
                return Err(QueryError::bad_value(format!(
                    "$log's base must be a positive number not equal to 1, but is {}",
                    display::value(&base.into())
                )));
            }
            double(f.ln() / b.ln())
        }
        Pow => {
            let Some(e) = num(1)? else { return Ok(Some(Bson::Null)) };
            pow(x, e)
        }
        Atan2 => {
            let Some(other) = num(1)? else { return Ok(Some(Bson::Null)) };
            double(x.as_f64().atan2(other.as_f64()))
        }
        DegreesToRadians => double(x.as_f64().to_radians()),
        RadiansToDegrees => double(x.as_f64().to_degrees()),
        _ => trig(op, x.as_f64()),
    }
}

fn abs(x: Num) -> Result<Option<Bson>> {
    Ok(Some(match x {
        Num::I32(i) => i.checked_abs().map_or(Bson::Int64(i64::from(i).abs()), Bson::Int32),
        Num::I64(i) => match i.checked_abs() {
            Some(a) => Bson::Int64(a),
            // MongoDB: Location28680.
            None => return Err(QueryError::bad_value("can't take $abs of long long min")),
        },
        Num::F64(f) => Bson::Double(f.abs()),
    }))
}

fn integral_or(x: Num, f: fn(f64) -> f64) -> Bson {
    match x {
        Num::F64(v) => Bson::Double(f(v)),
        other => other.into(),
    }
}

fn positive(name: &str, x: Num) -> Result<f64> {
    let f = x.as_f64();
    if f > 0.0 || f.is_nan() {
        return Ok(f);
    }
    // MongoDB: Location28758 ($log), 28766 ($ln), 28761 ($log10).
    Err(QueryError::bad_value(format!(
        "{name}'s argument must be a positive number, but is {}",
        display::value(&x.into())
    )))
}

/// `$round` (half to even) or `$trunc` (toward zero) of `x` at `place` decimal digits.
fn round(x: Num, place: i32, half_even: bool) -> Bson {
    match x {
        Num::F64(f) => Bson::Double(round_double(f, place, half_even)),
        Num::I32(_) | Num::I64(_) if place >= 0 => x.into(),
        Num::I32(i) => {
            let r = round_integer(i64::from(i), place, half_even);
            r.map_or(Bson::Double(round_double(f64::from(i), place, half_even)), |r| {
                i32::try_from(r).map_or(Bson::Int64(r), Bson::Int32)
            })
        }
        Num::I64(i) => round_integer(i, place, half_even)
            .map_or(Bson::Double(round_double(i as f64, place, half_even)), Bson::Int64),
    }
}

/// `n` rounded at the `-place`th digit left of the point; `None` on overflow.
fn round_integer(n: i64, place: i32, half_even: bool) -> Option<i64> {
    let unit = 10i64.checked_pow(place.unsigned_abs())?;
    let (q, r) = (n / unit, n % unit);
    let mut q = q;
    if half_even {
        let twice = r.unsigned_abs().checked_mul(2)?;
        let up = twice > unit.unsigned_abs() || (twice == unit.unsigned_abs() && q % 2 != 0);
        if up {
            q += n.signum();
        }
    }
    q.checked_mul(unit)
}

/// Rounds `f`'s 15-significant-digit decimal form at `place` digits after the point.
pub(crate) fn round_double(f: f64, place: i32, half_even: bool) -> f64 {
    if !f.is_finite() || f == 0.0 || (place >= 0 && f.fract() == 0.0) {
        return f;
    }
    // `d.dddddddddddddde±x`: fifteen digits, the first worth 10^x.
    let s = format!("{:.14e}", f.abs());
    let Some((mantissa, exp)) = s.split_once('e') else { return f };
    let Ok(exp) = exp.parse::<i32>() else { return f };
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).map(|b| b - b'0').collect();
    // Digits worth at least 10^-place.
    let keep = exp + place + 1;
    if keep >= digits.len() as i32 {
        return f;
    }
    let sign = if f < 0.0 { -1.0 } else { 1.0 };
    if keep < 0 {
        return 0.0 * sign;
    }
    let keep = keep as usize;
    let mut kept: Vec<u8> = digits[..keep].to_vec();
    if half_even {
        let next = digits[keep];
        let rest_nonzero = digits[keep + 1..].iter().any(|d| *d != 0);
        let last_odd = kept.last().is_some_and(|d| d % 2 == 1);
        if next > 5 || (next == 5 && (rest_nonzero || last_odd)) {
            let mut i = kept.len();
            loop {
                if i == 0 {
                    kept.insert(0, 1);
                    break;
                }
                i -= 1;
                if kept[i] == 9 {
                    kept[i] = 0;
                } else {
                    kept[i] += 1;
                    break;
                }
            }
        }
    }
    let text: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
    let text = if text.is_empty() { "0".to_owned() } else { text };
    format!("{text}e{}", -place).parse::<f64>().map_or(f, |v| v * sign)
}

fn pow(base: Num, exp: Num) -> Result<Option<Bson>> {
    let as_double = || Ok(Some(Bson::Double(base.as_f64().powf(exp.as_f64()))));
    let (Num::I32(_) | Num::I64(_), Num::I32(_) | Num::I64(_)) = (base, exp) else { return as_double() };
    let (b, e) = (base.as_i64(), exp.as_i64());
    if e < 0 {
        return match b {
            // MongoDB: Location28764.
            0 => Err(QueryError::bad_value("$pow cannot take a base of 0 and a negative exponent")),
            1 => Ok(Some(base.into())),
            -1 => {
                let r = if e % 2 == 0 { 1 } else { -1 };
                Ok(Some(if let Num::I32(_) = base { Bson::Int32(r) } else { Bson::Int64(i64::from(r)) }))
            }
            _ => as_double(),
        };
    }
    let Ok(e32) = u32::try_from(e) else { return as_double() };
    let Some(r) = b.checked_pow(e32) else { return as_double() };
    Ok(Some(match (base, exp) {
        (Num::I32(_), Num::I32(_)) => i32::try_from(r).map_or(Bson::Int64(r), Bson::Int32),
        _ => Bson::Int64(r),
    }))
}

fn trig(op: Operator, x: f64) -> Result<Option<Bson>> {
    use Operator::*;
    let name = op.name();
    let within = |ok: bool, range: &str| -> Result<()> {
        if ok || x.is_nan() {
            return Ok(());
        }
        // MongoDB: Location50989.
        Err(QueryError::bad_value(format!("cannot apply {name} to {}, value must be in {range}", display_f64(x))))
    };
    let v = match op {
        Sin | Cos | Tan => {
            within(x.is_finite(), "(-inf,inf)")?;
            match op {
                Sin => x.sin(),
                Cos => x.cos(),
                _ => x.tan(),
            }
        }
        Asin => {
            within((-1.0..=1.0).contains(&x), "[-1,1]")?;
            x.asin()
        }
        Acos => {
            within((-1.0..=1.0).contains(&x), "[-1,1]")?;
            x.acos()
        }
        Atan => x.atan(),
        Sinh => x.sinh(),
        Cosh => x.cosh(),
        Tanh => x.tanh(),
        Asinh => x.asinh(),
        Acosh => {
            within(x >= 1.0, "[1,inf]")?;
            x.acosh()
        }
        Atanh => {
            within((-1.0..=1.0).contains(&x), "[-1,1]")?;
            x.atanh()
        }
        other => return Err(type_error(format!("{} is not a math operator", other.name()))),
    };
    Ok(Some(Bson::Double(v)))
}

fn display_f64(x: f64) -> String {
    if x.is_infinite() { if x > 0.0 { "inf".into() } else { "-inf".into() } } else { format!("{x}") }
}
