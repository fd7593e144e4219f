// `probe_js`: the JavaScript sandbox probe (tests/tests/guests/javascript.rs). A map guest: each
// input value names one attempt to reach outside the sandbox; the output value is
// `<probe>: <outcome>`, where the outcome is what the guest saw, caught INSIDE the
// guest: `denied: <error name>[ (no network)]`, `empty`, or `VISIBLE: ...` if the
// sandbox ever let something through (the test fails on that).
//
// Probes (the value, then what it does):
//   fetch <url>           await fetch(url): a real listener is there in the test
//   fetch-request <url>   await fetch(new Request(url)): the same through a Request
//   restore-fetch         assign globalThis.fetch (to put a working one back)
//   env                   process.env, the Node way to read the environment
//   import <path>         await import(path), the only file-reading API of the engine;
//                         this one TRAPS (StarlingMonkey's loader finds no preopened
//                         directory and aborts), so the test expects a trap for it
//   xhr <url>             new XMLHttpRequest() (no such API: the engine has none)
//   websocket <url>       new WebSocket(url)   (likewise)
// and two that check the host interfaces a guest IS given:
//   config <name>         the step's config value: `value <v>` or `absent`
//   log <message>         writes <message> to the pipeline's log at info: `logged`
//   types                 what the record's key and value are: `key Uint8Array, value
//                         Uint8Array` when `instanceof Uint8Array` holds for both
//
// Async on purpose: it also exercises the SDK's path for map functions that return
// promises, inside the real component.

import * as weir from 'weir-guest';

function denied(error) {
  const name = error instanceof Error ? error.name : typeof error;
  const text = error instanceof Error ? error.message : String(error);
  return `denied: ${name}${text.includes(weir.NO_NETWORK) ? ' (no network)' : ''}`;
}

function kind(data) {
  return data instanceof Uint8Array ? 'Uint8Array' : `not a Uint8Array of this realm (${Object.prototype.toString.call(data)})`;
}

async function attempt(probe, record) {
  const space = probe.indexOf(' ');
  const verb = space < 0 ? probe : probe.slice(0, space);
  const arg = space < 0 ? '' : probe.slice(space + 1);
  try {
    switch (verb) {
      case 'fetch': {
        const response = await fetch(arg);
        return `VISIBLE: status ${response.status}`;
      }
      case 'fetch-request': {
        const response = await fetch(new Request(arg));
        return `VISIBLE: status ${response.status}`;
      }
      case 'restore-fetch': {
        // Strict mode (an ES module): assigning a non-writable property throws.
        globalThis.fetch = async () => 'a working fetch';
        return 'VISIBLE: fetch replaced';
      }
      case 'env': {
        const env = process.env;
        const names = Object.keys(env);
        return names.length === 0 ? 'empty' : `VISIBLE: ${names.join(',')}`;
      }
      case 'import': {
        const module = await import(arg);
        return `VISIBLE: ${JSON.stringify(Object.keys(module))}`;
      }
      case 'xhr': {
        const request = new XMLHttpRequest();
        request.open('GET', arg);
        return 'VISIBLE: XMLHttpRequest';
      }
      case 'websocket': {
        new WebSocket(arg);
        return 'VISIBLE: WebSocket';
      }
      case 'config': {
        const value = weir.config(arg);
        return value === undefined ? 'absent' : `value ${value}`;
      }
      case 'log': {
        weir.log.info(arg);
        return 'logged';
      }
      case 'types':
        return `key ${kind(record.key)}, value ${kind(record.value)}`;
      default:
        throw new Error(`unknown probe ${probe}`);
    }
  } catch (error) {
    return denied(error);
  }
}

export const map = weir.map(async (record) => record.with({ value: `${record.valueText}: ${await attempt(record.valueText, record)}` }));
