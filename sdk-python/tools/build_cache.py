"""A content-addressed cache of built Python components, so that building unchanged code
again gives the same bytes (and weir's compiled-code cache, keyed by the bytes' hash,
hits instead of compiling the component again).

Why a cache and not a reproducible build: componentize-py pre-initialises the
interpreter and snapshots its heap, and that heap differs from one build of the same
source to the next (the snapshot's hash seed and what follows from it come from the
build's own randomness, which componentize-py does not let a caller fix:
PYTHONHASHSEED is not passed to the guest). The cache makes "same inputs, same bytes"
true on one machine.

Invariants:
- The key is a SHA-256 over everything that decides the component: every file the
  component takes in (the guest's directory, the SDK package, the WIT), by relative path
  and content; the world; the pinned toolchain (requirements.txt); and the build's own
  scripts. Anything else changed is a miss, never a stale hit.
- An entry is written whole (temporary file, then rename) and only after a build
  succeeded; a reader never sees half an entry.
- The cache is bounded: after each store, the oldest entries past `MAX_ENTRIES` go.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable, Optional

MAX_ENTRIES = 64
_SKIPPED_DIRS = {"__pycache__", ".git", "node_modules"}


def _tree_files(root: Path) -> Iterable[Path]:
    """The files under `root` in a stable order, without bytecode caches."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for name in sorted(filenames):
            yield Path(dirpath) / name


def cache_key(trees: Iterable[Path], files: Iterable[Path], words: Iterable[str]) -> str:
    """Hex SHA-256 over the trees' files (relative path and content), the files'
    contents and the words, each part length-prefixed."""
    digest = hashlib.sha256()

    def part(data: bytes) -> None:
        digest.update(f"{len(data)}:".encode())
        digest.update(data)

    for tree in trees:
        for path in _tree_files(tree):
            part(str(path.relative_to(tree)).encode())
            part(path.read_bytes())
    for path in files:
        part(path.read_bytes())
    for word in words:
        part(word.encode())
    return digest.hexdigest()


def lookup(directory: Path, key: str) -> Optional[Path]:
    """The cached component of `key`, touched so it is kept longest, or None."""
    path = directory / f"{key}.wasm"
    if not path.is_file():
        return None
    path.touch()
    return path


def store(directory: Path, key: str, component: Path) -> None:
    """Copies the built `component` in under `key`, then trims the cache to its bound."""
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{key}.partial-{os.getpid()}"
    partial.write_bytes(component.read_bytes())
    os.replace(partial, directory / f"{key}.wasm")
    entries = sorted(directory.glob("*.wasm"), key=lambda p: p.stat().st_mtime)
    for stale in entries[: max(0, len(entries) - MAX_ENTRIES)]:
        stale.unlink(missing_ok=True)
