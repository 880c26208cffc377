//! CRC-32C (Castagnoli), the checksum of OP_MSG's optional trailer.
//!
//! Owns: one table-driven software implementation, computed at compile time. Drivers essentially
//! never set `checksumPresent` (pymongo and node refuse it on replies, and send none), so speed does
//! not matter here and a dependency for a SIMD version would not pay for itself.
//!
//! Invariant: `crc32c(b"123456789") == 0xE306_9283` (the standard check value, tested below).

/// Reflected form of the Castagnoli polynomial 0x1EDC6F41.
const POLY_REFLECTED: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ POLY_REFLECTED } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// CRC-32C of `data` (initial value and final xor `0xFFFF_FFFF`, as in RFC 3720 and MongoDB).
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc = TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::crc32c;

    #[test]
    fn standard_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        // RFC 3720 B.4: 32 bytes of 0xFF.
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
    }
}
