//! A minimal unsigned big integer, enough to compare and encode numbers exactly when a
//! Decimal128 meets a double or another decimal far away in scale (10^6111 has ~20,000 bits).
//!
//! Invariant: `limbs` is little-endian base 2^32 with no trailing zero limbs, so zero is the
//! empty vector and equal values have equal representations.

use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BigUint {
    limbs: Vec<u32>,
}

impl BigUint {
    pub(crate) fn from_u128(mut v: u128) -> Self {
        let mut limbs = Vec::with_capacity(4);
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Self { limbs }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.limbs.is_empty()
    }

    pub(crate) fn bit_len(&self) -> u64 {
        match self.limbs.last() {
            None => 0,
            Some(&top) => (self.limbs.len() as u64 - 1) * 32 + u64::from(32 - top.leading_zeros()),
        }
    }

    pub(crate) fn bit(&self, i: u64) -> bool {
        let limb = (i / 32) as usize;
        limb < self.limbs.len() && (self.limbs[limb] >> (i % 32)) & 1 == 1
    }

    /// Index of the lowest set bit; `None` for zero.
    pub(crate) fn trailing_zeros(&self) -> Option<u64> {
        let i = self.limbs.iter().position(|&l| l != 0)?;
        Some(i as u64 * 32 + u64::from(self.limbs[i].trailing_zeros()))
    }

    pub(crate) fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.limbs {
            let p = u64::from(*limb) * u64::from(m) + carry;
            *limb = p as u32;
            carry = p >> 32;
        }
        if carry != 0 {
            self.limbs.push(carry as u32);
        }
        self.trim();
    }

    pub(crate) fn mul_pow10(&mut self, mut k: u32) {
        while k >= 9 {
            self.mul_small(1_000_000_000);
            k -= 9;
        }
        self.mul_small(10u32.pow(k));
    }

    pub(crate) fn shl(&mut self, bits: u64) {
        if self.is_zero() || bits == 0 {
            return;
        }
        let limb_shift = (bits / 32) as usize;
        let bit_shift = (bits % 32) as u32;
        if bit_shift != 0 {
            let mut carry = 0u32;
            for limb in &mut self.limbs {
                let next = *limb >> (32 - bit_shift);
                *limb = (*limb << bit_shift) | carry;
                carry = next;
            }
            if carry != 0 {
                self.limbs.push(carry);
            }
        }
        if limb_shift != 0 {
            self.limbs.splice(0..0, std::iter::repeat_n(0, limb_shift));
        }
    }

    fn shr1(&mut self) {
        let mut carry = 0u32;
        for limb in self.limbs.iter_mut().rev() {
            let next = *limb & 1;
            *limb = (*limb >> 1) | (carry << 31);
            carry = next;
        }
        self.trim();
    }

    /// `self -= other`; the caller guarantees `self >= other`.
    fn sub_assign(&mut self, other: &Self) {
        let mut borrow = 0i64;
        for (i, limb) in self.limbs.iter_mut().enumerate() {
            let o = i64::from(other.limbs.get(i).copied().unwrap_or(0));
            let mut d = i64::from(*limb) - o - borrow;
            borrow = 0;
            if d < 0 {
                d += 1 << 32;
                borrow = 1;
            }
            *limb = d as u32;
        }
        debug_assert_eq!(borrow, 0, "sub_assign underflow");
        self.trim();
    }

    /// `floor(self / den)` for a quotient known to fit in 128 bits, and whether the division
    /// left a remainder. `den` must be nonzero.
    pub(crate) fn div_small_quotient(mut self, den: &Self) -> (u128, bool) {
        debug_assert!(!den.is_zero());
        let num_bits = self.bit_len();
        let den_bits = den.bit_len();
        if num_bits < den_bits {
            let inexact = !self.is_zero();
            return (0, inexact);
        }
        let steps = num_bits - den_bits + 1;
        debug_assert!(steps <= 128, "quotient wider than 128 bits");
        let mut shifted = den.clone();
        shifted.shl(steps - 1);
        let mut q = 0u128;
        for _ in 0..steps {
            q <<= 1;
            if self.cmp(&shifted) != Ordering::Less {
                self.sub_assign(&shifted);
                q |= 1;
            }
            shifted.shr1();
        }
        (q, !self.is_zero())
    }

    fn trim(&mut self) {
        while self.limbs.last() == Some(&0) {
            self.limbs.pop();
        }
    }
}

impl Ord for BigUint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.limbs.len().cmp(&other.limbs.len()).then_with(|| self.limbs.iter().rev().cmp(other.limbs.iter().rev()))
    }
}

impl PartialOrd for BigUint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_matches_u128() {
        let mut a = BigUint::from_u128(12345);
        a.mul_pow10(20);
        assert_eq!(a, BigUint::from_u128(12345 * 10u128.pow(20)));
        let mut b = BigUint::from_u128(3);
        b.shl(100);
        assert_eq!(b, BigUint::from_u128(3 << 100));
        assert_eq!(b.bit_len(), 102);
        assert_eq!(b.trailing_zeros(), Some(100));
        assert!(b.bit(101) && b.bit(100) && !b.bit(99));
        let (q, inexact) = BigUint::from_u128(1000).div_small_quotient(&BigUint::from_u128(7));
        assert_eq!((q, inexact), (142, true));
        let (q, inexact) = BigUint::from_u128(u128::MAX).div_small_quotient(&BigUint::from_u128(1));
        assert_eq!((q, inexact), (u128::MAX, false));
        assert!(BigUint::from_u128(1 << 64) > BigUint::from_u128(u64::MAX as u128));
    }
}
