"""Weir's host functions for Python guests: `log` and `config`.

Inside a component these call the `weir:transform/log` and `config` imports (the
componentize-py bindings, package `wit_world`). In plain CPython, where those bindings
do not exist (unit tests of a guest function), `log` writes `LEVEL message` to stderr
and `config` reads `LOCAL_CONFIG`, a dict a test may fill; the Rust SDK does the same
outside wasm. Which one applies is decided once, when this module is imported (for a
component: at build time, see below).
"""

from __future__ import annotations

import sys
from typing import Dict, Optional

#: The step configuration seen outside a component (unit tests); empty by default.
LOCAL_CONFIG: Dict[str, str] = {}

LEVELS = ("trace", "debug", "info", "warn", "error")

# Resolved when this module is imported, which for a component is at build time: a
# guest's filesystem is empty at run time, so a module first imported then (the
# bindings included) would not be found, and the stand-ins would silently take over.
try:
    from wit_world.imports import config as _config_import
    from wit_world.imports import log as _log_import
except ImportError:  # plain CPython: no bindings
    _config_import = _log_import = None


def log(level: str, message: str) -> None:
    """Writes one line to the pipeline's log at `level` (trace, debug, info, warn or
    error), tagged with the module's name."""
    if level not in LEVELS:
        raise ValueError(f"weir_guest.log: level must be one of {', '.join(LEVELS)}, not {level!r}")
    if _log_import is not None:
        _log_import.log(_log_import.Level[level.upper()], str(message))
    else:
        print(f"{level.upper()} {message}", file=sys.stderr)


def config(name: str, default: Optional[str] = None) -> Optional[str]:
    """The step's configuration value `name` (`[steps.config]` in the spec), else
    `default`. The configuration never changes while a guest runs: read it once."""
    if _config_import is not None:
        value = _config_import.get(name)
    else:
        value = LOCAL_CONFIG.get(name)
    return default if value is None else value
