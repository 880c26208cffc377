//! Decoding of IEEE 754-2008 Decimal128 values (BID encoding, as BSON stores them) into sign,
//! coefficient and exponent, so numbers can be compared and encoded exactly.
//!
//! Invariants: non-canonical coefficients (above 10^34 - 1, including every value written with
//! the "large coefficient" combination field) decode as zero, as the standard requires; the sign
//! of a NaN is ignored because MongoDB treats every NaN as the same value.

use bson::Decimal128;

/// The largest canonical coefficient, 10^34 - 1.
const MAX_COEFFICIENT: u128 = 10u128.pow(34) - 1;
const EXPONENT_BIAS: i32 = 6176;

/// A decoded Decimal128: `(-1)^neg * coefficient * 10^exponent` when finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decimal {
    NaN,
    Infinity { neg: bool },
    Finite { neg: bool, coefficient: u128, exponent: i32 },
}

pub(crate) fn decode(value: &Decimal128) -> Decimal {
    let bits = u128::from_le_bytes(value.bytes());
    let neg = bits >> 127 == 1;
    let combination = (bits >> 122) & 0x1F;
    if combination == 0x1F {
        return Decimal::NaN;
    }
    if combination == 0x1E {
        return Decimal::Infinity { neg };
    }
    let (exponent_bits, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        // The implied coefficient is 0b100 followed by 111 bits: always at least 2^113, which
        // is above the canonical maximum, so the value is a zero.
        ((bits >> 111) & 0x3FFF, 0)
    } else {
        ((bits >> 113) & 0x3FFF, bits & ((1u128 << 113) - 1))
    };
    let coefficient = if coefficient > MAX_COEFFICIENT { 0 } else { coefficient };
    // Masked to 14 bits above: the cast is exact.
    let exponent = exponent_bits as i32 - EXPONENT_BIAS;
    Decimal::Finite { neg, coefficient, exponent }
}

/// Removes trailing decimal zeros from a nonzero coefficient, so that equal values have one
/// representation.
pub(crate) fn normalize(mut coefficient: u128, mut exponent: i32) -> (u128, i32) {
    if coefficient == 0 {
        return (0, 0);
    }
    while coefficient.is_multiple_of(10) {
        coefficient /= 10;
        exponent += 1;
    }
    (coefficient, exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Decimal {
        decode(&s.parse::<Decimal128>().expect("valid decimal literal"))
    }

    #[test]
    fn decodes_finite_and_special_values() {
        assert_eq!(dec("1"), Decimal::Finite { neg: false, coefficient: 1, exponent: 0 });
        assert_eq!(dec("-1.50"), Decimal::Finite { neg: true, coefficient: 150, exponent: -2 });
        assert_eq!(dec("1E+6111"), Decimal::Finite { neg: false, coefficient: 1, exponent: 6111 });
        assert_eq!(dec("NaN"), Decimal::NaN);
        assert_eq!(dec("-Infinity"), Decimal::Infinity { neg: true });
        assert_eq!(dec("Infinity"), Decimal::Infinity { neg: false });
        assert_eq!(
            dec("9999999999999999999999999999999999"),
            Decimal::Finite { neg: false, coefficient: MAX_COEFFICIENT, exponent: 0 }
        );
    }

    #[test]
    fn non_canonical_coefficients_are_zero() {
        // Large-coefficient form (combination bits 11 but not infinity/NaN).
        let bits: u128 = (0b011u128 << 125) | (6176u128 << 111) | 12345;
        let d = decode(&Decimal128::from_bytes(bits.to_le_bytes()));
        assert_eq!(d, Decimal::Finite { neg: false, coefficient: 0, exponent: 0 });
        // Coefficient above 10^34 - 1 in the ordinary form.
        let bits: u128 = (6176u128 << 113) | (MAX_COEFFICIENT + 1);
        let d = decode(&Decimal128::from_bytes(bits.to_le_bytes()));
        assert_eq!(d, Decimal::Finite { neg: false, coefficient: 0, exponent: 0 });
    }

    #[test]
    fn normalize_strips_trailing_zeros() {
        assert_eq!(normalize(1500, -3), (15, -1));
        assert_eq!(normalize(0, -3), (0, 0));
    }
}
