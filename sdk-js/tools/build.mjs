#!/usr/bin/env node
// Builds a JavaScript guest into a weir component:
//   node sdk-js/tools/build.mjs --world mapper|aggregator -o out.wasm guest.js
//
// Invariants:
// - The tools are the pinned ones of sdk-js/tools/package-lock.json, installed by
//   `make js-tools` with `npm ci` into $WEIR_JS_TOOLS (default ~/.cache/weir/js-tools),
//   outside the clone; this script only reads them from there.
// - The guest is bundled with esbuild into one ES module, `weir-guest` resolving to this
//   repository's sdk-js/src, the host's `weir:transform/*` imports left for
//   componentize-js to bind; then componentize-js builds it against the world of
//   wit/weir.wit, with the `http` and `fetch-event` features disabled, so the component
//   never imports wasi:http (weir refuses any that does). The build checks that on the
//   component's world as jco prints it.
// - The output is written whole or not at all (temporary file, then rename), so a failed
//   build never leaves a half component for make to take as up to date.
// - Building unchanged inputs again gives the same bytes, from a content-addressed cache
//   ($WEIR_GUEST_BUILD_CACHE/js, default ~/.cache/weir/guest-builds/js): see
//   build-cache.mjs for why a cache and what the key covers.
// - Node >= 20 (the tools' own minimum: oxc-parser, commander).

import { mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { homedir, tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { cacheKey, lookup, store } from './build-cache.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const WIT = join(repo, 'wit/weir.wit');
const SDK = join(repo, 'sdk-js/src/index.js');
const WORLDS = ['mapper', 'aggregator'];
// The engine features that would import wasi:http (outgoing fetch, incoming handler).
const DISABLED_FEATURES = ['http', 'fetch-event'];
// This build's own scripts: a change to any of them changes every component's cache key.
const TOOL_SCRIPTS = ['build.mjs', 'build-cache.mjs'];
const CACHE_DIR = resolve(
  process.env.WEIR_GUEST_BUILD_CACHE ?? join(homedir(), '.cache/weir/guest-builds'),
  'js',
);
const USAGE = 'usage: node sdk-js/tools/build.mjs --world mapper|aggregator -o out.wasm guest.js';

function fail(message) {
  console.error(`build.mjs: ${message}`);
  process.exit(1);
}

function parseArgs(argv) {
  const args = { world: undefined, out: undefined, guest: undefined };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--world') args.world = argv[++i];
    else if (arg === '-o' || arg === '--out') args.out = argv[++i];
    else if (arg === '-h' || arg === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (arg.startsWith('-')) fail(`unknown option ${arg}\n${USAGE}`);
    else if (args.guest === undefined) args.guest = arg;
    else fail(`one guest at a time (got ${args.guest} and ${arg})\n${USAGE}`);
  }
  if (!WORLDS.includes(args.world)) fail(`--world must be one of ${WORLDS.join(', ')}\n${USAGE}`);
  if (!args.out || !args.guest) fail(USAGE);
  return args;
}

const major = Number(process.versions.node.split('.')[0]);
if (major < 20) fail(`Node ${process.versions.node} is too old: the pinned tools need Node >= 20`);

const args = parseArgs(process.argv.slice(2));
const tools = resolve(process.env.WEIR_JS_TOOLS ?? join(homedir(), '.cache/weir/js-tools'));
const requireTool = createRequire(join(tools, 'package.json'));
let esbuild;
let componentize;
let componentWit;
try {
  esbuild = requireTool('esbuild');
  ({ componentWit } = await import(
    pathToFileURL(join(tools, 'node_modules/@bytecodealliance/jco/dist/api.js')).href
  ));
  ({ componentize } = await import(
    pathToFileURL(join(tools, 'node_modules/@bytecodealliance/componentize-js/src/componentize.js')).href
  ));
} catch (error) {
  fail(`the JavaScript tools are not installed in ${tools} (run \`make js-tools\`): ${error.message}`);
}

/** The esbuild bundle of the guest with the SDK: one ES module, as componentize-js takes it. */
async function bundleGuest(guest, bundle) {
  await esbuild.build({
    entryPoints: [resolve(guest)],
    outfile: bundle,
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    alias: { 'weir-guest': SDK },
    external: ['weir:transform/*'],
    legalComments: 'none',
    logLevel: 'warning',
  });
  return readFile(bundle);
}

/** What decides the component besides the bundle (see build-cache.mjs). */
async function buildInputs(bundleBytes, world, sourceName) {
  const files = [WIT, join(here, 'package-lock.json'), ...TOOL_SCRIPTS.map((f) => join(here, f))];
  const contents = await Promise.all(files.map((f) => readFile(f)));
  return [bundleBytes, world, sourceName, DISABLED_FEATURES.join(','), ...contents];
}

/** componentize-js over the bundle, refused if its world imports wasi:http. */
async function componentizeBundle(bundle, guest, world) {
  const { component } = await componentize({
    sourcePath: bundle,
    // What stack traces and error messages call the guest's code.
    sourceName: basename(guest),
    witPath: WIT,
    worldName: world,
    disableFeatures: DISABLED_FEATURES,
  });
  // The component's own world, as jco prints it: one `import` line per interface.
  const refused = (await componentWit(component))
    .split('\n')
    .filter((line) => /^\s*import wasi:http\//.test(line));
  if (refused.length > 0) {
    fail(`${guest}: the component imports ${refused.map((l) => l.trim()).join(' ')}, which weir refuses`);
  }
  return component;
}

const work = await mkdtemp(join(tmpdir(), 'weir-js-build-'));
try {
  const bundle = join(work, `${basename(args.guest, '.js')}.bundle.js`);
  const bundleBytes = await bundleGuest(args.guest, bundle);
  const key = cacheKey(await buildInputs(bundleBytes, args.world, basename(args.guest)));
  let component = await lookup(CACHE_DIR, key);
  const hit = component !== null;
  if (!hit) {
    component = await componentizeBundle(bundle, args.guest, args.world);
    await store(CACHE_DIR, key, component);
  }
  const out = resolve(args.out);
  const partial = `${out}.partial-${process.pid}`;
  await writeFile(partial, component);
  await rename(partial, out);
  const size = (component.length / (1 << 20)).toFixed(1);
  console.log(`built ${args.out} (${args.world}, ${size} MiB${hit ? ', unchanged inputs: cached build' : ''})`);
} catch (error) {
  fail(`${args.guest}: ${error?.stack ?? error}`);
} finally {
  await rm(work, { recursive: true, force: true });
}
