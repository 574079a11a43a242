"""Stall-all pipeline registers shared by the BFP converters."""
from __future__ import annotations

from amaranth.hdl import Module, Signal

__all__ = ["StallAll"]


class StallAll:
    """Registers of a stall-all pipeline: every stage register loads on one enable.

    ``en = ~o.valid | o.ready`` and ``i.ready = en``: the pipeline advances whenever its output
    register is empty or read, and freezes as a whole otherwise, so nothing is dropped, the
    output payload holds while ``o.valid & ~o.ready``, and ``o.valid`` (a register) never
    depends on ``o.ready``. Idle input cycles travel through as ``valid = 0`` stages.

    Data registers are reset-less (their content is meaningless while the stage's valid bit,
    which :meth:`valid` makes with a reset, is 0).
    """

    def __init__(self, m: Module, *, i, o, name: str):
        self.m = m
        self.en = Signal(name=f"{name}_en")
        m.d.comb += [self.en.eq(~o.valid | o.ready), i.ready.eq(self.en)]

    def reg(self, value, *, name: str, shape=None):
        """A stage register of ``value`` (its own shape unless ``shape`` is given)."""
        r = Signal(shape if shape is not None else value.shape(), name=name, reset_less=True)
        with self.m.If(self.en):
            self.m.d.sync += r.eq(value)
        return r

    def valid(self, value, *, name: str):
        """The next stage's valid bit (reset to 0)."""
        v = Signal(name=name)
        with self.m.If(self.en):
            self.m.d.sync += v.eq(value)
        return v
