//! `StateKey`: the byte layout of a keyed-state key in RocksDB.
//!
//! ```text
//! key_group: u16 big-endian | user key bytes | window end: 8 bytes
//! ```
//!
//! Invariants:
//! - The window part is the window END as an `i64`, big-endian with the sign bit flipped,
//!   so that for one (key group, user key) the entries sort by window end, negative ends
//!   included. The unwindowed ("global") window is `i64::MAX`: it sorts after every real
//!   window, and a window that really ended at `i64::MAX` is indistinguishable from it.
//! - The key group comes first, so one key group's entries are contiguous (a key-group
//!   range can be scanned or handed to another subtask when rescaling).
//! - User keys are opaque and variable-length, so the layout is decoded from both ends:
//!   2 bytes of key group at the front, 8 bytes of window at the back. A prefix scan over
//!   `key_group | user key` can also meet longer user keys that start with the same bytes;
//!   decode and compare the user key rather than trusting the prefix alone.
//! - Keys shorter than [`StateKey::MIN_LEN`] are rejected on decode, never sliced blindly.

use crate::state::StateError;

/// The parts of a state key, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedKey<'a> {
    pub key_group: u16,
    pub user_key: &'a [u8],
    /// `None` for the global (unwindowed) window.
    pub window_end: Option<i64>,
}

/// Namespace for encoding and decoding state keys.
#[derive(Debug, Clone, Copy)]
pub struct StateKey;

impl StateKey {
    /// Bytes of the key-group prefix.
    pub const KEY_GROUP_LEN: usize = 2;
    /// Bytes of the window suffix.
    pub const WINDOW_LEN: usize = 8;
    /// Shortest valid key: an empty user key.
    pub const MIN_LEN: usize = Self::KEY_GROUP_LEN + Self::WINDOW_LEN;
    /// Window end that stands for "no window" (the global window).
    pub const GLOBAL_WINDOW_END: i64 = i64::MAX;

    /// Encodes `key_group | user_key | window_end` (`None` = the global window).
    pub fn encode(key_group: u16, user_key: &[u8], window_end: Option<i64>) -> Vec<u8> {
        let mut key = Vec::with_capacity(Self::MIN_LEN + user_key.len());
        Self::encode_into(&mut key, key_group, user_key, window_end);
        key
    }

    /// Like [`encode`](Self::encode), reusing `buf` (cleared first).
    pub fn encode_into(
        buf: &mut Vec<u8>,
        key_group: u16,
        user_key: &[u8],
        window_end: Option<i64>,
    ) {
        buf.clear();
        buf.extend_from_slice(&key_group.to_be_bytes());
        buf.extend_from_slice(user_key);
        buf.extend_from_slice(&encode_window(
            window_end.unwrap_or(Self::GLOBAL_WINDOW_END),
        ));
    }

    /// Decodes a key into its key group, user key and window end (`None`: global window).
    pub fn decode(key: &[u8]) -> Result<DecodedKey<'_>, StateError> {
        if key.len() < Self::MIN_LEN {
            return Err(StateError::KeyTooShort {
                len: key.len(),
                min: Self::MIN_LEN,
            });
        }
        let (group, rest) = key.split_at(Self::KEY_GROUP_LEN);
        let (user_key, window) = rest.split_at(rest.len() - Self::WINDOW_LEN);
        let key_group = u16::from_be_bytes([group[0], group[1]]);
        let mut window_bytes = [0_u8; Self::WINDOW_LEN];
        window_bytes.copy_from_slice(window);
        let end = decode_window(window_bytes);
        let window_end = (end != Self::GLOBAL_WINDOW_END).then_some(end);
        Ok(DecodedKey {
            key_group,
            user_key,
            window_end,
        })
    }

    /// The user key part of `key`.
    pub fn user_key(key: &[u8]) -> Result<&[u8], StateError> {
        Ok(Self::decode(key)?.user_key)
    }

    /// The prefix shared by every key of `key_group`.
    pub fn key_group_prefix(key_group: u16) -> [u8; Self::KEY_GROUP_LEN] {
        key_group.to_be_bytes()
    }

    /// `key`'s first 8 bytes (key group and the user key's start) as a big-endian
    /// number, zero-padded: of two keys whose numbers differ, the smaller number is the
    /// smaller key in RocksDB's bytewise order. A sort of many keys compares these
    /// first and reads the keys' bytes only on a tie.
    pub fn order_prefix(key: &[u8]) -> u64 {
        let mut prefix = [0u8; 8];
        let n = key.len().min(8);
        prefix[..n].copy_from_slice(&key[..n]);
        u64::from_be_bytes(prefix)
    }
}

/// Sign bit of an i64 seen as u64.
const SIGN_BIT: u64 = 1 << 63;

fn encode_window(end: i64) -> [u8; StateKey::WINDOW_LEN] {
    ((end as u64) ^ SIGN_BIT).to_be_bytes()
}

fn decode_window(bytes: [u8; StateKey::WINDOW_LEN]) -> i64 {
    (u64::from_be_bytes(bytes) ^ SIGN_BIT) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_prefix_never_contradicts_the_bytes() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![0, 1, b'k'],
            b"\x00\x01k1234567".to_vec(),
            b"\x00\x01k1234568".to_vec(),
            b"\x00\x01k12345".to_vec(),
            vec![0, 1, b'k', 0],
            vec![255; 9],
            vec![255; 8],
        ];
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (StateKey::order_prefix(a), StateKey::order_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn state_key_round_trips() {
        for (group, user, window) in [
            (0_u16, &b""[..], None),
            (7, b"user-1", Some(1_700_000_000_000)),
            (u16::MAX, b"\x00\xff", Some(-5)),
            (300, b"k", Some(i64::MIN)),
            (1, b"k", Some(0)),
        ] {
            let key = StateKey::encode(group, user, window);
            assert_eq!(key.len(), StateKey::MIN_LEN + user.len());
            let d = StateKey::decode(&key).expect("decode");
            assert_eq!(
                (d.key_group, d.user_key, d.window_end),
                (group, user, window)
            );
        }
        assert!(StateKey::encode(3, b"x", None).starts_with(&StateKey::key_group_prefix(3)));
        assert_eq!(
            StateKey::user_key(&StateKey::encode(9, b"word", Some(5))).expect("user key"),
            b"word"
        );
        assert!(StateKey::user_key(b"short").is_err());
    }

    #[test]
    fn state_keys_sort_by_group_then_window_end() {
        let ends = [
            Some(i64::MIN),
            Some(-1_000),
            Some(-1),
            Some(0),
            Some(1),
            Some(86_400_000),
            None,
        ];
        let keys: Vec<Vec<u8>> = ends
            .iter()
            .map(|&w| StateKey::encode(5, b"user", w))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(
            sorted, keys,
            "byte order must equal window-end order, global last"
        );
        // Key groups dominate.
        assert!(StateKey::encode(4, b"zzz", None) < StateKey::encode(5, b"a", Some(i64::MIN)));
        // A window that really ends at i64::MAX is the global window.
        assert_eq!(
            StateKey::encode(1, b"k", Some(i64::MAX)),
            StateKey::encode(1, b"k", None)
        );
    }

    #[test]
    fn state_key_too_short_is_an_error() {
        for len in 0..StateKey::MIN_LEN {
            let key = vec![0_u8; len];
            assert!(matches!(
                StateKey::decode(&key),
                Err(StateError::KeyTooShort { len: l, min: StateKey::MIN_LEN }) if l == len
            ));
        }
    }
}
