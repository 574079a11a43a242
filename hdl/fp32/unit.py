"""The shell shared by the single-stream FP32 units: config check, ``latency``, ports.

Every unit (add, mul, compare, int <-> FP32, div, sqrt, exp, log) is a
:class:`amaranth.lib.wiring.Component` with one operand stream ``i`` and one result stream
``o`` (results in input order) and publishes ``latency``. What differs per unit is declared as
class attributes: the config class, the payload layouts and where the latency comes from.
"""
from __future__ import annotations

from amaranth.hdl import Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..formats import FP32
from .config import FP32Config
from .unpack import CutPipeline

__all__ = ["FP32StreamUnit", "FP32CutUnit"]


class FP32StreamUnit(wiring.Component):
    """Base of the FP32 units: ``i`` (``IN`` payloads) -> ``o`` (``OUT`` payloads).

    Subclasses set ``CONFIG`` (the config class; ``config=None`` means its defaults),
    ``IN``/``OUT`` (payload layouts, default :data:`~hdl.formats.FP32`) and ``LATENCY_ATTR``
    (the config attribute holding the latency), or override :meth:`latency_of`.
    A ``config`` of another type raises ``TypeError`` naming the expected class.
    """

    CONFIG: type = FP32Config
    IN = FP32
    OUT = FP32
    LATENCY_ATTR = "latency"

    def __init__(self, *, config=None):
        if config is None:
            config = self.CONFIG()
        if not isinstance(config, self.CONFIG):
            raise TypeError(f"config must be an {self.CONFIG.__name__}, "
                            f"not {type(config).__name__}")
        self.config = config
        self.latency = self.latency_of(config)
        super().__init__({
            "i": In(stream.Signature(self.IN)),
            "o": Out(stream.Signature(self.OUT)),
        })

    @classmethod
    def latency_of(cls, config) -> int:
        """Cycles from an accepted operand to its result (no stall)."""
        return getattr(config, cls.LATENCY_ATTR)

    def stall_enable(self, m) -> Signal:
        """Whole-pipeline stall: ``en = ~o.valid | o.ready`` advances every stage, and
        ``i.ready = en``."""
        en = Signal(name="en")
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        return en


class FP32CutUnit(FP32StreamUnit):
    """An :class:`~hdl.fp32.config.FP32Config` unit built on :class:`CutPipeline`, whose
    stage cuts and latency are ``config.cuts(UNIT)`` / ``config.latency(UNIT)``."""

    UNIT: str = ""

    @classmethod
    def latency_of(cls, config) -> int:
        return config.latency(cls.UNIT)

    def cut_pipeline(self, m, name: str) -> CutPipeline:
        p = CutPipeline(m, i=self.i, o=self.o, cuts=self.config.cuts(self.UNIT), name=name)
        assert p.latency == self.latency
        return p
