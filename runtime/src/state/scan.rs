//! `StateScan`: iteration over every live entry of a `KeyedState`, cache and RocksDB merged.
//!
//! Invariants:
//! - Entries come in RocksDB's bytewise key order, each key once.
//! - The cache wins: a cached value replaces RocksDB's, a cached tombstone (or negative
//!   lookup) hides RocksDB's entry; dirty entries not yet flushed are included.
//! - Only keys starting with the requested prefix are returned.
//! - After an error the scan ends (the error is returned once, then `None`).
//!
//! The scan borrows the state immutably, so no write can interleave with it. It is meant
//! for restore-time work (rebuilding a window index), not for the per-record path.

use std::cmp::Ordering;
use std::iter::Peekable;
use std::path::Path;
use std::vec;

use rocksdb::{DB, DBIterator, Direction, IteratorMode};

use crate::state::StateError;

/// A cached entry: key and value (`None`: tombstone or negative lookup).
pub(crate) type CachedEntry<'a> = (&'a [u8], Option<&'a [u8]>);

/// Merged, ordered iterator over `(key, value)` pairs. See the module doc.
pub struct StateScan<'a> {
    db: Peekable<DBIterator<'a>>,
    cache: Peekable<vec::IntoIter<CachedEntry<'a>>>,
    prefix: Vec<u8>,
    db_done: bool,
    failed: bool,
    path: &'a Path,
}

impl std::fmt::Debug for StateScan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateScan")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Which side(s) the next entry comes from.
enum Step {
    Cache,
    Db,
    /// Same key on both sides: the cache's value wins, RocksDB's is skipped.
    Both,
}

impl<'a> StateScan<'a> {
    /// `cache` must be sorted by key and hold only keys starting with `prefix`.
    pub(crate) fn new(
        db: &'a DB,
        path: &'a Path,
        cache: Vec<CachedEntry<'a>>,
        prefix: &[u8],
    ) -> Self {
        let mode = if prefix.is_empty() {
            IteratorMode::Start
        } else {
            IteratorMode::From(prefix, Direction::Forward)
        };
        Self {
            db: db.iterator(mode).peekable(),
            cache: cache.into_iter().peekable(),
            prefix: prefix.to_vec(),
            db_done: false,
            failed: false,
            path,
        }
    }
}

impl Iterator for StateScan<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if !self.db_done {
                match self.db.peek() {
                    None => self.db_done = true,
                    Some(Err(_)) => {
                        self.db_done = true;
                        self.failed = true;
                        if let Some(Err(e)) = self.db.next() {
                            return Some(Err(StateError::db("iterate", self.path, e)));
                        }
                        return None;
                    }
                    Some(Ok((key, _))) if !key.starts_with(&self.prefix) => self.db_done = true,
                    Some(Ok(_)) => {}
                }
            }
            let db_key = match (self.db_done, self.db.peek()) {
                (false, Some(Ok((key, _)))) => Some(&**key),
                _ => None,
            };
            let step = match (db_key, self.cache.peek()) {
                (None, None) => return None,
                (None, Some(_)) => Step::Cache,
                (Some(_), None) => Step::Db,
                (Some(db_key), Some((cache_key, _))) => match (*cache_key).cmp(db_key) {
                    Ordering::Less => Step::Cache,
                    Ordering::Greater => Step::Db,
                    Ordering::Equal => Step::Both,
                },
            };
            if let Step::Db = step {
                if let Some(Ok((key, value))) = self.db.next() {
                    return Some(Ok((key.into_vec(), value.into_vec())));
                }
                continue;
            }
            if let Step::Both = step {
                self.db.next();
            }
            if let Some((key, Some(value))) = self.cache.next() {
                return Some(Ok((key.to_vec(), value.to_vec())));
            }
            // A tombstone or negative lookup: hides the key, yields nothing.
        }
    }
}
