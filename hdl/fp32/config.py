"""Configuration of the pipelined FP32 units (:mod:`hdl.fp32`).

Every unit is a fixed chain of combinational *steps*. A step boundary is either a pipeline
register or a plain wire; the number of registers per unit (its ``latency`` in cycles) is a
config knob. The output of every unit is always registered, so ``latency >= 1``. With ``n``
stages the first ``n - 1`` boundaries of the unit's *cut priority list* (see
:data:`CUT_PRIORITY`) get registers, so every stage count is a balanced split of the same logic:
fewer stages mean lower latency and fewer flip-flops, more stages a higher clock.

This module imports no Amaranth, so numpy golden models in ``sim/`` can use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config import PresetMixin, check_choice, check_int

__all__ = ["FP32Config", "UNIT_NAMES", "STEP_BOUNDARIES", "CUT_PRIORITY",
           "ZERO_ORDERS"]

#: Registered block names, in the order used by docs and benchmarks.
UNIT_NAMES = ("fp32_add", "fp32_mul", "fp32_compare", "int_to_fp32", "fp32_to_int")

#: The internal step boundaries of each unit, in datapath order (the output register after
#: the last step is not listed: it always exists).
STEP_BOUNDARIES: dict[str, tuple[str, ...]] = {
    # unpack + classify + order by magnitude | align (shift + sticky) | add/subtract |
    # leading-zero count | normalize (left shift, result exponent) | round: prepare
    # (subnormal shift) | round: finish (nearest-even increment and packing) + specials
    "fp32_add": ("unpack", "align", "add", "lzc", "normalize", "round"),
    # unpack + leading-zero counts | normalize subnormal operands | 12x12 partial products |
    # sum of partial products | one-bit normalize + round: prepare | round: finish
    "fp32_mul": ("lzc", "unpack", "partial", "product", "round"),
    # magnitude compare | flags and max/min select
    "fp32_compare": ("magnitude",),
    # absolute value | normalize | round: prepare | round: finish
    "int_to_fp32": ("abs", "normalize", "round"),
    # unpack + shift amount | shift with round/sticky bits | increment, negate, saturate
    "fp32_to_int": ("unpack", "shift"),
}

#: Which boundaries get a register first as a unit's stage count grows (longest logic first).
CUT_PRIORITY: dict[str, tuple[str, ...]] = {
    "fp32_add": ("round", "lzc", "add", "normalize", "align", "unpack"),
    "fp32_mul": ("round", "product", "partial", "unpack", "lzc"),
    "fp32_compare": ("magnitude",),
    "int_to_fp32": ("round", "normalize", "abs"),
    "fp32_to_int": ("shift", "unpack"),
}

#: Legal values of :attr:`FP32Config.cmp_zero_order`.
ZERO_ORDERS = ("numpy", "ieee")


@dataclass(frozen=True)
class FP32Config(PresetMixin):
    """Pipeline depth and semantics knobs of the FP32 units.

    Parameters
    ----------
    add_stages : int
        Pipeline registers (= latency in cycles) of :class:`~hdl.fp32.add.FP32Add`, 1..7.
    mul_stages : int
        Latency of :class:`~hdl.fp32.mul.FP32Mul`, 1..6 (6: the subnormal operands'
        leading-zero counts registered before their shifts, for the FPGA builds' clock).
    cmp_stages : int
        Latency of :class:`~hdl.fp32.compare.FP32Compare`, 1..2.
    itof_stages : int
        Latency of :class:`~hdl.fp32.convert.IntToFP32`, 1..4.
    ftoi_stages : int
        Latency of :class:`~hdl.fp32.convert.FP32ToInt`, 1..3.
    cmp_zero_order : str
        How ``max``/``min`` of :class:`~hdl.fp32.compare.FP32Compare` treat operands that compare
        equal (``+0`` and ``-0``, or identical values). ``"numpy"`` (default): like
        ``np.maximum(a, b)`` / ``np.minimum(a, b)``, the result is ``b``. ``"ieee"``: IEEE
        754-2019 ``maximum``/``minimum``, ``-0 < +0`` (``max(+0, -0) = +0``, ``min = -0``).
        The ``less``/``equal``/``less_equal`` flags are IEEE in both modes (``-0 == +0``).

    The ``default`` preset (every boundary registered but the compare's ``magnitude`` and
    the multiplier's ``lzc``) reaches 100..136 MHz on ECP5 (see
    ``docs/fp32.md``); ``tiny`` is the shortest pipeline (one register per unit), for fast
    tests and small builds.
    """

    add_stages: int = 7
    mul_stages: int = 5
    cmp_stages: int = 1
    itof_stages: int = 4
    ftoi_stages: int = 3
    cmp_zero_order: str = "numpy"

    PRESETS: ClassVar[dict[str, dict]] = {
        "tiny": {"add_stages": 1, "mul_stages": 1, "cmp_stages": 1, "itof_stages": 1,
                 "ftoi_stages": 1},
        "default": {},
    }

    _STAGE_FIELDS: ClassVar[dict[str, str]] = {
        "fp32_add": "add_stages", "fp32_mul": "mul_stages", "fp32_compare": "cmp_stages",
        "int_to_fp32": "itof_stages", "fp32_to_int": "ftoi_stages",
    }

    def __post_init__(self):
        for unit, field in self._STAGE_FIELDS.items():
            check_int("FP32Config", field, getattr(self, field), lo=1,
                      hi=len(STEP_BOUNDARIES[unit]) + 1)
        if not isinstance(self.cmp_zero_order, str):
            raise TypeError(f"FP32Config.cmp_zero_order must be a str, not "
                            f"{type(self.cmp_zero_order).__name__} {self.cmp_zero_order!r}")
        check_choice("FP32Config", "cmp_zero_order", self.cmp_zero_order, ZERO_ORDERS)

    def stages(self, unit: str) -> int:
        """Pipeline registers of ``unit`` (one of :data:`UNIT_NAMES`)."""
        if unit not in self._STAGE_FIELDS:
            raise ValueError(f"unit must be one of {UNIT_NAMES}, not {unit!r}")
        return getattr(self, self._STAGE_FIELDS[unit])

    def latency(self, unit: str) -> int:
        """Cycles from an accepted input to its result being valid at the output (no stall)."""
        return self.stages(unit)

    def cuts(self, unit: str) -> dict[str, bool]:
        """``{boundary: registered?}`` for ``unit``'s internal step boundaries."""
        chosen = set(CUT_PRIORITY[unit][:self.stages(unit) - 1])
        return {b: b in chosen for b in STEP_BOUNDARIES[unit]}
