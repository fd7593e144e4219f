"""The classes componentize-py instantiates for the exported interfaces: `Map` for the
`mapper` world, `Aggregate` for the `aggregator` world (componentize-py looks for the
interface's name in PascalCase in the app module; `tools/build.py` generates an app
module that imports the user's module, which registers its function, then re-exports
the one class of its world from here).

Invariants: each export converts the bindings' records into the SDK's plain values and
back, and nothing else; all framing and user-facing logic lives in modules that run in
plain CPython (`framing`, `mapper`, `aggregator`). Importing this module outside a
component fails (no `wit_world`), which is why nothing else imports it.
"""

from __future__ import annotations

import sys

from wit_world.imports import types


# The line the runtime looks for in a trapped call's stderr (engine/guest_output.rs):
# componentize-py itself reports only "Python function threw an unexpected exception".
UNCAUGHT_MARKER = "weir-guest: uncaught exception: "


def _report_uncaught(export: str, error: BaseException) -> None:
    """Writes one line naming the exception's class and message before the call traps."""
    kind = type(error).__qualname__
    message = str(error).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    described = f"{kind}: {message}" if message else kind
    sys.stderr.write(f"{UNCAUGHT_MARKER}{described} (in {export})\n")
    sys.stderr.flush()


def _reporting(export: str, call):
    """Runs `call()`; an exception escaping it is reported, then raised again (the call
    traps: what the SDK did not turn into a rejection is a guest bug)."""
    try:
        return call()
    except BaseException as error:
        _report_uncaught(export, error)
        raise


def _rejections(pairs):
    return [types.Rejection(index, reason) for index, reason in pairs]


def _batch(builder) -> "types.RecordBatch":
    return builder.finish(types.RecordBatch)


class WrongWorld(RuntimeError):
    """The guest registers no function of the world it is built for: raised while the
    component is built (the app module calls the world's class factory at import)."""


def _require_registered(world: str) -> None:
    from . import aggregator, mapper

    has = {"mapper": mapper.is_registered(), "aggregator": aggregator.is_registered()}
    if has[world]:
        return
    decorator = {"mapper": "@weir_guest.map", "aggregator": "@weir_guest.aggregate"}
    other = "aggregator" if world == "mapper" else "mapper"
    if has[other]:
        raise WrongWorld(
            f"the guest uses {decorator[other]}, a {other} guest: build it with --world {other} "
            f"(or decorate its function with {decorator[world]} for --world {world})"
        )
    raise WrongWorld(f"the guest decorates no function with {decorator[world]}, which --world {world} needs")


def mapper_class():
    """The `Map` export class; the mapper world's bindings must be present and the guest
    must have registered a map function (else `WrongWorld`)."""
    _require_registered("mapper")
    from wit_world import exports
    from wit_world.exports import map as map_types

    from . import mapper

    class Map(exports.Map):
        def map(self, batch: types.RecordBatch) -> map_types.MapOutput:
            return _reporting("map", lambda: self._map(batch))

        @staticmethod
        def _map(batch):
            out, rejections = mapper.run_map(batch, mapper.registered())
            return map_types.MapOutput(_batch(out), _rejections(rejections))

    return Map


def aggregator_class():
    """The `Aggregate` export class; the aggregator world's bindings must be present and
    the guest must have registered an aggregate (else `WrongWorld`)."""
    _require_registered("aggregator")
    from wit_world import exports
    from wit_world.exports import aggregate as aggregate_types

    from . import aggregator

    class Aggregate(exports.Aggregate):
        def update(self, groups: aggregate_types.GroupBatch) -> aggregate_types.UpdateOutput:
            return _reporting("update", lambda: self._update(groups))

        def emit(self, entries: aggregate_types.EmitBatch) -> types.RecordBatch:
            return _reporting("emit", lambda: _batch(aggregator.registered().emit_all(entries)))

        @staticmethod
        def _update(groups):
            ends, data, rejections = aggregator.registered().update(groups)
            return aggregate_types.UpdateOutput(ends, data, _rejections(rejections))

    return Aggregate
