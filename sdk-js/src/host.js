// Weir's host functions (wit/weir.wit: `weir:transform/log`, `weir:transform/config`):
// the ONLY module of the SDK that imports from the host, so the rest runs under Node.
// componentize-js binds these import specifiers to the component's imports; the Node
// tests map them to test/host-stub.mjs.

import { log as hostLog } from 'weir:transform/log@0.1.0';
import { get as hostGet } from 'weir:transform/config@0.1.0';

/** Writes one line to the pipeline's log at `level` (trace|debug|info|warn|error). */
export function writeLog(level, message) {
  hostLog(level, message);
}

/** The step's configuration value `name` (`[steps.config]`), or undefined. */
export function configValue(name) {
  const value = hostGet(name);
  return value === null ? undefined : value;
}
