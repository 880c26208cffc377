//! Key encoding of numbers: one byte string per mathematical value, whatever the BSON type, in
//! value order.
//!
//! A finite nonzero number is written as `sign, E, fraction` where `|x| = 1.f * 2^E`:
//! ```text
//! class byte   NaN 0x1E < -inf 0x1F < negative 0x20 < zero 0x21 < positive 0x22 < +inf 0x23
//! E            one byte (E + 128) for -126 <= E <= 125, else 0x01 / 0xFE + u16 BE (E + 2^15)
//! fraction     7 bits per byte, high bits first, low bit set when more groups follow;
//!              trailing zero bits dropped; "1" alone (a power of two) is the single byte 0x00
//! ```
//! A negative number writes the bytes of its magnitude inverted, which reverses their order
//! because the magnitude encoding is prefix-free.
//!
//! Decimals that are not dyadic (0.1) have infinite binary fractions. For those the fraction is
//! cut to 112 bits (113 significant), written as exactly 16 groups all marked "more follows",
//! then the decimal itself (adjusted exponent as u16 BE, digit pairs as 1 + 10a + b, 0x00). This
//! is exact because every dyadic value in the domain with the same E has at most 113
//! significant bits: a non-dyadic decimal is below 10^34 < 2^113, so a dyadic integer next to it
//! has at most 113 bits, and a dyadic non-integer (double: 53 bits, decimal: c / 5^k * 2^-k with
//! c < 2^113) has at most 113 as well. So the dyadic value either differs within the first 16
//! groups or ends earlier (a cleared "more" bit), and then it is the smaller.

use bson::Bson;

use super::bignum::BigUint;
use super::decimal::{self, Decimal};
use crate::order::split_double;

const NAN: u8 = 0x1E;
const NEGATIVE_INFINITY: u8 = 0x1F;
const NEGATIVE: u8 = 0x20;
const ZERO: u8 = 0x21;
const POSITIVE: u8 = 0x22;
const POSITIVE_INFINITY: u8 = 0x23;

/// Fraction bits kept for a non-dyadic decimal: 16 groups of 7.
const INEXACT_FRACTION_BITS: u32 = 112;

/// The magnitude of a finite nonzero number: `1.f * 2^exponent`.
enum Magnitude {
    /// An odd integer `m` whose bits below the leading one are the fraction.
    Exact { exponent: i32, m: u128 },
    /// A big integer whose bits from below the leading one down to bit `low` are the fraction.
    Big { exponent: i32, n: BigUint, low: u64 },
    /// A non-dyadic decimal: its first 113 significant bits, and the decimal for ties.
    Inexact { exponent: i32, top: u128, coefficient: u128, decimal_exponent: i32 },
}

pub(super) fn encode_number(v: &Bson, out: &mut Vec<u8>) {
    let (neg, magnitude) = match v {
        Bson::Int32(i) => (*i < 0, integer(u128::from(i.unsigned_abs()))),
        Bson::Int64(i) => (*i < 0, integer(u128::from(i.unsigned_abs()))),
        Bson::Double(f) if f.is_nan() => return out.push(NAN),
        Bson::Double(f) if f.is_infinite() => {
            return out.push(if *f < 0.0 { NEGATIVE_INFINITY } else { POSITIVE_INFINITY });
        }
        Bson::Double(f) => {
            let (mantissa, exp2) = split_double(*f);
            let m = u128::from(mantissa);
            (*f < 0.0, integer(m).map(|mag| scale(mag, exp2)))
        }
        Bson::Decimal128(d) => match decimal::decode(d) {
            Decimal::NaN => return out.push(NAN),
            Decimal::Infinity { neg } => {
                return out.push(if neg { NEGATIVE_INFINITY } else { POSITIVE_INFINITY });
            }
            Decimal::Finite { neg, coefficient, exponent } => (neg, decimal_magnitude(coefficient, exponent)),
        },
        _ => unreachable!("encode_number is only called on numbers"),
    };
    let Some(magnitude) = magnitude else {
        return out.push(ZERO);
    };
    out.push(if neg { NEGATIVE } else { POSITIVE });
    let start = out.len();
    push_magnitude(&magnitude, out);
    if neg {
        super::invert(&mut out[start..]);
    }
}

/// The magnitude of a nonnegative integer; `None` for zero.
fn integer(n: u128) -> Option<Magnitude> {
    if n == 0 {
        return None;
    }
    let exponent = 127 - n.leading_zeros() as i32;
    Some(Magnitude::Exact { exponent, m: n >> n.trailing_zeros() })
}

/// Multiplies an exact magnitude by `2^exp2`.
fn scale(mag: Magnitude, exp2: i32) -> Magnitude {
    match mag {
        Magnitude::Exact { exponent, m } => Magnitude::Exact { exponent: exponent + exp2, m },
        other => other,
    }
}

fn decimal_magnitude(coefficient: u128, exponent: i32) -> Option<Magnitude> {
    let (c, e) = decimal::normalize(coefficient, exponent);
    if c == 0 {
        return None;
    }
    if e >= 0 {
        let e = e.unsigned_abs();
        if let Some(n) = 10u128.checked_pow(e).and_then(|p| c.checked_mul(p)) {
            return integer(n);
        }
        let mut n = BigUint::from_u128(c);
        n.mul_pow10(e);
        let bits = n.bit_len();
        let low = n.trailing_zeros().expect("a nonzero product has a set bit");
        let exponent = i32::try_from(bits - 1).expect("decimal magnitudes stay below 2^20500");
        return Some(Magnitude::Big { exponent, n, low });
    }
    let k = e.unsigned_abs();
    // c / 10^k is dyadic exactly when 5^k divides c; 5^k fits u128 whenever it could.
    if let Some(p5) = 5u128.checked_pow(k)
        && c % p5 == 0
    {
        return integer(c / p5).map(|mag| scale(mag, e));
    }
    let mut den = BigUint::from_u128(1);
    den.mul_pow10(k);
    let e0 = (128 - c.leading_zeros() as i64) - den.bit_len() as i64;
    // c / 10^k lies in [2^(e0-1), 2^(e0+1)); scale it so the quotient has 113 or 114 bits.
    let shift = u64::try_from(i64::from(INEXACT_FRACTION_BITS as i32) + 1 - e0)
        .expect("a non-dyadic decimal is below 2^113, so the shift is positive");
    let mut num = BigUint::from_u128(c);
    num.shl(shift);
    let (q, _) = num.div_small_quotient(&den);
    let (exp2, top) = if q >> (INEXACT_FRACTION_BITS + 1) != 0 { (e0, q >> 1) } else { (e0 - 1, q) };
    let exponent = i32::try_from(exp2).expect("decimal magnitudes stay above 2^-20600");
    Some(Magnitude::Inexact { exponent, top, coefficient: c, decimal_exponent: e })
}

fn push_magnitude(mag: &Magnitude, out: &mut Vec<u8>) {
    match mag {
        Magnitude::Exact { exponent, m } => {
            push_exponent(*exponent, out);
            let fraction_bits = 127 - m.leading_zeros();
            if fraction_bits == 0 {
                return out.push(0);
            }
            // Left-align the fraction, dropping the leading one.
            let mut aligned = m << (128 - fraction_bits);
            loop {
                let group = (aligned >> 121) as u8;
                aligned <<= 7;
                let more = aligned != 0;
                out.push(group << 1 | u8::from(more));
                if !more {
                    break;
                }
            }
        }
        Magnitude::Big { exponent, n, low } => {
            push_exponent(*exponent, out);
            let top = n.bit_len() - 1;
            if top == *low {
                return out.push(0);
            }
            // Bits top-1 down to low, seven at a time, the last group padded with zeros.
            let mut pos = top;
            while pos > *low {
                let mut group = 0u8;
                for _ in 0..7 {
                    group <<= 1;
                    if pos > *low {
                        pos -= 1;
                        group |= u8::from(n.bit(pos));
                    }
                }
                out.push(group << 1 | u8::from(pos > *low));
            }
        }
        Magnitude::Inexact { exponent, top, coefficient, decimal_exponent } => {
            push_exponent(*exponent, out);
            let mut aligned = top << (128 - INEXACT_FRACTION_BITS);
            for _ in 0..INEXACT_FRACTION_BITS / 7 {
                out.push(((aligned >> 121) as u8) << 1 | 1);
                aligned <<= 7;
            }
            push_decimal(*coefficient, *decimal_exponent, out);
        }
    }
}

fn push_exponent(exponent: i32, out: &mut Vec<u8>) {
    let wide = |marker: u8, out: &mut Vec<u8>| {
        let biased = u16::try_from(exponent + 0x8000).expect("binary exponents stay within ±2^15");
        out.push(marker);
        out.extend_from_slice(&biased.to_be_bytes());
    };
    match exponent {
        -126..=125 => out.push((exponent + 128) as u8),
        ..-126 => wide(0x01, out),
        _ => wide(0xFE, out),
    }
}

/// A normalized positive decimal in value order: the exponent of its leading digit, then its
/// digits in pairs, then 0x00 (so a digit string that is a prefix of another sorts first).
fn push_decimal(coefficient: u128, exponent: i32, out: &mut Vec<u8>) {
    let digits = coefficient.to_string();
    let adjusted = exponent + digits.len() as i32 - 1;
    let biased = u16::try_from(adjusted + 0x8000).expect("decimal exponents stay within ±6200");
    out.extend_from_slice(&biased.to_be_bytes());
    for pair in digits.as_bytes().chunks(2) {
        let hi = pair[0] - b'0';
        let lo = pair.get(1).map_or(0, |d| d - b'0');
        out.push(1 + 10 * hi + lo);
    }
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::super::encode;
    use bson::{Bson, Decimal128};

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(s.parse::<Decimal128>().expect("valid decimal literal"))
    }

    #[test]
    fn dyadic_decimals_match_doubles() {
        assert_eq!(encode(&dec("0.5")), encode(&Bson::Double(0.5)));
        assert_eq!(encode(&dec("-1.25")), encode(&Bson::Double(-1.25)));
        assert_eq!(encode(&dec("1E+3")), encode(&Bson::Int32(1000)));
        assert_eq!(encode(&dec("9223372036854775807")), encode(&Bson::Int64(i64::MAX)));
        assert_eq!(encode(&dec("0.0078125")), encode(&Bson::Double(1.0 / 128.0)));
        assert!(encode(&dec("5E-324")) > encode(&Bson::Double(5e-324)));
        assert!(encode(&dec("1E+300")) > encode(&Bson::Double(f64::from_bits(0x7E37E43C8800759B))));
    }

    #[test]
    fn non_dyadic_decimals_sit_between_their_neighbours() {
        let tenth = encode(&dec("0.1"));
        assert!(tenth < encode(&Bson::Double(0.1)));
        assert!(tenth > encode(&Bson::Double(0.09999999999999999)));
        assert!(encode(&dec("0.1000000000000000000000000000000001")) > tenth);
        assert!(encode(&dec("-0.1")) > encode(&Bson::Double(-0.1)));
        assert_eq!(encode(&dec("0.10")), tenth);
    }
}
