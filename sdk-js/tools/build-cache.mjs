// A content-addressed cache of built JavaScript components, so that building unchanged
// code again gives the same bytes (and weir's compiled-code cache, keyed by the bytes'
// hash, hits instead of compiling the component again).
//
// Why a cache and not a reproducible build: componentize-js snapshots the engine after
// running the guest's top level (wizer), and that snapshot differs from one build of
// the same source to the next (two builds of guest-examples/js/uppercase differ in
// their bytes). The cache makes "same inputs, same bytes" true on one machine.
//
// Invariants:
// - The key is a SHA-256 over everything that decides the component: the esbuild
//   bundle (the guest and the SDK as they go in, byte for byte), the WIT, the world,
//   the pinned tools (package-lock.json) and this build's own scripts. Anything else
//   changed is a miss, never a stale hit.
// - An entry is written whole (temporary file, then rename) and only after a build
//   succeeded; a reader never sees half an entry.
// - The cache is bounded: after each store, the oldest entries past `MAX_ENTRIES` go.

import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const MAX_ENTRIES = 64;

/** The cache key of a build: hex SHA-256 over its parts, each length-prefixed. */
export function cacheKey(parts) {
  const hash = createHash('sha256');
  for (const part of parts) {
    const bytes = typeof part === 'string' ? Buffer.from(part, 'utf8') : part;
    hash.update(`${bytes.length}:`);
    hash.update(bytes);
  }
  return hash.digest('hex');
}

/** The cached component of `key` in `dir`, or null. A hit is touched (kept longest). */
export async function lookup(dir, key) {
  const path = join(dir, `${key}.wasm`);
  try {
    const bytes = await readFile(path);
    const now = new Date();
    await utimes(path, now, now).catch(() => {});
    return bytes;
  } catch {
    return null;
  }
}

/** Stores `component` under `key` in `dir`, then trims the cache to its bound. */
export async function store(dir, key, component) {
  await mkdir(dir, { recursive: true });
  const path = join(dir, `${key}.wasm`);
  const partial = `${path}.partial-${process.pid}`;
  await writeFile(partial, component);
  await rename(partial, path);
  await trim(dir);
}

async function trim(dir) {
  const names = (await readdir(dir)).filter((name) => name.endsWith('.wasm'));
  if (names.length <= MAX_ENTRIES) return;
  const entries = await Promise.all(
    names.map(async (name) => ({ name, mtime: (await stat(join(dir, name))).mtimeMs })),
  );
  entries.sort((a, b) => a.mtime - b.mtime);
  for (const { name } of entries.slice(0, entries.length - MAX_ENTRIES)) {
    await rm(join(dir, name), { force: true });
  }
}
