"""Configuration of the systolic array and the matmul engine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config import BFPConfig, FMACConfig, PresetMixin, check_bool, check_int, check_lanes

__all__ = ["ArrayConfig", "FWD", "BWD_DATA", "BWD_WEIGHT", "MODES", "MODE_NAMES"]

#: Run-time dataflow modes (the ``mode`` input of the array, the ``mode`` command field).
FWD = 0          #: ``Y = X . W``: X enters the left edge, partial sums flow down (along k)
BWD_DATA = 1     #: ``dX = dY . W^T``: dY enters the top edge, partial sums flow right (along n)
BWD_WEIGHT = 2   #: ``dW = X^T . dY``: X left, dY top, every PE accumulates over the batch
MODES = (FWD, BWD_DATA, BWD_WEIGHT)
MODE_NAMES = {FWD: "fwd", BWD_DATA: "bwd_data", BWD_WEIGHT: "bwd_weight"}


@dataclass(frozen=True)
class ArrayConfig(PresetMixin):
    """In-place transposed systolic array and matmul engine (docs/array.md).

    Parameters
    ----------
    size : int
        ``S``: the array is ``S x S`` PEs; also the BFP group size of streamed operands and the
        side of a weight tile sharing one exponent. One of 2, 4, 8, 16.
    max_mantissa : int
        Widest operand magnitude (2, 4, 6 or 8); pass widths are chosen at run time.
    lanes : int
        Chunk multipliers per PE (power of two, ``<= (max_mantissa/2)**2``).
    exp_bits : int
        Signed width of BFP shared exponents (>= 10: must hold -150..127).
    noise_bits : int
        Stochastic-rounding noise bits of the BFP converters.
    lfsr_seed : int
        Seed of the first converter's LFSR; the second converter uses ``lfsr_seed + 1``.
    mem_depth : int
        Lines (``S`` FP32 words each) in each of the three scratchpads A, B, C; a power of two.
    dim_bits : int
        Width of the ``M``, ``K``, ``N`` command fields (largest dimension ``2**dim_bits - 1``).
    req_reg : bool
        A register slice (:class:`hdl.lib.streamreg.StreamRegister`) between each line
        generator and its quantizer, behind a skid buffer
        (:class:`~hdl.lib.streamreg.StreamSkid`: the generator steps on a registered
        ``ready``; no cycle changes) (the FPGA build): a line request (its address, a
        register of the generator's :class:`~hdl.array.loops.LineWalk`, behind the zero
        row's mux; its lane mask from the remaining-count compares) is registered before it
        reaches the scratchpad, instead of going on through the bank crossbar and into the
        block RAM in the same cycle. Results are the same; every pass takes one cycle more
        (docs/array.md, *Measured*).
    cmd_reg : bool
        Every command waits one cycle in the pending register and is validated on its way in
        (the FPGA build): the checks (line-count multiplies, range compares) end at registers
        instead of driving the pass start and everything it loads in the same cycle. Results
        and pass ``cycles`` are the same; each command is answered one cycle later, and a
        ``START`` starts (or is rejected) one cycle later again, after its checks' status and
        its pass's counts are registered (docs/array.md, *Host protocol*). The FAST
        statistics' ``stat_load`` / ``stat_in`` are registered in each quantizer too (the load
        lands a cycle later, long before the pass's first group reaches a converter).
    out_skid : bool
        A skid buffer (:class:`hdl.lib.streamreg.StreamSkid`) on each quantizer's output (the
        FPGA build): the beat assembler's ``ready`` (the array's, the tile's, the descriptor
        FIFO's) ends at the buffer's register instead of running on into the converter's
        pipeline enable, which reaches every stage of the converter. Results are the same
        (docs/array.md, *Measured*).
    role_ports : bool
        The engine's scratchpad ports by role instead of by scratchpad (the training core,
        whose A, B and C are one address space behind a crossbar that routes by address):
        ``q0`` and ``q1`` (the quantizers' reads; they never write) and ``acc`` (the
        accumulator's read-modify-write, and the host's ``READ``/``WRITE`` while no pass
        runs, ``mem`` checked and then not used) instead of ``a``, ``b``, ``c``, and no
        :class:`~hdl.array.ports.PortMux`. Results and cycles are the same.
    out_magnitude : bool
        The array stores each result's magnitude and sign in its output FIFO instead of the
        two's complement chain (:func:`hdl.edge_converter.to_magnitude` on the FIFO's write
        side, ``S`` bits wider), and the accumulator's edge converters take them so
        (``EdgeConverter(magnitude=True)``): no negation between the FIFO's read, the
        accumulator's part select and the edge converters' first register (the FPGA build;
        the S = 8 FPGA engine's edge magnitudes were over 10 ns at every placement seed in
        the thirtieth session). Results and cycles are the same; the array's ``out`` and the
        accumulator's ``i`` carry ``value`` in that form.
    shared_converter : bool
        One FP32 -> BFP converter for both operand paths
        (:class:`~hdl.array.convpair.SharedConverter`; the FPGA build): each path keeps its
        line reads, block memories, LFSR and FAST statistic, and its groups are the same words
        in the same order; the converter takes one group per cycle for both, so a pass whose
        paths both stream a group per cycle (2-bit widths) takes longer (docs/array.md).
        Replaces ``out_skid`` (each path's output is a FIFO).
    acc_lanes : int
        Edge converters and FP32 adders of the output accumulator (0: ``S``, one result line
        per cycle). Fewer (a power of two dividing ``S``; the FPGA build) handle a line in
        ``S / acc_lanes`` cycles: no cost while a beat takes at least that many cycles
        (``beat_cycles``: 16 at 8-bit, 4 at 4-bit widths), a slower result drain at 2-bit
        widths (docs/array.md).
    mem_latency : int
        Read latency of the engine's scratchpad ports, 1, 2 or 3 (2 and 3 need
        ``role_ports``: the training core's FPGA build, whose crossbar registers the engine's
        requests, :class:`hdl.core.scratchpad.Scratchpad` ``registered``, and with 3 the
        banks' read data, ``out_registered``). Each cycle of it over 1 makes the quantizers
        and the accumulator take a line's data a cycle later (their line FIFOs have the room;
        at 3 the accumulator reads the old line a cycle earlier, from the line's start, so it
        still arrives before its sums), every pass one cycle longer and the engine's own
        ``READ`` answer a cycle later (docs/array.md).
    """

    size: int = 8
    max_mantissa: int = 8
    lanes: int = 1
    exp_bits: int = 10
    noise_bits: int = 8
    lfsr_seed: int = 0x1
    mem_depth: int = 512
    dim_bits: int = 10
    req_reg: bool = False
    cmd_reg: bool = False
    out_skid: bool = False
    role_ports: bool = False
    out_magnitude: bool = False
    shared_converter: bool = False
    acc_lanes: int = 0
    mem_latency: int = 1

    PRESETS: ClassVar[dict[str, dict]] = {
        "tiny": {"size": 4, "mem_depth": 256},
        "default": {},
    }

    def __post_init__(self):
        check_int("ArrayConfig", "size", self.size, choices=(2, 4, 8, 16))
        check_int("ArrayConfig", "max_mantissa", self.max_mantissa, choices=(2, 4, 6, 8))
        max_pairs = (self.max_mantissa // 2) ** 2
        check_int("ArrayConfig", "lanes", self.lanes, lo=1, hi=max_pairs)
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"ArrayConfig.lanes must be a power of two, not {self.lanes!r}")
        check_int("ArrayConfig", "exp_bits", self.exp_bits, lo=10, hi=16)
        check_int("ArrayConfig", "noise_bits", self.noise_bits, lo=1, hi=16)
        check_int("ArrayConfig", "lfsr_seed", self.lfsr_seed, lo=1, hi=2**32 - 2)
        check_int("ArrayConfig", "mem_depth", self.mem_depth, lo=4, hi=1 << 16)
        if self.mem_depth & (self.mem_depth - 1):
            raise ValueError(f"ArrayConfig.mem_depth must be a power of two, "
                             f"not {self.mem_depth!r}")
        check_int("ArrayConfig", "dim_bits", self.dim_bits, lo=2, hi=16)
        for name in ("req_reg", "cmd_reg", "out_skid", "role_ports", "out_magnitude",
                     "shared_converter"):
            check_bool("ArrayConfig", name, getattr(self, name))
        check_lanes("ArrayConfig", "acc_lanes", self.acc_lanes, self.size)
        check_int("ArrayConfig", "mem_latency", self.mem_latency, choices=(1, 2, 3))
        if self.mem_latency >= 2 and not self.role_ports:
            raise ValueError(f"ArrayConfig.mem_latency = {self.mem_latency} needs "
                             f"role_ports = True")

    # ---- derived -----------------------------------------------------------------------------
    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(range(2, self.max_mantissa + 1, 2))

    @property
    def acc_bits(self) -> int:
        """Signed bits of an exact partial-sum chain: ``S`` products of ``max_mantissa``-bit
        magnitudes need ``2*max_mantissa + log2(S)`` magnitude bits plus a sign."""
        return 2 * self.max_mantissa + (self.size - 1).bit_length() + 1

    @property
    def edge_exp_bits(self) -> int:
        """Signed bits of an output exponent ``E_a + E_b - (m_a - 1) - (m_b - 1)``."""
        return self.exp_bits + 1

    @property
    def fmac(self) -> FMACConfig:
        return FMACConfig(max_mantissa=self.max_mantissa, lanes=self.lanes,
                          acc_bits=max(self.acc_bits, 2 * self.max_mantissa + 2))

    def bfp(self, index: int = 0) -> BFPConfig:
        """BFP converter ``index`` (0: the left/first operand, 1: weights or the top operand)."""
        return BFPConfig(group_size=self.size, max_mantissa=self.max_mantissa,
                         exp_bits=self.exp_bits, noise_bits=self.noise_bits,
                         lfsr_seed=self.lfsr_seed + index)

    def beat_cycles(self, width_a: int, width_b: int) -> int:
        """Cycles of one beat: ``ceil((m_a/2)*(m_b/2)/lanes)``."""
        pairs = (width_a // 2) * (width_b // 2)
        return -(-pairs // self.lanes)
