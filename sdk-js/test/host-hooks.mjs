// Node module resolution hooks for the tests: the host's `weir:transform/*` imports
// resolve to host-stub.mjs (a recording fake of weir's log and config), and the bare
// `weir-guest` to the SDK, as esbuild's alias does in tools/build.mjs. Nothing else
// changes: everything else resolves as Node resolves it.
const STUB = new URL('./host-stub.mjs', import.meta.url).href;
const SDK = new URL('../src/index.js', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('weir:transform/')) return { url: STUB, shortCircuit: true };
  if (specifier === 'weir-guest') return { url: SDK, shortCircuit: true };
  return next(specifier, context);
}
