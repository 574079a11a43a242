"""Configuration dataclasses and named presets.

Every parameter of every block comes from a frozen dataclass validated in ``__post_init__``.
An invalid value raises :class:`ValueError` (or :class:`TypeError` for a wrong type) whose
message names the parameter and the value. Presets are made with :func:`dataclasses.replace`
from the defaults; every config class defines every name in :data:`PRESET_NAMES`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["PRESET_NAMES", "PresetMixin", "check_int", "check_choice", "BFPConfig", "FMACConfig",
           "STAT_BITS", "check_stat_bits", "check_bool", "check_lanes"]

#: Names every config class understands. ``tiny`` is for fast tests; ``default`` is the
#: FAST paper's point (group 16, mantissas up to 8 bits).
PRESET_NAMES = ("tiny", "default")


def check_int(owner: str, name: str, value, *, lo=None, hi=None, choices=None):
    """Raise a clear TypeError/ValueError unless ``value`` is an int within bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int, not {type(value).__name__} {value!r}")
    if choices is not None and value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {tuple(choices)}, not {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{owner}.{name} must be >= {lo}, not {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{owner}.{name} must be <= {hi}, not {value!r}")


def check_bool(owner: str, name: str, value):
    """Raise a clear TypeError unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{owner}.{name} must be a bool, not {value!r}")


def check_lanes(owner: str, name: str, value, size: int):
    """Raise unless ``value`` is 0 (meaning ``size``) or a power of two dividing ``size``."""
    check_int(owner, name, value, lo=0, hi=size)
    if value and (size % value or value & (value - 1)):
        raise ValueError(f"{owner}.{name} must be 0 or a power of two dividing size = {size}, "
                         f"not {value!r}")


def check_choice(owner: str, name: str, value, choices):
    if value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {tuple(choices)}, not {value!r}")


class PresetMixin:
    """``Config.preset(name)``: the defaults with the preset's overrides applied."""

    #: ``{preset name: {field: value}}``; names missing here mean "the defaults".
    PRESETS: ClassVar[dict[str, dict]] = {}

    @classmethod
    def preset(cls, name: str):
        if not isinstance(name, str):
            raise TypeError(f"preset name must be a str, not {type(name).__name__} {name!r}")
        if name not in PRESET_NAMES:
            raise ValueError(f"preset must be one of {PRESET_NAMES}, not {name!r}")
        return dataclasses.replace(cls(), **cls.PRESETS.get(name, {}))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BFPConfig(PresetMixin):
    """FAST block floating point format (docs/bfp.md).

    Parameters
    ----------
    group_size : int
        Values sharing one exponent (``G``), 1..64.
    max_mantissa : int
        Widest magnitude the hardware holds, in {2, 4, 6, 8}. The width used is chosen at
        run time from ``2..max_mantissa`` in 2-bit steps.
    exp_bits : int
        Width of the signed shared-exponent field; must hold -150..127 (>= 9).
    noise_bits : int
        Random bits added below the LSB in stochastic rounding (FAST uses 8), 1..16.
    lfsr_seed : int
        Non-zero reset seed of the stochastic-rounding LFSR.
    """

    group_size: int = 16
    max_mantissa: int = 8
    exp_bits: int = 10
    noise_bits: int = 8
    lfsr_seed: int = 0x1

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"group_size": 4}, "default": {}}

    def __post_init__(self):
        check_int("BFPConfig", "group_size", self.group_size, lo=1, hi=64)
        check_int("BFPConfig", "max_mantissa", self.max_mantissa, choices=(2, 4, 6, 8))
        check_int("BFPConfig", "exp_bits", self.exp_bits, lo=9, hi=16)
        check_int("BFPConfig", "noise_bits", self.noise_bits, lo=1, hi=16)
        check_int("BFPConfig", "lfsr_seed", self.lfsr_seed, lo=1, hi=2**32 - 1)

    @property
    def widths(self) -> tuple[int, ...]:
        """Mantissa widths selectable at run time."""
        return tuple(range(2, self.max_mantissa + 1, 2))


@dataclass(frozen=True)
class FMACConfig(PresetMixin):
    """Chunked fMAC (docs/fmac.md).

    Parameters
    ----------
    max_mantissa : int
        Widest operand magnitude, in {2, 4, 6, 8}; widths are chosen at run time.
    lanes : int
        2b x 2b chunk multipliers per fMAC, a power of two from 1 to ``(max_mantissa/2)**2``.
    acc_bits : int
        Width of the signed exact-integer accumulator, 2*max_mantissa+2 .. 64.
    """

    max_mantissa: int = 8
    lanes: int = 1
    acc_bits: int = 32

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"acc_bits": 24}, "default": {}}

    def __post_init__(self):
        check_int("FMACConfig", "max_mantissa", self.max_mantissa, choices=(2, 4, 6, 8))
        max_pairs = (self.max_mantissa // 2) ** 2
        check_int("FMACConfig", "lanes", self.lanes, lo=1, hi=max_pairs)
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"FMACConfig.lanes must be a power of two, not {self.lanes!r}")
        check_int("FMACConfig", "acc_bits", self.acc_bits, lo=2 * self.max_mantissa + 2, hi=64)

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(range(2, self.max_mantissa + 1, 2))


#: Width of the FAST statistic's ``num`` / ``den`` accumulators (one host word each;
#: :class:`hdl.bfp.stat.QuantStat`, :mod:`sim.model.stats`).
STAT_BITS = 32


def check_stat_bits(owner: str, stat_bits, config: BFPConfig) -> None:
    """Raise unless ``stat_bits`` is an int from ``max_mantissa + group_size.bit_length() + 1``
    (one group's terms fit) to 32."""
    check_int(owner, "stat_bits", stat_bits,
              lo=config.max_mantissa + config.group_size.bit_length() + 1, hi=32)
