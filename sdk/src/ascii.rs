//! ASCII text eight bytes at a time: the checks and case mappings a guest runs over
//! every value, written on `u64` words (SWAR) so that they are fast in WebAssembly too.
//!
//! Why: std's `is_ascii` and `make_ascii_uppercase` are written for the host's vector
//! units (SSE2 and the like). In a `wasm32` guest, std comes compiled without SIMD and
//! a word is 32 bits, so they run a few bytes per step at best; measured in the
//! `uppercase` guest, the two came to about 15 instructions per byte of value. On `u64`
//! words the same work is a few instructions per eight bytes, on every target.
//!
//! Invariant: each function gives exactly std's result (`<[u8]>::is_ascii`,
//! `u8::to_ascii_uppercase` on every byte), for every input; the unit tests compare them
//! over every byte value at every position of a word and across the word/tail boundary.

/// The high bit of each byte of a word.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
/// Adding it to a byte below 0x80 sets the byte's high bit iff the byte is `a` or more.
const FROM_LOWER_A: u64 = 0x1f1f_1f1f_1f1f_1f1f; // 0x80 - b'a'
/// Adding it to a byte below 0x80 sets the byte's high bit iff the byte is past `z`.
const PAST_LOWER_Z: u64 = 0x0505_0505_0505_0505; // 0x80 - (b'z' + 1)

/// Whether every byte of `bytes` is ASCII, like `<[u8]>::is_ascii`.
#[inline]
pub fn is_ascii(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let mut seen = 0u64;
    for word in &mut words {
        seen |= word_of(word);
    }
    seen & HIGH_BITS == 0 && words.remainder().is_ascii()
}

/// Hands `bytes` uppercased to `put`, eight bytes per call and then the rest (one call
/// of fewer, maybe none). `bytes` must be ASCII (check with [`is_ascii`]): what other
/// bytes become is unspecified, and not UTF-8.
#[inline]
pub fn uppercase_ascii(bytes: &[u8], mut put: impl FnMut(&[u8])) {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        put(&uppercase_word(word_of(word)).to_le_bytes());
    }
    let tail = words.remainder();
    let mut upper = [0u8; 8];
    for (to, &from) in upper.iter_mut().zip(tail) {
        *to = from.to_ascii_uppercase();
    }
    put(&upper[..tail.len()]);
}

#[inline(always)]
fn word_of(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// The eight ASCII bytes of `word`, each `a`..=`z` turned into `A`..=`Z`. No addition
/// carries into the next byte: every byte is below 0x80 and each constant byte is below
/// 0x20, so every sum stays below 0x100.
#[inline(always)]
fn uppercase_word(word: u64) -> u64 {
    let lower = word.wrapping_add(FROM_LOWER_A) & !word.wrapping_add(PAST_LOWER_Z) & HIGH_BITS;
    // 0x80 >> 2 is 0x20, the bit that tells `a` from `A`.
    word ^ (lower >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uppercased(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        uppercase_ascii(bytes, |piece| out.extend_from_slice(piece));
        out
    }

    #[test]
    fn every_ascii_byte_at_every_position_uppercases_as_std_does() {
        for len in 0..=17 {
            for at in 0..len {
                for b in 0..0x80u8 {
                    let mut bytes = vec![b'q'; len];
                    bytes[at] = b;
                    assert_eq!(uppercased(&bytes), bytes.to_ascii_uppercase(), "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn any_non_ascii_byte_anywhere_is_seen() {
        for len in 0..=17 {
            assert!(is_ascii(&vec![0x7f; len]));
            for at in 0..len {
                for b in 0..=u8::MAX {
                    let mut bytes = vec![b'q'; len];
                    bytes[at] = b;
                    assert_eq!(is_ascii(&bytes), bytes.is_ascii(), "{bytes:?}");
                }
            }
        }
    }
}
