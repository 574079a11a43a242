"""Configuration and register map of the optimizer engine (pure Python, no Amaranth import).

The golden model (:mod:`sim.model.optim`), the host side (:mod:`sim.host.optim`) and the
hardware (:mod:`hdl.optim.engine`) import this module, so register addresses, opcodes and modes
are defined exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hdl.config import PresetMixin, check_int

__all__ = ["OptimConfig", "Op", "Mem", "Reg", "Mode", "SCALE_EXP_MAX", "STATUS_FIELDS",
           "unpack_status", "MODE_CLIP", "MODE_DYNSCALE"]


class Op:
    """Command opcodes (``cmd.payload.op``)."""
    SETREG = 0   #: register ``addr`` <- ``data``
    WRITE = 1    #: ``count`` words from ``wdata`` into ``mem[addr ...]``
    READ = 2     #: ``count`` words of ``mem[addr ...]`` onto ``rdata``
    ACCUM = 3    #: ``count`` gradient words from ``wdata``: ``G[i] = g`` (first) or ``G[i] + g``
    STEP = 4     #: one optimizer step over ``G[0:N]`` (check pass, then update pass or skip)
    #: one-pass step: with clipping off and ``skip_in = 0`` a single fused pass (the sum of
    #: squares is taken beside the update; a non-finite ``G`` is *not* detected: the caller
    #: guarantees it, e.g. the training core's write snooping); otherwise exactly ``STEP``
    STEP1 = 5
    ALL = (SETREG, WRITE, READ, ACCUM, STEP, STEP1)


class Mem:
    """Scratchpad selectors (``cmd.payload.mem``)."""
    W = 0   #: FP32 master weights
    M = 1   #: first state (momentum buffer / Adam first moment)
    V = 2   #: second state (Adam second moment)
    G = 3   #: gradient accumulation buffer
    ALL = (W, M, V, G)
    NAMES = ("w", "m", "v", "g")


class Mode:
    """Update rule (``Reg.MODE`` bits 1:0). AdamW is ``ADAM`` with ``WDEC != 1``."""
    SGD = 0
    MOMENTUM = 1
    ADAM = 2
    ALL = (SGD, MOMENTUM, ADAM)


class Reg:
    """Register addresses (``SETREG``). FP32 registers hold IEEE binary32 bit patterns."""
    MODE = 0          #: bits 1:0 Mode, bit 2 clip enable, bit 3 dynamic loss scaling enable
    N = 1             #: number of parameters a STEP updates (1..depth)
    LR = 2            #: FP32 step size (SGD/momentum: lr; Adam: lr / (1 - beta1**t), host)
    B1 = 3            #: FP32 beta1 (Adam) or momentum mu
    OMB1 = 4          #: FP32 1 - beta1 (Adam) or 1.0 (momentum)
    B2 = 5            #: FP32 beta2
    OMB2 = 6          #: FP32 1 - beta2
    RC2 = 7           #: FP32 1 / sqrt(1 - beta2**t) (host, per step)
    EPS = 8           #: FP32 Adam epsilon
    WDEC = 9          #: FP32 decoupled decay factor 1 - lr*wd (AdamW), 1.0 otherwise
    MAX_NORM = 10     #: FP32 clipping bound
    CLIP_EPS = 11     #: FP32 epsilon of the clipping factor
    SCALE_EXP = 12    #: loss scale exponent k (scale = 2**k), 0..SCALE_EXP_MAX; resets the
                      #: clean-step counter
    GROWTH = 13       #: clean steps before the scale doubles (1..2**16-1)
    CLEAR = 14        #: any write clears the step and skip counters
    ALL = tuple(range(15))
    FP32 = (LR, B1, OMB1, B2, OMB2, RC2, EPS, WDEC, MAX_NORM, CLIP_EPS)


#: Largest loss-scale exponent: 2**-k must stay a normal FP32 number.
SCALE_EXP_MAX = 126

#: The engine's ``status`` output: (field, width), LSB first.
STATUS_FIELDS = (("scale_exp", 8), ("good_count", 16), ("step_count", 32), ("skip_count", 32),
                 ("last_skipped", 1), ("clipped", 1), ("error", 1), ("sumsq", 32),
                 ("clip_factor", 32))


def unpack_status(word: int) -> dict:
    """The ``status`` port's integer value as ``{field: int}``."""
    out, shift = {}, 0
    for name, width in STATUS_FIELDS:
        out[name] = (word >> shift) & ((1 << width) - 1)
        shift += width
    return out

MODE_CLIP = 1 << 2
MODE_DYNSCALE = 1 << 3


@dataclass(frozen=True)
class OptimConfig(PresetMixin):
    """Optimizer engine (docs/datapaths.md).

    Parameters
    ----------
    depth : int
        Words in each of the four FP32 scratchpads W, M, V, G; a power of two, 16..65536.
    reduce_lanes : int
        Interleaved partial sums of the sum-of-squares reduction (a power of two, 2..64). Must
        exceed the FP32 adder latency (checked at elaboration). The golden model sums with the
        same lanes, so it fixes the summation order.
    rd_fifo_depth : int
        Output FIFO of the READ stream (absorbs backpressure), 2..64.
    ii : int
        Initiation interval of the update pipeline, 1..8: the check and update passes read
        one element every ``ii`` cycles, and the pipeline's 10 multiplies and 4 adds share
        ``ceil(10 / ii)`` multipliers and ``ceil(4 / ii)`` adders
        (:class:`~hdl.optim.datapath.OptimDatapath`). The results are the same words; a pass
        takes about ``ii`` times as long. 1 (a unit per operation) unless given: the FPGA
        build trades the optimizer's speed for area with more.
    """

    depth: int = 4096
    reduce_lanes: int = 8
    rd_fifo_depth: int = 4
    ii: int = 1

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"depth": 1024}, "default": {}}

    def __post_init__(self):
        check_int("OptimConfig", "depth", self.depth, lo=16, hi=65536)
        if self.depth & (self.depth - 1):
            raise ValueError(f"OptimConfig.depth must be a power of two, not {self.depth!r}")
        check_int("OptimConfig", "reduce_lanes", self.reduce_lanes, lo=2, hi=64)
        if self.reduce_lanes & (self.reduce_lanes - 1):
            raise ValueError(
                f"OptimConfig.reduce_lanes must be a power of two, not {self.reduce_lanes!r}")
        check_int("OptimConfig", "rd_fifo_depth", self.rd_fifo_depth, lo=2, hi=64)
        check_int("OptimConfig", "ii", self.ii, lo=1, hi=8)

    @property
    def addr_bits(self) -> int:
        return (self.depth - 1).bit_length()
