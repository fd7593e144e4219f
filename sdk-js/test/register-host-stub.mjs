// Registers the module hooks of host-hooks.mjs, so the SDK and the example guests run
// under Node: `node --test --import ./test/register-host-stub.mjs test/*.test.mjs`.
import { register } from 'node:module';

register('./host-hooks.mjs', import.meta.url);
