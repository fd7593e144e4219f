"""Weir's host functions for Python guests: `log` and `config`.

Inside a component these call the `weir:transform/log` and `config` imports (the
componentize-py bindings, package `wit_world`). In plain CPython, where those bindings
do not exist (unit tests of a guest function), `log` writes `LEVEL message` to stderr
and `config` reads `LOCAL_CONFIG`, a dict a test may fill; the Rust SDK does the same
outside wasm. Which one applies is decided once, at first use.
"""

from __future__ import annotations

import sys
from typing import Dict, Optional

#: The step configuration seen outside a component (unit tests); empty by default.
LOCAL_CONFIG: Dict[str, str] = {}

LEVELS = ("trace", "debug", "info", "warn", "error")

_imports = None  # (log module, config module), or False outside a component


def _host():
    global _imports
    if _imports is None:
        try:
            from wit_world.imports import config as config_import
            from wit_world.imports import log as log_import

            _imports = (log_import, config_import)
        except ImportError:
            _imports = False
    return _imports


def log(level: str, message: str) -> None:
    """Writes one line to the pipeline's log at `level` (trace, debug, info, warn or
    error), tagged with the module's name."""
    if level not in LEVELS:
        raise ValueError(f"weir_guest.log: level must be one of {', '.join(LEVELS)}, not {level!r}")
    host = _host()
    if host:
        log_import = host[0]
        log_import.log(log_import.Level[level.upper()], str(message))
    else:
        print(f"{level.upper()} {message}", file=sys.stderr)


def config(name: str, default: Optional[str] = None) -> Optional[str]:
    """The step's configuration value `name` (`[steps.config]` in the spec), else
    `default`. The configuration never changes while a guest runs: read it once."""
    host = _host()
    if host:
        value = host[1].get(name)
    else:
        value = LOCAL_CONFIG.get(name)
    return default if value is None else value
