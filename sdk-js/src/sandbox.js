// The guest's global environment, made to say what the sandbox is.
//
// Invariants:
// - componentize-js's engine (StarlingMonkey) defines a global `fetch` backed by
//   wasi:http. Guests are built without the `http` feature and weir refuses any
//   component that imports wasi:http, so that fetch could never work; here it is
//   replaced, before any guest code runs (this module is evaluated first, at build time
//   under wizer), by one that returns a promise rejected with a TypeError saying why.
//   The property is non-writable and non-configurable: a guest cannot put the engine's
//   back.
// - Nothing else is granted by the runtime: no preopened directory, an empty environment,
//   every socket and name lookup refused (see the README's sandbox section).

export const NO_NETWORK = 'a weir guest has no network: fetch() is not available';

function fetch(resource) {
  const target = typeof resource === 'string' ? resource : resource?.url ?? String(resource);
  return Promise.reject(new TypeError(`${NO_NETWORK} (fetch ${target})`));
}

Object.defineProperty(globalThis, 'fetch', {
  value: fetch,
  writable: false,
  configurable: false,
  enumerable: false,
});
