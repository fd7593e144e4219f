//! API tokens: random, shown once, stored as hashes, compared in constant time.
//!
//! A token reads `weir_{key}_{secret}`: `key` (16 hex digits) names the catalog row,
//! `secret` (64 hex digits, 256 random bits) is checked against the SHA-256 stored in
//! that row with a constant-time comparison. Looking the row up by `key` leaks nothing
//! about `secret`; the catalog never holds a token, only `key` and the secret's hash.

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A new token: what the caller is shown once, and what the catalog keeps.
#[derive(Debug)]
pub struct NewToken {
    pub token: String,
    pub key: String,
    pub secret_hash: String,
}

pub fn generate() -> NewToken {
    let mut key = [0u8; 8];
    let mut secret = [0u8; 32];
    let mut rng = rand::rng();
    rng.fill_bytes(&mut key);
    rng.fill_bytes(&mut secret);
    let (key, secret) = (hex::encode(key), hex::encode(secret));
    NewToken {
        token: format!("weir_{key}_{secret}"),
        secret_hash: hash(&secret),
        key,
    }
}

/// The `(key, secret)` of a token as presented, if it has the token's shape.
pub fn split(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix("weir_")?;
    let (key, secret) = rest.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(key, 16) && hex(secret, 64)).then_some((key, secret))
}

/// Whether `secret` hashes to `stored_hash`, in time independent of where they differ.
pub fn verify(secret: &str, stored_hash: &str) -> bool {
    hash(secret).as_bytes().ct_eq(stored_hash.as_bytes()).into()
}

/// Whether `presented` is `expected` (the admin token), in constant time over their
/// hashes (so neither length nor content leaks through timing).
pub fn equal(presented: &str, expected: &str) -> bool {
    hash(presented)
        .as_bytes()
        .ct_eq(hash(expected).as_bytes())
        .into()
}

fn hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_verifies_and_another_does_not() {
        let t = generate();
        let (key, secret) = split(&t.token).expect("shape");
        assert_eq!(key, t.key);
        assert!(verify(secret, &t.secret_hash));
        let other = generate();
        let (_, other_secret) = split(&other.token).expect("shape");
        assert!(!verify(other_secret, &t.secret_hash));
        assert!(!t.secret_hash.contains(secret));
    }

    #[test]
    fn malformed_tokens_are_not_split() {
        for bad in [
            "",
            "weir_",
            "weir_abc_def",
            "bearer",
            &format!("weir_{}_{}", "g".repeat(16), "0".repeat(64)),
        ] {
            assert!(split(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_admin_token_compares_equal_only_to_itself() {
        assert!(equal("s3cret-admin-token", "s3cret-admin-token"));
        assert!(!equal("s3cret-admin-tokeN", "s3cret-admin-token"));
        assert!(!equal("", "s3cret-admin-token"));
    }
}
