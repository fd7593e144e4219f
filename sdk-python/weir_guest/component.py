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

from wit_world.imports import types


def _rejections(pairs):
    return [types.Rejection(index, reason) for index, reason in pairs]


def _batch(builder) -> "types.RecordBatch":
    return builder.finish(types.RecordBatch)


def mapper_class():
    """The `Map` export class; the mapper world's bindings must be present."""
    from wit_world import exports
    from wit_world.exports import map as map_types

    from . import mapper

    class Map(exports.Map):
        def map(self, batch: types.RecordBatch) -> map_types.MapOutput:
            out, rejections = mapper.run_map(batch, mapper.registered())
            return map_types.MapOutput(_batch(out), _rejections(rejections))

    return Map


def aggregator_class():
    """The `Aggregate` export class; the aggregator world's bindings must be present."""
    from wit_world import exports
    from wit_world.exports import aggregate as aggregate_types

    from . import aggregator

    class Aggregate(exports.Aggregate):
        def update(self, groups: aggregate_types.GroupBatch) -> aggregate_types.UpdateOutput:
            ends, data, rejections = aggregator.registered().update(groups)
            return aggregate_types.UpdateOutput(ends, data, _rejections(rejections))

        def emit(self, entries: aggregate_types.EmitBatch) -> types.RecordBatch:
            return _batch(aggregator.registered().emit_all(entries))

    return Aggregate
