"""Configuration of the gradient datapaths (pure Python, no Amaranth import)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hdl.config import PresetMixin, check_int

__all__ = ["GradConfig"]


@dataclass(frozen=True)
class GradConfig(PresetMixin):
    """Gradient datapaths (docs/datapaths.md).

    Parameters
    ----------
    lanes : int
        Interleaved partial sums of a reduction (sum of squares, softmax denominator), a power
        of two 2..64; must exceed the FP32 adder latency (checked at elaboration). The golden
        model (:func:`sim.model.grad.lane_sum`) sums in the same order.
    max_cols : int
        Columns of the bias-gradient accumulator (its memory depth), 2..65536.
    max_classes : int
        Longest softmax row, 2..65536: depth of each of the two softmax row banks; the e FIFO
        holds ``max_classes`` plus the EXP-to-OUT delay.
    """

    lanes: int = 8
    max_cols: int = 1024
    max_classes: int = 1024

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"max_cols": 64, "max_classes": 64},
                                          "default": {}}

    def __post_init__(self):
        check_int("GradConfig", "lanes", self.lanes, lo=2, hi=64)
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"GradConfig.lanes must be a power of two, not {self.lanes!r}")
        check_int("GradConfig", "max_cols", self.max_cols, lo=2, hi=65536)
        check_int("GradConfig", "max_classes", self.max_classes, lo=2, hi=65536)
