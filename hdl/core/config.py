"""Configuration of the training core (pure Python)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..array.config import ArrayConfig
from ..config import PresetMixin, check_bool, check_int, check_lanes

__all__ = ["CoreConfig"]


@dataclass(frozen=True)
class CoreConfig(PresetMixin):
    """Training core (docs/core.md).

    Parameters
    ----------
    size : int
        ``S``: array side, BFP group of streamed operands, and FP32 words per scratchpad line.
    max_mantissa, lanes, exp_bits, noise_bits, lfsr_seed :
        As in :class:`hdl.array.config.ArrayConfig`.
    banks : int
        Scratchpad banks (a power of two, 4..16). Each has one read and one write port; an
        instruction owns the banks it touches while it runs.
    bank_depth : int
        Lines (``S`` FP32 words) per bank, a power of two. Global line address =
        ``bank * bank_depth + line``; at most ``2**16`` lines in all (the ISA's address fields).
    prog_depth : int
        Instructions in the program memory (a power of two, 16..4096).
    layers : int
        Rows of the precision table (layer index of a MATMUL), 1..16.
    dim_bits : int
        Width of a matmul dimension inside the engine (``M, K, N <= 2**dim_bits - 1``).
    max_classes : int
        Longest ``SOFTMAX_XENT`` row (the vector unit's ``GradConfig.max_classes``).
    vector_lanes : int
        Elements per cycle of the vector unit's elementwise ``VEC`` ops and ``REDUCE
        BIAS_GRAD`` (docs/vector.md): a divisor of ``size``, or 0 for ``size`` (a whole line
        per cycle, the default). Each lane costs one FP32 adder and multiplier (``VEC``) and
        one FP32 adder (bias gradient). :attr:`vec_lanes` is the resolved value.
    ranks : int
        Cores in the ring this core is built for (docs/multicore.md): 1 (the default) builds no
        collective engine and ``ALLREDUCE`` is an unknown opcode; 2..16 add the engine
        (:attr:`collective`), its link codecs and the ``link_tx`` / ``link_rx`` ports.
    link_width : int
        Bits of one flit on the ring's links (a divisor of 32): what ``link_tx`` / ``link_rx``
        carry.
    vector_sumsq : bool
        The vector unit's ``REDUCE SUMSQ`` (its own squaring :class:`~hdl.lib.lanesum.LaneSum`).
        ``False`` (the FPGA build) leaves that hardware out and the sequencer rejects ``REDUCE
        SUMSQ`` with ``ERR_FIELD``; compiled training programs do not use it (the optimizer's
        check pass has its own sum of squares for clipping).
    reverse_links : bool
        Reverse links (``ranks >= 2`` only): the collective engine also sends FP32 words to
        rank ``r - 1`` (``link_tx_rev``) and receives them from rank ``r + 1``
        (``link_rx_rev``), chosen per ``SENDRECV`` by its ``sdir`` / ``rdir`` fields; what
        pipeline parallelism with more than two stages needs (gradients go back). ``False``
        (the default): such a ``SENDRECV`` is ``ERR_FIELD``.
    decode_stages : int
        Register stages of the sequencer's instruction decoder (:class:`hdl.core.decoder.
        Decoder`): 0 (the default) decodes the program memory's word in one cycle; 2 (the FPGA
        build) registers the word and cuts the decode into three steps, for the clock
        (docs/core.md, *Sequencer*). Each instruction then takes :attr:`instr_cycles`.
    vector_read_reg : bool
        A register after each of the vector unit's line readers (the FPGA build): a bank's
        read data then reaches the FP32 units one cycle later, instead of through the
        crossbar in the cycle it leaves the block RAM. Every vector instruction takes one
        cycle more (per chunk of a bias gradient; docs/vector.md).
    spad_reg : bool
        Every scratchpad client is one of the crossbar's ``registered`` clients
        (:class:`hdl.core.scratchpad.Scratchpad`; the FPGA build; needs
        :attr:`vector_read_reg` and :attr:`optim_one_port`): the requests pass a register
        before the crossbar, so a bank's address is no longer reached from an engine's logic
        in one cycle (nor from the collective engine's link handshakes). Read data comes two
        cycles after a read: every vector instruction takes
        one cycle more (per chunk of a bias gradient; docs/vector.md), every matmul pass one
        more (:attr:`hdl.array.config.ArrayConfig.mem_latency`), the optimizer's ports one
        more (``port_skew`` 5: a one-pass ``OPT`` two cycles more), and a host ``READ``
        answers a cycle later (one every two cycles).
    spad_out_reg : bool
        The scratchpad banks' read data passes a register before the crossbar's read
        selects (:class:`hdl.core.scratchpad.Scratchpad` ``out_registered``; the FPGA build;
        needs :attr:`spad_reg`): a block RAM's slow output (5.8 ns from the clock on the
        ECP5's DP16KD without its output register) ends at a flip-flop, not at a client
        across the chip. Every registered client's read data then comes three cycles after
        its read (:attr:`spad_latency`): every vector instruction one cycle more again, every
        matmul pass one more, the optimizer's ports one more (``port_skew`` 6), a host
        ``READ`` one more. The collective engine's client too (its ``mem_latency``): each
        all-reduce step and each top-k segment takes a few cycles more.
    matmul_regs : bool
        The matmul engine's timing registers (the FPGA build):
        :attr:`hdl.array.config.ArrayConfig.req_reg` (a line address registered between the
        engine's line generators, a multiply, and the bank crossbar; every pass one cycle more)
        and :attr:`~hdl.array.config.ArrayConfig.cmd_reg` (a command validated into a register
        before its pass starts, its checks' status and counts registered in a second step;
        every ``MATMUL`` one cycle more, two on an idle engine), and with them the array's
        results stored as magnitude and sign (``out_magnitude``; no cycle changes) and one BFP
        converter for both operand paths (``shared_converter``, thirty-second session; it
        replaces the quantizers' output skid buffers, ``out_skid``: every pass 3-5 cycles
        more, a 2-bit pass about a cycle more per group beyond one per beat).
    coll_regs : bool
        The collective engine's timing registers (the FPGA build; with ``ranks >= 2``):
        :attr:`hdl.multi.config.CollectiveConfig.cmd_reg` (its command through a register
        stage and its checks in two more: every ``ALLREDUCE`` and ``SENDRECV`` three cycles
        more) and :attr:`~hdl.multi.config.CollectiveConfig.rx_reg` (a received word reaches
        the memory port a cycle later, from registers), a skid buffer after the transmit
        codec's converter (:class:`hdl.multi.codec.LinkTxCodec` ``conv_skid``), and the
        engine's read data registered after the word select and the poison mux (its
        ``mem_latency`` one more than :attr:`spad_latency`: the scratchpad's read select no
        longer reaches the engine's adder in the same cycle).
    acc_lanes : int
        The matmul engine's output accumulator lanes (:attr:`hdl.array.config.ArrayConfig.
        acc_lanes`; 0: ``size``). The FPGA build has 2: a result line takes ``size / 2``
        cycles, hidden behind beats of that many cycles or more (4-bit and 8-bit widths), a
        slower drain at 2-bit widths (docs/array.md).
    vector_shared_units : bool
        The vector unit's first elementwise and bias-gradient lanes use the softmax's FP32
        units (the FPGA build): one multiplier and two adders fewer. The vector unit runs one
        instruction at a time, so they never meet; results and cycles are the same
        (docs/vector.md).
    optim_shared_units : bool
        The optimizer's first shared multiplier, its adder and its divider are the vector
        unit's (the FPGA build; needs :attr:`vector_shared_units` and the core's
        ``optim_config.ii > 1``): one multiplier, one adder and one divider fewer. The
        sequencer then never runs ``OPT`` beside a vector instruction (each waits for the
        other's unit to be idle); the softmax's divide takes one cycle more (the pool's
        operand register). Results are the same (docs/core.md "FPGA").
    serial_log : bool
        The softmax's ``log(s)`` once per row on :class:`~hdl.fp32.log_serial.FP32LogSerial`
        (the FPGA build): 6 DSPs instead of the pipelined log's 26. A ``SOFTMAX_XENT`` takes
        ``LOG_SERIAL_LATENCY + 2`` (24) cycles more; the words are the same (docs/vector.md).
    optim_one_port : bool
        The optimizer's four word ports (``W, M, V, G``) reach the scratchpad through one
        crossbar client instead of four (the FPGA build; needs the core's ``optim_config.ii
        >= 4``): :class:`~hdl.lib.memport.WordPortsToLine` takes them one per cycle, behind a
        register, so the engine's reads answer four cycles later (``OptimEngine.port_skew =
        4``) and its writes land up to four cycles late. Results are the same; an ``OPT``
        takes a few cycles more (docs/core.md "FPGA").
    """

    size: int = 8
    max_mantissa: int = 8
    lanes: int = 1
    exp_bits: int = 10
    noise_bits: int = 8
    lfsr_seed: int = 0x1
    banks: int = 8
    bank_depth: int = 1024
    prog_depth: int = 256
    layers: int = 8
    dim_bits: int = 10
    max_classes: int = 256
    vector_lanes: int = 0
    ranks: int = 1
    link_width: int = 32
    vector_sumsq: bool = True
    reverse_links: bool = False
    decode_stages: int = 0
    vector_read_reg: bool = False
    spad_reg: bool = False
    spad_out_reg: bool = False
    matmul_regs: bool = False
    coll_regs: bool = False
    acc_lanes: int = 0
    vector_shared_units: bool = False
    optim_shared_units: bool = False
    optim_one_port: bool = False
    serial_log: bool = False

    PRESETS: ClassVar[dict[str, dict]] = {
        "tiny": {"size": 4, "bank_depth": 2048, "max_classes": 64},
        "default": {},
    }

    #: Overrides of the FPGA build (:meth:`fpga`; ``make synth``'s ``training_core_fpga`` rows,
    #: docs/core.md "FPGA"): one vector lane instead of ``S``, no ``REDUCE SUMSQ``, and
    #: ``FPGA_BANKS`` banks of at most ``FPGA_WORDS`` words (a smaller crossbar, half the
    #: block RAM of the presets' scratchpads; the default MLP still compiles). Compiled
    #: programs give the results of the same config without them; the compiler places the
    #: tensors in fewer banks, so units overlap less, and the vector unit takes more cycles
    #: (docs/vector.md's table). The decoder gets two register stages
    #: (:attr:`decode_stages`; with the program word's register four more cycles per
    #: instruction), the vector unit's line
    #: readers a register (:attr:`vector_read_reg`; one more cycle per vector instruction)
    #: and its scratchpad clients registered requests (:attr:`spad_reg`; one more) and
    #: the banks registered read data (:attr:`spad_out_reg`; one more),
    #: the matmul engine its request and command registers (:attr:`matmul_regs`; two more
    #: cycles per ``MATMUL``, three on an idle engine; with them its results as magnitude and
    #: sign and one BFP converter for both operand paths, ``ArrayConfig.out_magnitude`` and
    #: ``shared_converter``: 3-5 cycles more per pass, more at 2-bit widths), the collective
    #: engine its command
    #: registers (:attr:`coll_regs`; three more cycles per collective), two accumulator lanes
    #: (:attr:`acc_lanes`), and the vector
    #: unit's lanes share the softmax's FP32 units (:attr:`vector_shared_units`), and the
    #: optimizer a multiplier, an adder and the divider with the vector unit
    #: (:attr:`optim_shared_units`: ``OPT`` and vector instructions take turns), and the
    #: optimizer's four memory ports are one crossbar client (:attr:`optim_one_port`), and
    #: the softmax's log is the serial one (:attr:`serial_log`: 20 DSPs fewer).
    FPGA: ClassVar[dict] = {"vector_lanes": 1, "vector_sumsq": False, "decode_stages": 2,
                            "vector_read_reg": True, "spad_reg": True,
                            "spad_out_reg": True,
                            "matmul_regs": True, "coll_regs": True, "acc_lanes": 2,
                            "vector_shared_units": True, "optim_shared_units": True,
                            "optim_one_port": True, "serial_log": True}
    #: Banks of the FPGA build (when the config has more).
    FPGA_BANKS: ClassVar[int] = 4
    #: Most FP32 words of the FPGA build's scratchpad (lines rounded down to a power of two):
    #: 32,768, half the presets' 65,536. The default MLP (64-64-10, batch 32, Adam) needs
    #: 26,352 words at S = 4, 27,520 at S = 8 (the compiler's plan); the block RAM this saves
    #: (64 DP16KD) is what two cores need to share the LFE5U-85F's 208.
    FPGA_WORDS: ClassVar[int] = 32768
    #: Initiation interval of the FPGA build's optimizer pipeline
    #: (:attr:`hdl.optim.config.OptimConfig.ii`, passed as the core's ``optim_config``): its
    #: 10 multiplies and 4 adds share 3 multipliers and an adder, the optimizer reads one
    #: element every 4 cycles (the same words; docs/core.md "FPGA").
    FPGA_OPTIM_II: ClassVar[int] = 4

    def __post_init__(self):
        for name in ("size", "max_mantissa", "lanes", "exp_bits", "noise_bits", "lfsr_seed",
                     "dim_bits"):
            check_int("CoreConfig", name, getattr(self, name))
        check_int("CoreConfig", "banks", self.banks, choices=(4, 8, 16))
        check_int("CoreConfig", "bank_depth", self.bank_depth, lo=16, hi=1 << 14)
        if self.bank_depth & (self.bank_depth - 1):
            raise ValueError(f"CoreConfig.bank_depth must be a power of two, "
                             f"not {self.bank_depth!r}")
        if self.banks * self.bank_depth > 1 << 16:
            raise ValueError(f"CoreConfig.banks * bank_depth must be <= 65536 lines, not "
                             f"{self.banks} * {self.bank_depth}")
        check_int("CoreConfig", "prog_depth", self.prog_depth, lo=16, hi=4096)
        if self.prog_depth & (self.prog_depth - 1):
            raise ValueError(f"CoreConfig.prog_depth must be a power of two, "
                             f"not {self.prog_depth!r}")
        check_int("CoreConfig", "layers", self.layers, lo=1, hi=16)
        check_int("CoreConfig", "max_classes", self.max_classes, lo=2, hi=4095)
        check_bool("CoreConfig", "matmul_regs", self.matmul_regs)
        check_bool("CoreConfig", "coll_regs", self.coll_regs)
        check_lanes("CoreConfig", "acc_lanes", self.acc_lanes, self.size)
        self.array        # validates the array fields (their messages name ArrayConfig)
        check_int("CoreConfig", "vector_lanes", self.vector_lanes, lo=0)
        if self.vector_lanes and self.size % self.vector_lanes:
            raise ValueError(f"CoreConfig.vector_lanes must divide size = {self.size} (or be 0 "
                             f"for size), not {self.vector_lanes!r}")
        check_int("CoreConfig", "ranks", self.ranks, lo=1, hi=16)
        check_int("CoreConfig", "link_width", self.link_width, lo=1, hi=32)
        for name in ("vector_sumsq", "vector_read_reg", "spad_reg", "spad_out_reg",
                     "reverse_links",
                     "vector_shared_units", "optim_shared_units", "optim_one_port",
                     "serial_log"):
            check_bool("CoreConfig", name, getattr(self, name))
        if self.spad_reg and not (self.vector_read_reg and self.optim_one_port):
            raise ValueError("CoreConfig.spad_reg needs vector_read_reg = True and "
                             "optim_one_port = True")
        if self.spad_out_reg and not self.spad_reg:
            raise ValueError("CoreConfig.spad_out_reg needs spad_reg = True")
        if self.vector_shared_units and self.vec_lanes != 1:
            raise ValueError("CoreConfig.vector_shared_units needs one vector lane "
                             f"(vector_lanes = 1), not {self.vec_lanes}")
        if self.optim_shared_units and not self.vector_shared_units:
            raise ValueError("CoreConfig.optim_shared_units needs vector_shared_units = True")
        if self.reverse_links and self.ranks < 2:
            raise ValueError("CoreConfig.reverse_links needs ranks >= 2 (a ring), not "
                             f"ranks = {self.ranks}")
        check_int("CoreConfig", "decode_stages", self.decode_stages, choices=(0, 2))
        if 32 % self.link_width:
            raise ValueError(f"CoreConfig.link_width must divide 32, not {self.link_width!r}")

    def fpga(self) -> "CoreConfig":
        """This config as the FPGA build: the :attr:`FPGA` overrides, and at most
        :attr:`FPGA_BANKS` banks holding the same lines, or at most :attr:`FPGA_WORDS` words
        if that is fewer (``dataclasses.replace``; applied twice, the same)."""
        banks = min(self.banks, self.FPGA_BANKS)
        cap = 1 << ((self.FPGA_WORDS // self.size).bit_length() - 1)    # lines, a power of 2
        lines = min(self.lines, max(cap, 16 * banks))
        return dataclasses.replace(self, **self.FPGA, banks=banks, bank_depth=lines // banks)

    @property
    def instr_cycles(self) -> int:
        """Cycles of an instruction that waits for nothing, in the program check and in the
        run: 3 (FETCH, DECODE, then CHECK or the issue) with ``decode_stages = 0``; with
        stages, FETCH, READ (the program memory's word into a fabric register), LOAD (the
        word into the instruction register), ``decode_stages + 1`` DECODE cycles, then CHECK
        or the issue: 7."""
        return 3 if self.decode_stages == 0 else 5 + self.decode_stages

    @property
    def spad_latency(self) -> int:
        """Read latency of the scratchpad's clients (every engine's, the host's and the
        collective engine's): 1, 2 with :attr:`spad_reg`, 3 with :attr:`spad_out_reg` too."""
        return 1 + int(self.spad_reg) + int(self.spad_out_reg)

    @property
    def array(self) -> ArrayConfig:
        """The matmul engine's config: one address space of ``banks * bank_depth`` lines,
        reached through ports by role (``role_ports``: two readers and the accumulator)."""
        return ArrayConfig(size=self.size, max_mantissa=self.max_mantissa, lanes=self.lanes,
                           exp_bits=self.exp_bits, noise_bits=self.noise_bits,
                           lfsr_seed=self.lfsr_seed, mem_depth=self.lines,
                           dim_bits=self.dim_bits, req_reg=self.matmul_regs,
                           cmd_reg=self.matmul_regs, out_skid=False, role_ports=True,
                           out_magnitude=self.matmul_regs,
                           shared_converter=self.matmul_regs,
                           acc_lanes=self.acc_lanes, mem_latency=self.spad_latency)

    @property
    def collective(self):
        """The collective engine's :class:`hdl.multi.config.CollectiveConfig` (``ranks``
        cores, 16-bit word addresses relative to the ``ALLREDUCE``'s first line, 24-bit
        timeouts (a pipeline stage's ``SENDRECV`` may wait for the other stage's whole pass),
        the default BFP link format, top-k compression with the default
        :class:`~hdl.multi.config.TopK`, 16 of every 256 words, reverse links as
        :attr:`reverse_links`, the scratchpad's read latency :attr:`spad_latency` and a
        transmit read-ahead of ``3 + mem_latency`` words, enough for a word per cycle), or
        ``None`` when ``ranks == 1``. Its memory port's read latency is :attr:`spad_latency`,
        one more with :attr:`coll_regs` (the read data registered in front of the engine)."""
        if self.ranks == 1:
            return None
        from ..multi.config import CollectiveConfig, TopK
        lat = self.spad_latency + int(self.coll_regs)
        return CollectiveConfig(ranks=self.ranks, depth=1 << 16, timeout_bits=24, topk=TopK(),
                                reverse=self.reverse_links, mem_latency=lat,
                                tx_fifo_depth=3 + lat, cmd_reg=self.coll_regs,
                                rx_reg=self.coll_regs)

    @property
    def vec_lanes(self) -> int:
        """Elements per cycle of the vector unit: ``vector_lanes``, or ``size`` when 0."""
        return self.vector_lanes or self.size

    @property
    def lines(self) -> int:
        return self.banks * self.bank_depth

    @property
    def line_bits(self) -> int:
        return (self.lines - 1).bit_length()

    @property
    def bank_bits(self) -> int:
        return (self.bank_depth - 1).bit_length()

    @property
    def words(self) -> int:
        """FP32 words in the whole scratchpad."""
        return self.lines * self.size

    @property
    def grad(self):
        """The vector unit's :class:`~hdl.grad.config.GradConfig`: row buffers of
        ``max_classes`` words (bias-gradient rows wider than that run in column chunks)."""
        from ..grad.config import GradConfig
        return GradConfig(max_cols=self.max_classes, max_classes=self.max_classes)

    def bank_of(self, line: int) -> int:
        return line // self.bank_depth


def fpga_optim_config():
    """The optimizer config of the FPGA builds (:meth:`CoreConfig.fpga` cores, whose
    ``optim_shared_units`` need ``ii > 1``): ``OptimConfig(ii=CoreConfig.FPGA_OPTIM_II)``."""
    from ..optim.config import OptimConfig
    return OptimConfig(ii=CoreConfig.FPGA_OPTIM_II)


def fpga_fp32_config():
    """The FP32 units' config of the FPGA builds: ``FP32Config`` with ``mul_stages = 6``, the
    multipliers' subnormal leading-zero counts registered before their shifts (one cycle more
    per multiply; the optimizer's multipliers were the S = 8 build's slowest paths, 16.8 ns
    estimated at 5070c42, docs/core.md)."""
    from ..fp32.config import FP32Config
    return FP32Config(mul_stages=6)


def fpga_divsqrt_config():
    """The divide and square root units' config of the FPGA builds: ``FP32DivSqrtConfig``
    with ``lzc_stage``, the operands' leading-zero counts registered before their shifts
    (one cycle more per divide and square root; the optimizer's square roots and the
    shared divider were among the FPGA builds' slowest paths, docs/core.md)."""
    from ..fp32.divsqrt_config import FP32DivSqrtConfig
    return FP32DivSqrtConfig(lzc_stage=True)


def fpga_core_kwargs() -> dict:
    """The keyword arguments of a :class:`~hdl.core.core.TrainingCore` of an FPGA build
    (:meth:`CoreConfig.fpga` config) besides ``config``: :func:`fpga_optim_config`,
    :func:`fpga_fp32_config` and :func:`fpga_divsqrt_config`."""
    return {"optim_config": fpga_optim_config(), "fp32_config": fpga_fp32_config(),
            "divsqrt_config": fpga_divsqrt_config()}
