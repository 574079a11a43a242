"""The top-level blocks ``tessera generate`` and the test harness know by name.

A module of :mod:`hdl` that has top-level blocks defines ``TESSERA_BLOCKS``, a list of
:class:`Block`. This registry imports every module of the package and collects them, so adding
a block never means editing a shared table.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

__all__ = ["Block", "blocks", "get_block"]


@dataclass(frozen=True)
class Block:
    """A generatable top-level block.

    Parameters
    ----------
    name : str
        CLI and build-directory name (``bfp_converter``).
    build : callable
        ``build(preset) -> wiring.Component``.
    params : callable
        ``params(preset) -> dict``: JSON-serialisable parameters for software (config fields,
        ``latency``, port widths), written beside the Verilog.
    """

    name: str
    build: Callable
    params: Callable


_BLOCKS: dict[str, Block] | None = None


def blocks() -> dict[str, Block]:
    global _BLOCKS
    if _BLOCKS is None:
        import hdl
        found = {}
        for info in sorted(pkgutil.walk_packages(hdl.__path__, "hdl."), key=lambda i: i.name):
            if info.name in ("hdl.cli",):
                continue
            module = importlib.import_module(info.name)
            for block in getattr(module, "TESSERA_BLOCKS", ()):
                if block.name in found:
                    raise RuntimeError(f"block name {block.name!r} defined twice")
                found[block.name] = block
        _BLOCKS = dict(sorted(found.items()))
    return _BLOCKS


def get_block(name: str) -> Block:
    all_blocks = blocks()
    if name not in all_blocks:
        raise ValueError(f"block must be one of {tuple(all_blocks)}, not {name!r}")
    return all_blocks[name]
