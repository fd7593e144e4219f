//! ASCII checks eight bytes at a time: the check a guest runs over every value before
//! it takes an ASCII fast path, written on `u64` words (SWAR) so that it is fast in
//! WebAssembly too.
//!
//! Why: std's `is_ascii` is written for the host's vector units (SSE2 and the like). In
//! a `wasm32` guest, std comes compiled without SIMD and a word is 32 bits, so it runs a
//! few bytes per step at best. On `u64` words the same work is a few instructions per
//! eight bytes, on every target. (A byte-by-byte mapping, such as uppercasing, needs no
//! help: `value.extend(bytes.iter().map(u8::to_ascii_uppercase))` into a
//! [`ValueWriter`](crate::ValueWriter) is compiled in the guest's own crate, with its
//! `+simd128`, into 16-byte SIMD steps; in the `uppercase` guest it ran at 49 ns per
//! record where an eight-byte SWAR version of it took 59.)
//!
//! Invariant: [`is_ascii`] gives exactly std's `<[u8]>::is_ascii` for every input; the
//! unit test compares them over every byte value at every position of a word and across
//! the word/tail boundary.

/// The high bit of each byte of a word.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

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

#[inline(always)]
fn word_of(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

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
