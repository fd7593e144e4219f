// Runs an SDK loop written as a generator, synchronously unless a user function
// returns a promise.
//
// Invariants:
// - The loop yields ONLY the promises user functions return, and gets back their
//   settled value (or their rejection, thrown at the `yield`), so its own try/catch
//   turns a rejected promise into a refused record exactly like a throw.
// - As long as nothing is yielded the whole loop runs in one `next()` call and the
//   export returns a plain value: synchronous guests pay no promise or microtask.
// - From the first promise on, the rest runs as an async function, one user call after
//   the other, in input order; componentize-js runs the guest's event loop until the
//   export's promise settles, so the host still sees one synchronous call.
// - An exception escaping the loop itself (a malformed frame, an accumulator that does
//   not decode) is not caught here: the call traps.

/** Whether `value` is a promise or another thenable. */
export function isThenable(value) {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function';
}

/** Runs the generator `it` to its return value: a value, or a promise of it. */
export function drive(it) {
  const step = it.next();
  return step.done ? step.value : driveAsync(it, step.value);
}

async function driveAsync(it, pending) {
  for (;;) {
    let value;
    let failed = false;
    let error;
    try {
      value = await pending;
    } catch (e) {
      failed = true;
      error = e;
    }
    const step = failed ? it.throw(error) : it.next(value);
    if (step.done) return step.value;
    pending = step.value;
  }
}
