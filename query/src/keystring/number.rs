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
use super::decode::{DecodeError, Reader};
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
        // c is nonzero, and decimal128's exponent range bounds the product.
        #[allow(clippy::expect_used, reason = "invariants of a nonzero decimal128, stated in the messages")]
        let (low, exponent) = (
            n.trailing_zeros().expect("a nonzero product has a set bit"),
            i32::try_from(bits - 1).expect("decimal magnitudes stay below 2^20500"),
        );
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
    #[allow(clippy::expect_used, reason = "c < 2^113 and 10^k > 1 bound e0 below 114")]
    let shift = u64::try_from(i64::from(INEXACT_FRACTION_BITS as i32) + 1 - e0)
        .expect("a non-dyadic decimal is below 2^113, so the shift is positive");
    let mut num = BigUint::from_u128(c);
    num.shl(shift);
    let (q, _) = num.div_small_quotient(&den);
    let (exp2, top) = if q >> (INEXACT_FRACTION_BITS + 1) != 0 { (e0, q >> 1) } else { (e0 - 1, q) };
    #[allow(clippy::expect_used, reason = "decimal128's exponent range bounds exp2")]
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
        // A silently wrapped exponent would misorder keys: better to stop.
        #[allow(clippy::expect_used, reason = "doubles and decimal128 have binary exponents within ±2^15")]
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
    #[allow(clippy::expect_used, reason = "decimal128's adjusted exponents are within ±6200")]
    let biased = u16::try_from(adjusted + 0x8000).expect("decimal exponents stay within ±6200");
    out.extend_from_slice(&biased.to_be_bytes());
    for pair in digits.as_bytes().chunks(2) {
        let hi = pair[0] - b'0';
        let lo = pair.get(1).map_or(0, |d| d - b'0');
        out.push(1 + 10 * hi + lo);
    }
    out.push(0);
}

/// Whether `ty` is the class byte of a number.
pub(super) fn is_number_type(ty: u8) -> bool {
    (NAN..=POSITIVE_INFINITY).contains(&ty)
}

/// Reads one number written by [`encode_number`], as the canonical type described in
/// `decode.rs`; the caller checks that the value re-encodes to the same bytes.
pub(super) fn decode_number(r: &mut Reader<'_>) -> Result<Bson, DecodeError> {
    let class = r.byte()?;
    let neg = match class {
        NAN => return Ok(Bson::Double(f64::NAN)),
        NEGATIVE_INFINITY => return Ok(Bson::Double(f64::NEG_INFINITY)),
        POSITIVE_INFINITY => return Ok(Bson::Double(f64::INFINITY)),
        ZERO => return Ok(Bson::Int32(0)),
        NEGATIVE => true,
        POSITIVE => false,
        _ => return Err(r.error("not a number class byte")),
    };
    let outer = r.mask;
    if neg {
        r.mask ^= 0xFF;
    }
    let magnitude = read_magnitude(r);
    r.mask = outer;
    match magnitude? {
        Read::Binary { exponent, m, fraction_bits } => {
            binary_value(neg, exponent, m, fraction_bits).ok_or_else(|| r.error("a number no BSON type holds exactly"))
        }
        Read::Decimal { coefficient, exponent } => {
            decimal128(neg, coefficient, exponent).ok_or_else(|| r.error("a decimal out of Decimal128's range"))
        }
    }
}

enum Read {
    /// `m` odd, `m * 2^(exponent - fraction_bits)`.
    Binary {
        exponent: i32,
        m: u128,
        fraction_bits: u32,
    },
    Decimal {
        coefficient: u128,
        exponent: i32,
    },
}

fn read_magnitude(r: &mut Reader<'_>) -> Result<Read, DecodeError> {
    let exponent = match r.byte()? {
        marker @ (0x01 | 0xFE) => {
            let biased = i32::from(u16::from_be_bytes(r.array()?));
            let e = biased - 0x8000;
            let wide_ok = if marker == 0x01 { e < -126 } else { e > 125 };
            if !wide_ok {
                return Err(r.error("a wide exponent that fits one byte"));
            }
            e
        }
        b @ 2..=253 => i32::from(b) - 128,
        _ => return Err(r.error("bad exponent byte")),
    };
    let first = r.byte()?;
    if first == 0 {
        return Ok(Read::Binary { exponent, m: 1, fraction_bits: 0 });
    }
    let (mut m, mut bits, mut group) = (1u128, 0u32, first);
    let groups_inexact = INEXACT_FRACTION_BITS / 7;
    for count in 1.. {
        if bits + 7 > 127 {
            return Err(r.error("more significant bits than a decoded number can hold"));
        }
        m = m << 7 | u128::from(group >> 1);
        bits += 7;
        if group & 1 == 0 {
            break;
        }
        // Only a non-dyadic decimal (below 2^113) writes 16 groups all marked "more".
        if count == groups_inexact && exponent <= INEXACT_FRACTION_BITS as i32 {
            return read_decimal(r);
        }
        group = r.byte()?;
    }
    let zeros = m.trailing_zeros();
    Ok(Read::Binary { exponent, m: m >> zeros, fraction_bits: bits - zeros })
}

fn read_decimal(r: &mut Reader<'_>) -> Result<Read, DecodeError> {
    let adjusted = i32::from(u16::from_be_bytes(r.array()?)) - 0x8000;
    let mut digits = String::new();
    loop {
        match r.byte()? {
            0 => break,
            p @ 1..=100 => {
                digits.push(char::from(b'0' + (p - 1) / 10));
                digits.push(char::from(b'0' + (p - 1) % 10));
            }
            _ => return Err(r.error("bad decimal digit pair")),
        }
    }
    // The coefficient has no trailing zero, so a trailing '0' is the odd digit count's padding.
    let digits = digits.trim_end_matches('0');
    let coefficient = digits.parse::<u128>().map_err(|_| r.error("bad decimal digits"))?;
    let exponent = adjusted - (digits.len() as i32 - 1);
    Ok(Read::Decimal { coefficient, exponent })
}

fn binary_value(neg: bool, exponent: i32, m: u128, fraction_bits: u32) -> Option<Bson> {
    let shift = exponent - fraction_bits as i32;
    if shift >= 0 && exponent <= 63 {
        let n = i128::try_from(m << shift).ok()?;
        let n = if neg { -n } else { n };
        if let Ok(i) = i32::try_from(n) {
            return Some(Bson::Int32(i));
        }
        if let Ok(i) = i64::try_from(n) {
            return Some(Bson::Int64(i));
        }
    }
    if fraction_bits <= 52 && (-1074..=1023).contains(&exponent) {
        // m < 2^53 is exact as f64; two half-steps keep the scale factor itself representable.
        let half = shift / 2;
        let f = (m as f64) * 2f64.powi(half) * 2f64.powi(shift - half);
        return Some(Bson::Double(if neg { -f } else { f }));
    }
    if shift >= 0 {
        // m * 2^shift = (m / 5^e) * 2^(shift - e) * 10^e: take out as many tens as m has fives.
        let shift = shift.unsigned_abs();
        let mut e = 0u32;
        while e < shift && 5u128.checked_pow(e + 1).is_some_and(|p| m.is_multiple_of(p)) {
            e += 1;
        }
        let c = m / 5u128.pow(e);
        let rest = shift - e;
        let c = c.checked_shl(rest).filter(|v| rest < 128 && v >> rest == c)?;
        return decimal128(neg, c, i32::try_from(e).ok()?);
    }
    let c = 5u128.checked_pow(shift.unsigned_abs()).and_then(|p| p.checked_mul(m))?;
    decimal128(neg, c, shift)
}

/// `(-1)^neg * coefficient * 10^exponent` as a Decimal128 (BID), if it has one.
fn decimal128(neg: bool, coefficient: u128, exponent: i32) -> Option<Bson> {
    const MAX_COEFFICIENT: u128 = 10u128.pow(34) - 1;
    let (mut c, mut e) = (coefficient, exponent);
    while c > MAX_COEFFICIENT && c.is_multiple_of(10) {
        c /= 10;
        e += 1;
    }
    if c > MAX_COEFFICIENT || !(-6176..=6111).contains(&e) {
        return None;
    }
    let biased = u128::try_from(e + 6176).ok()?;
    let bits = (u128::from(neg) << 127) | (biased << 113) | c;
    Some(Bson::Decimal128(bson::Decimal128::from_bytes(bits.to_le_bytes())))
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
