// `weir-guest/testing`: registers the module hooks of host-hooks.mjs, so the SDK and a
// guest run under Node (`node --test --import weir-guest/testing my.test.mjs`, or
// `--import ./test/register-host-stub.mjs` as the SDK's own tests run), and exports the
// harness that drives a guest's exports over plain records (src/testing.js).
import { register } from 'node:module';

register('./host-hooks.mjs', import.meta.url);

export { runAggregate, runMap } from '../src/testing.js';
