// A recording fake of weir's host interfaces for the Node tests: `log` appends
// [level, message] to `logged`, `get` reads `configured` (an option<string>: undefined
// when absent, as componentize-js passes it).
export const logged = [];
export const configured = new Map();

export function log(level, message) {
  logged.push([level, message]);
}

export function get(name) {
  return configured.get(name);
}
