#!/usr/bin/env python3
"""Builds a Python guest into a Weir component with componentize-py.

    python3 sdk-python/tools/build.py --world mapper -o build/guests/uppercase_py.wasm \\
        guest-examples/python/uppercase/uppercase.py
    python3 sdk-python/tools/build.py --ensure-tools   # only the toolchain

Invariants:
- The toolchain is exactly `sdk-python/requirements.txt` (componentize-py, pinned), in a
  venv outside the clone, `$WEIR_PY_TOOLS` or `~/.cache/weir/py-tools/venv`, with pip's
  download cache beside it (`~/.cache/weir/py-tools/pip`). The venv is created only when
  it is missing or when requirements.txt changed since it was made (a copy of the file
  kept in the venv is the stamp); otherwise nothing is downloaded or installed.
- The component exports the world given (`mapper` or `aggregator` of `wit/weir.wit`) and
  contains the guest's directory (keep a guest in a directory of its own), a copy of the
  SDK package `weir_guest`, and the Python standard library. The guest
  module is imported at build time (componentize-py pre-initialises the interpreter and
  snapshots it), so its top level runs once, at build, not per start.
- The output is written next to its final path and renamed into place: an interrupted
  build never leaves a partial .wasm that make would take for up to date.
- Building unchanged inputs again gives the same bytes, from a content-addressed cache
  (`$WEIR_GUEST_BUILD_CACHE/py`, default `~/.cache/weir/guest-builds/py`): see
  build_cache.py for why a cache and what its key covers.
- A guest that registers no function of the world asked for (an `@aggregate` built
  with `--world mapper`) is refused at build time, with one line saying which world
  its function needs.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import build_cache

SDK_DIR = Path(__file__).resolve().parent.parent
REQUIREMENTS = SDK_DIR / "requirements.txt"
DEFAULT_WIT = SDK_DIR.parent / "wit"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "weir" / "py-tools"
VENV = Path(os.environ.get("WEIR_PY_TOOLS", CACHE / "venv"))
STAMP = VENV / "weir-requirements.txt"
WORLD_CLASS = {"mapper": "mapper_class", "aggregator": "aggregator_class"}
EXPORT_NAME = {"mapper": "Map", "aggregator": "Aggregate"}
# The SDK's refusal of a guest built for a world it does not implement (component.py).
WRONG_WORLD = re.compile(r"WrongWorld: (.*)")
# This build's own scripts: a change to either changes every component's cache key.
TOOL_SCRIPTS = ("build.py", "build_cache.py")
BUILD_CACHE = Path(os.environ.get("WEIR_GUEST_BUILD_CACHE", CACHE.parent / "guest-builds")) / "py"


def componentize_py() -> Path:
    return VENV / "bin" / "componentize-py"


def ensure_tools() -> Path:
    """The componentize-py of the venv, (re)creating the venv if it is stale."""
    tool = componentize_py()
    if tool.is_file() and STAMP.is_file() and filecmp.cmp(STAMP, REQUIREMENTS, shallow=False):
        return tool
    print(f"build.py: installing {REQUIREMENTS.name} into {VENV}", file=sys.stderr)
    if VENV.exists():
        shutil.rmtree(VENV)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    env = dict(os.environ, PIP_CACHE_DIR=str(CACHE / "pip"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "-r", str(REQUIREMENTS)], check=True, env=env)
    shutil.copyfile(REQUIREMENTS, STAMP)
    return tool


def build(world: str, guest: Path, output: Path, wit: Path) -> None:
    tool = ensure_tools()
    module = guest.stem
    if not module.isidentifier():
        sys.exit(f"build.py: {guest.name}: the guest's file name must be a Python module name")
    if module in ("weir_app", "weir_guest", "wit_world", "mapper", "aggregator"):
        sys.exit(f"build.py: {guest.name}: rename the guest, {module} is taken")
    output.parent.mkdir(parents=True, exist_ok=True)
    key = build_cache.cache_key(
        trees=[guest.parent, SDK_DIR / "weir_guest", wit],
        files=[REQUIREMENTS, *(Path(__file__).parent / f for f in TOOL_SCRIPTS)],
        words=[world, module],
    )
    cached = build_cache.lookup(BUILD_CACHE, key)
    partial = output.with_name(f".{output.name}.partial")
    if cached is None:
        componentize(tool, world, guest, partial, wit)
        build_cache.store(BUILD_CACHE, key, partial)
    else:
        shutil.copyfile(cached, partial)
    os.replace(partial, output)
    note = "" if cached is None else ", unchanged inputs: cached build"
    print(f"build.py: {output} ({output.stat().st_size / (1 << 20):.1f} MiB{note})", file=sys.stderr)


def componentize(tool: Path, world: str, guest: Path, partial: Path, wit: Path) -> None:
    """Runs componentize-py over the guest into `partial`; exits on failure."""
    module = guest.stem
    with tempfile.TemporaryDirectory(prefix="weir-py-build-") as tmp:
        app = Path(tmp) / "app"
        app.mkdir()
        # The app module componentize-py wraps: import the guest (its decorator
        # registers the function), then expose the world's export class, which checks
        # that the guest registered this world's function (a guest built for the wrong
        # world fails here, at build time).
        (app / "weir_app.py").write_text(
            f'"""Generated by sdk-python/tools/build.py: the {world} app of {guest.name}."""\n'
            f"import {module}  # noqa: F401 (registers the guest's function)\n"
            f"from weir_guest.component import {WORLD_CLASS[world]}\n\n"
            f"{EXPORT_NAME[world]} = {WORLD_CLASS[world]}()\n"
        )
        # The SDK package alone (not its tests, tools or caches) goes into the component.
        shutil.copytree(SDK_DIR / "weir_guest", app / "weir_guest", ignore=shutil.ignore_patterns("__pycache__"))
        command = [
            str(tool), "--wit-path", str(wit), "--world", world, "componentize", "weir_app",
            "-p", str(app), "-p", str(guest.parent),
            "-o", str(partial),
        ]
        # Without a VIRTUAL_ENV componentize-py would look for one through `site`; the
        # guest's dependencies come only from the paths given.
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        result = subprocess.run(command, cwd=tmp, env=env, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            wrong_world = WRONG_WORLD.search(result.stderr)
            if wrong_world:
                sys.exit(f"build.py: {guest}: {wrong_world.group(1)}")
            sys.stderr.write(result.stderr)
            sys.exit(f"build.py: componentize-py failed for {guest} (exit {result.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", choices=sorted(WORLD_CLASS), help="the weir world the guest exports")
    parser.add_argument("-o", "--output", type=Path, help="the component to write")
    parser.add_argument("--wit", type=Path, default=DEFAULT_WIT, help="the WIT directory (default: the repo's wit/)")
    parser.add_argument("--ensure-tools", action="store_true", help="only create or refresh the toolchain venv")
    parser.add_argument("guest", nargs="?", type=Path, help="the guest's .py file")
    args = parser.parse_args()
    if args.ensure_tools:
        print(ensure_tools())
        return
    if not (args.world and args.output and args.guest):
        parser.error("--world, -o and the guest file are required")
    if not args.guest.is_file():
        parser.error(f"{args.guest} is not a file")
    build(args.world, args.guest.resolve(), args.output.resolve(), args.wit.resolve())


if __name__ == "__main__":
    main()
