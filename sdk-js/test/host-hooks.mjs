// Node module resolution hooks for the tests: the host's `weir:transform/*` imports
// resolve to host-stub.mjs (a recording fake of weir's log and config), the bare
// `weir-guest` to the SDK, as esbuild's alias does in tools/build.mjs, and
// `weir-guest/testing` to the harness, so a project's tests run against this SDK without
// installing it. Everything else resolves as Node resolves it.
const STUB = new URL('./host-stub.mjs', import.meta.url).href;
const SDK = new URL('../src/index.js', import.meta.url).href;
const TESTING = new URL('./register-host-stub.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('weir:transform/')) return { url: STUB, shortCircuit: true };
  if (specifier === 'weir-guest') return { url: SDK, shortCircuit: true };
  if (specifier === 'weir-guest/testing') return { url: TESTING, shortCircuit: true };
  return next(specifier, context);
}
