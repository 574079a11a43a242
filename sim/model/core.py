"""Golden model of the training core (pure numpy): one banked FP32 scratchpad, the sequencer
running programs of :mod:`hdl.core.isa`, the matmul engine, the vector unit and the optimizer
engine, composed from the blocks' golden models (no Amaranth import beyond the ISA layouts).

State
-----
* ``mem`` -- the scratchpad image, ``np.uint32`` of shape ``(config.lines, S)``: word
  ``(line, lane)``; global line ``bank * bank_depth + offset``.
* ``prog`` -- the program memory, ``config.prog_depth`` 128-bit words (ints).
* ``prec`` -- the precision table ``{(layer, mode): (width_a, width_b, rounding)}``.
* ``optim`` -- the optimizer engine's registers and status (a
  :class:`sim.model.optim.OptimEngineModel`; its step logic is reused, its memories are loaded
  from the four regions of an ``OPT`` instruction and written back).
* ``thresholds`` -- ``{(layer, mode, operand): Q16.16}`` of ``ADAPT`` (reset:
  :data:`THRESH_NEVER`); ``stats`` -- the FAST statistics (below).
* ``lfsrs`` -- the matmul engine's two converter LFSRs; they run on across passes *and*
  programs (only :meth:`CoreModel.reset` restarts them).
* ``counters`` -- cumulative since construction / :meth:`CoreModel.reset`:
  ``instructions`` (every executed instruction, including ``LOOP``, ``ENDLOOP`` (once per
  iteration), ``FENCE`` and ``HALT``), ``matmuls``, ``macs`` (``M*K*N`` per pass), ``beats``
  (:func:`sim.model.array.pass_beats` per pass), ``vec``, ``reduce``, ``softmax``, ``opt``,
  ``allreduces``, ``sendrecvs``.
* ``coll_flags`` -- the last ``ALLREDUCE``'s flags of this core's transmit codec (bit 0 a BFP
  group it sent held a NaN, bit 1 an infinity; 0 with FP32 links): the ``coll_flags`` field of
  the hardware's ``state`` register. Set by :class:`sim.model.multicore.MultiCoreModel`.

Execution (``run``)
-------------------
The whole program is checked first with :func:`hdl.core.isa.check_program_for`; a rejected program
executes nothing (memory, registers, LFSRs and counters unchanged) and ``(status, err_pc)`` is
returned. Otherwise instructions execute in program order from pc 0 (the hardware's scoreboard
makes its overlapped execution equal to this order) and ``(Status.OK, 0)`` is returned (the
sequencer's ``status`` / ``err_pc`` after a successful run):

* ``MATMUL``: :func:`sim.model.array.matmul_pass` on the matrices at ``a`` (``A``, ``M x K``),
  ``b`` (``B``, ``K x N``), ``c`` (``C``, ``M x N``) with ``(width_a, width_b, rounding)`` from
  ``prec[(layer, mode)]``; FWD writes ``C``, BWD_DATA ``A``, BWD_WEIGHT ``B``. A ``rows x
  cols`` matrix at line ``base`` occupies ``rows * ceil(cols / S)`` lines, element ``(r, c)``
  at line ``base + r * ceil(cols / S) + c // S``, lane ``c % S``; padding lanes are never
  written.
* ``acc`` resolves to ``acc == ON or (acc == AFTER_FIRST and iteration > 0)`` (the
  iteration is 0 outside a loop).
* ``VEC``, ``REDUCE``, ``SOFTMAX_XENT``: :func:`sim.model.vector.run_vector` with the loop
  offset added to the address fields flagged in ``loop`` (bit ``i`` <->
  ``LOOP_FIELDS[op][i]``), the resolved ``acc`` (``REDUCE``; 0 otherwise) and ``gscale`` =
  the FP32 bits of ``imm * 2**k`` (``SOFTMAX_XENT``; 0 otherwise), ``k`` the optimizer's
  current loss-scale exponent. The multiply is exact (an exponent add in hardware): ``imm`` and
  the product must be normal numbers, otherwise ``run`` raises ``ValueError``.
* ``OPT``: one optimizer ``STEP`` (:meth:`sim.model.optim.OptimEngineModel.step`; ``STEP1``
  when ``one_pass``) with ``N = count`` over the regions ``w, m, v, g`` (word ``i`` of region
  ``X`` at line ``X + i // S``, lane ``i % S``) and ``force_skip`` = the run's flags (below).
  A skipped step writes nothing; SGD writes W, momentum W and M, Adam W, M, V.
  ``count`` may not exceed :data:`OPT_MAX_COUNT` (65536, the engine's word range; ``run``
  raises ``ValueError``).
* Flags of a run (the core's ``flags`` counter, reset by each run): bit 0 / 1 a NaN / Inf
  reached a matmul pass's BFP converter; bit 2 a ``MATMUL``, ``VEC``, ``REDUCE`` or
  ``SOFTMAX_XENT`` wrote a NaN / Inf word into the **gradient window**: the lines of the ``g``
  ranges of the program's one-pass ``OPT`` instructions (their hull, collected by the program
  check). The words an instruction writes are those of its output (``MATMUL``: the ``rows x
  cols`` elements of the written matrix; ``VEC``: ``d``; ``REDUCE``: the ``cols`` words, or word
  0 for ``SUMSQ``, of ``d``; ``SOFTMAX_XENT``: ``d`` and the ``rows`` words of ``e``), tested
  on their final values: a matmul pass writes an element several times (running sums), but
  a NaN / Inf stays non-finite under further additions, so "some write was non-finite" and
  "the final value is non-finite" agree.
* ``ALLREDUCE`` (a core built with ``ranks >= 2``; on ``ranks = 1`` the program check rejects
  it with ``ERR_OPCODE``): the ring all-reduce of lines ``a .. a + lines - 1`` with the other
  cores' -- see :mod:`sim.model.multicore`, which runs ``ranks`` cores together. A lone
  ``CoreModel.run`` of a program that would execute one raises ``RuntimeError`` (nothing
  executes). The collective engine's writes are not seen by the gradient-write snoop.
* ``SENDRECV`` (likewise only with ``ranks >= 2``): lines ``a .. a + lines - 1`` go to the next
  core of the ring (``sdir = 1``: the previous one) and ``rlines`` lines from the previous core
  (``rdir = 1``: the next one) land at ``b`` -- also run by :mod:`sim.model.multicore` (a lone
  ``run`` raises ``RuntimeError``).
* ``LOOP count stride``: the body runs ``count`` times, iteration ``i`` with loop offset
  ``i * stride`` lines; ``ENDLOOP`` jumps back. ``FENCE``: nothing. ``HALT``: stop.
* FAST statistics (docs/fast.md): ``stats[(layer, mode)]`` holds two
  :class:`sim.model.stats.StatModel` (operand 0: the ``width_a`` side, converter 0; 1: the
  ``width_b`` side, converter 1); a ``MATMUL`` feeds them every group its converters
  quantize. Only ``reset`` and ``ADAPT`` clear them (not ``run``). ``ADAPT``: for every ``(layer, mode, operand)`` with
  ``num * 2**16 > threshold * den`` (:func:`adapt_raises`) that operand's width in
  ``prec[(layer, mode)]`` grows by 2 up to ``max_mantissa``; then every statistic is cleared.

Host actions (``CoreModel.apply``)
----------------------------------
A list of tuples, executed in order; the hardware host driver executes the same list, so the
golden model and the RTL are driven identically. Results go into the returned dict:

* ``("write", line, words)`` -- ``words``: ``(n, S)`` uint32 (FP32 bit patterns) into lines
  ``line .. line + n - 1``.
* ``("read", key, line, n)`` -- ``result[key]`` = an ``(n, S)`` uint32 copy of those lines.
* ``("program", words)`` -- program words (128-bit ints) from pc 0; later words of the program
  memory keep their contents (all 0 = ``HALT`` in a new model).
* ``("prec", layer, mode, width_a, width_b, rounding)`` -- one precision-table entry
  (``ValueError`` if invalid: widths in ``config.array.widths``, rounding 0..2, ``layer <
  config.layers``, mode 0..2).
* ``("thresh", layer, mode, operand, value)`` -- one ADAPT threshold (Q16.16, 32 bits;
  ``ValueError`` if out of range).
* ``("stats", key)`` -- ``result[key]`` = ``{(layer, mode, operand): StatState}``, every FAST
  statistic (docs/fast.md).
* ``("setreg", reg, value_bits)`` -- an optimizer register (:class:`hdl.optim.config.Reg`),
  a 32-bit value (the FP32 bit pattern for FP32 registers).
* ``("run",)`` -- run the program; ``(status, err_pc)`` is appended to the list
  ``result["run"]``.
* ``("status",)`` -- ``result["status"]`` = the optimizer status ``{field: int}`` with the keys
  of :data:`hdl.optim.config.STATUS_FIELDS` (a later one replaces it).
* ``("counters",)`` -- ``result["counters"]`` = a copy of ``counters`` plus the hardware's
  names ``array_beats`` (= ``beats``) and ``flags`` (bit 0 a NaN, bit 1 an Inf reached a BFP
  converter, bit 2 a NaN / Inf was written into the gradient window; sticky since reset).

This is the format of :class:`sim.host.driver.CoreDriver` ``.apply`` (the RTL side).

Reset (``reset``) mirrors the hardware reset: the LFSRs restart, the precision table returns to
``(max_mantissa, max_mantissa, 0)`` (8/8 nearest-even in both presets), the optimizer registers
to 0 and its status counters to 0, the counters to 0; the scratchpad and the program memory
keep their contents.
"""
from __future__ import annotations

import numpy as np

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, MODES
from hdl.core.config import CoreConfig
from hdl.core.isa import (LOOP_FIELDS, OP_NAMES, THRESH_FRAC_BITS, THRESH_NEVER, Acc, Op, Rop,
                          Status, check_program_for, decode)
from hdl.optim.config import STATUS_FIELDS, Mem, Mode, OptimConfig, Reg
from sim.model.array import matmul_pass, pass_beats
from sim.model.bfp import LFSR, ROUNDING_MODES
from sim.model.optim import OptimEngineModel, f32_bits
from sim.model.stats import StatModel, StatState
from sim.model.vector import get_matrix, get_vector, run_vector, set_matrix, set_vector

__all__ = ["CoreModel", "COUNTERS", "adapt_raises", "OPT_MAX_COUNT", "effective_fields", "resolve_acc",
           "gscale_bits", "gradient_window", "allreduce_pc"]

#: Largest ``OPT`` count (the optimizer engine's ``N`` range in the core).
OPT_MAX_COUNT = 65536

def adapt_raises(state: StatState, threshold: int) -> bool:
    """ADAPT's rule: ``r = num / den > threshold / 2**16``, decided exactly as
    ``num * 2**16 > threshold * den`` (never without a statistic)."""
    return bool(state.seen) and (state.num << THRESH_FRAC_BITS) > threshold * state.den


#: Names of :attr:`CoreModel.counters`.
COUNTERS = ("instructions", "matmuls", "macs", "beats", "vec", "reduce", "softmax", "opt",
            "allreduces", "sendrecvs")

_F32 = np.float32


def effective_fields(op: int, fields: dict, offset: int) -> dict:
    """``fields`` with the loop ``offset`` added to the address fields flagged in ``loop``."""
    out = dict(fields)
    for i, name in enumerate(LOOP_FIELDS.get(op, ())):
        if (fields.get("loop", 0) >> i) & 1:
            out[name] = fields[name] + offset
    return out


def resolve_acc(acc: int, iteration: int) -> bool:
    """The accumulate flag of a ``MATMUL`` / ``REDUCE`` in loop iteration ``iteration``."""
    return acc == Acc.ON or (acc == Acc.AFTER_FIRST and iteration > 0)


def executed_words(prog):
    """``(pc, op, fields)`` of the words a run of ``prog`` executes: pc 0 up to the first
    ``HALT`` outside a loop, in program order (loop bodies once)."""
    in_loop = False
    for pc, word in enumerate(prog):
        op, f = decode(word)
        yield pc, op, f
        if op == Op.LOOP:
            in_loop = True
        elif op == Op.ENDLOOP:
            in_loop = False
        elif op == Op.HALT and not in_loop:
            return


def gradient_window(prog, S: int) -> tuple[int, int]:
    """``(lo, hi)``: the lines ``lo .. hi - 1`` of the ``g`` ranges of the one-pass ``OPT``
    instructions from pc 0 to the first ``HALT`` outside a loop (their hull; ``lo >= hi``, empty,
    when there is none) -- what the sequencer's program check collects."""
    lo, hi = None, 0
    for _, op, f in executed_words(prog):
        if op == Op.OPT and f["one_pass"]:
            lo = f["g"] if lo is None else min(lo, f["g"])
            hi = max(hi, f["g"] + -(-f["count"] // S))
    return (hi if lo is None else lo), hi


def allreduce_pc(prog) -> int | None:
    """pc of the first ``ALLREDUCE`` or ``SENDRECV`` (an instruction that needs the other cores
    of the ring) a run of ``prog`` executes (the words from pc 0 to the first ``HALT`` outside
    a loop: a run executes each of them), or ``None``."""
    for pc, op, _ in executed_words(prog):
        if op in Op.COLLECTIVE:
            return pc
    return None


def _is_normal(x: np.float32) -> bool:
    e = (int(np.asarray(x, _F32).view(np.uint32)) >> 23) & 0xFF
    return 0 < e < 255


def gscale_bits(imm_bits: int, scale_exp: int) -> int:
    """FP32 bits of ``imm * 2**scale_exp`` (the exact exponent add of the sequencer)."""
    imm = np.array(imm_bits & 0xFFFFFFFF, np.uint32).view(_F32)[()]
    with np.errstate(all="ignore"):
        r = _F32(imm * _F32(2.0 ** scale_exp))
    if not (_is_normal(imm) and _is_normal(r)):
        raise ValueError(f"SOFTMAX_XENT gscale: imm 0x{imm_bits:08x} * 2**{scale_exp} must be a "
                         f"normal FP32 number (imm {imm!r}, product {r!r})")
    bits = int(np.asarray(r).view(np.uint32))
    assert bits == imm_bits + (scale_exp << 23)
    return bits


class CoreModel:
    """Golden model of the training core (see the module docstring for the semantics)."""

    def __init__(self, config: CoreConfig, *, grad_config=None, fp32_config=None,
                 divsqrt_config=None, log_config=None, optim_config: OptimConfig | None = None):
        """``grad_config`` (:class:`hdl.grad.config.GradConfig`), ``divsqrt_config`` (the exp
        unit's :class:`~hdl.fp32.divsqrt_config.FP32DivSqrtConfig`) and ``log_config`` go to
        :func:`sim.model.vector.run_vector` (``None``: its defaults). ``fp32_config`` (the
        add/mul pipelines) changes timing only, not results; it is kept for the hardware's
        signature. ``optim_config`` supplies the optimizer's ``reduce_lanes`` (the sum-of-squares
        order; default :class:`~hdl.optim.config.OptimConfig` ``()``: 8)."""
        if not isinstance(config, CoreConfig):
            raise TypeError(f"config must be a CoreConfig, not {type(config).__name__}")
        self.config = config
        # the vector unit of a TrainingCore of this config uses config.grad
        self.grad_config = grad_config if grad_config is not None else config.grad
        self.fp32_config = fp32_config
        self.divsqrt_config = divsqrt_config
        self.log_config = log_config
        S = config.size
        # The optimizer's memories are loaded from the OPT regions. Its word range is that of
        # the core's optimizer engine (hdl.core.core.TrainingCore): 65536 words, so N <= 65536.
        base = optim_config if optim_config is not None else OptimConfig()
        if not isinstance(base, OptimConfig):
            raise TypeError(f"optim_config must be an OptimConfig, not {type(base).__name__}")
        self._optim_config = OptimConfig(depth=OPT_MAX_COUNT, reduce_lanes=base.reduce_lanes,
                                         rd_fifo_depth=base.rd_fifo_depth)
        self.mem = np.zeros((config.lines, S), np.uint32)
        self.prog = [0] * config.prog_depth
        self.reset()

    # ---- reset / registers -----------------------------------------------------------------
    def reset(self) -> None:
        """Hardware reset: LFSRs, precision table, optimizer registers and status, counters;
        ``mem`` and ``prog`` keep their contents."""
        cfg = self.config
        arr = cfg.array
        self.lfsrs = (LFSR(arr.bfp(0)), LFSR(arr.bfp(1)))
        w = cfg.max_mantissa
        self.prec = {(layer, mode): (w, w, 0) for layer in range(cfg.layers) for mode in MODES}
        self.optim = OptimEngineModel(self._optim_config)
        self.invalid = self.overflow = False      # matmul converters' sticky NaN / Inf flags
        self.grad_nonfinite = False               # sticky: a NaN / Inf written into the window
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.coll_flags = 0                       # the last ALLREDUCE's transmit-codec flags
        self.thresholds = {(layer, mode, op): THRESH_NEVER for layer in range(cfg.layers)
                           for mode in MODES for op in (0, 1)}
        self.clear_stats()

    def clear_stats(self) -> None:
        """Empty every FAST statistic (reset and ``ADAPT`` do)."""
        arr = self.config.array
        self.stats = {(layer, mode): (StatModel(arr.bfp(0)), StatModel(arr.bfp(1)))
                      for layer in range(self.config.layers) for mode in MODES}

    def stat_states(self) -> dict:
        """``{(layer, mode, operand): StatState}`` of every statistic."""
        return {(layer, mode, op): pair[op].state
                for (layer, mode), pair in self.stats.items() for op in (0, 1)}

    def set_threshold(self, layer: int, mode: int, operand: int, value: int) -> None:
        """One ADAPT threshold (unsigned Q16.16, 32 bits)."""
        if (layer, mode, operand) not in self.thresholds:
            raise ValueError(f"threshold (layer, mode, operand) must have layer < "
                             f"{self.config.layers}, mode in {MODES}, operand 0 or 1, not "
                             f"{(layer, mode, operand)!r}")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or not 0 <= value <= 0xFFFF_FFFF:
            raise ValueError(f"threshold value must be a 32-bit unsigned int, not {value!r}")
        self.thresholds[(layer, mode, operand)] = int(value)

    def adapt(self) -> None:
        """``ADAPT``: raise every width whose statistic exceeds its threshold by 2 (up to
        ``max_mantissa``), then clear the statistics."""
        mm = self.config.max_mantissa
        for (layer, mode, op), st in self.stat_states().items():
            if adapt_raises(st, self.thresholds[(layer, mode, op)]):
                w = list(self.prec[(layer, mode)])
                w[op] = min(w[op] + 2, mm)
                self.prec[(layer, mode)] = tuple(w)
        self.clear_stats()

    def set_precision(self, layer: int, mode: int, width_a: int, width_b: int,
                      rounding: int) -> None:
        cfg = self.config
        for name, v in (("layer", layer), ("mode", mode), ("width_a", width_a),
                        ("width_b", width_b), ("rounding", rounding)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"precision {name} must be an int, not {v!r}")
        if not 0 <= layer < cfg.layers:
            raise ValueError(f"precision layer must be in 0..{cfg.layers - 1}, not {layer!r}")
        if mode not in MODES:
            raise ValueError(f"precision mode must be one of {MODES}, not {mode!r}")
        for name, v in (("width_a", width_a), ("width_b", width_b)):
            if v not in cfg.array.widths:
                raise ValueError(f"precision {name} must be one of {cfg.array.widths}, "
                                 f"not {v!r}")
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"precision rounding must be one of {ROUNDING_MODES}, "
                             f"not {rounding!r}")
        self.prec[(int(layer), int(mode))] = (int(width_a), int(width_b), int(rounding))

    def optim_setreg(self, reg: int, value_bits) -> None:
        """Optimizer ``SETREG`` (``value_bits``: 32-bit int; an ``np.float32`` is converted
        to its bits). Raises ``ValueError`` for what the engine would reject (unknown
        register, update rule 3 in ``MODE``)."""
        if reg not in Reg.ALL:
            raise ValueError(f"optimizer register must be one of {Reg.ALL}, not {reg!r}")
        word = (f32_bits(value_bits) if isinstance(value_bits, np.floating)
                else int(value_bits) & 0xFFFFFFFF)
        if reg == Reg.MODE and (word & 3) not in Mode.ALL:
            raise ValueError(f"Reg.MODE update rule must be one of {Mode.ALL}, "
                             f"not {word & 3}")
        if reg == Reg.N and not 1 <= word <= self._optim_config.depth:
            raise ValueError(f"Reg.N must be in 1..{self._optim_config.depth}, not {word}")
        self.optim.setreg(reg, word)

    def optim_status(self) -> dict:
        """The optimizer status, keys of :data:`hdl.optim.config.STATUS_FIELDS` in order."""
        st = self.optim.status()
        st["error"] = 0     # host errors raise here; OPT operands are checked by the program
        return {name: st[name] for name, _ in STATUS_FIELDS}

    # ---- memories ------------------------------------------------------------------------
    def write_lines(self, line: int, words) -> None:
        words = np.asarray(words)
        S = self.config.size
        if words.ndim != 2 or words.shape[1] != S:
            raise ValueError(f"words must have shape (n, {S}), not {words.shape}")
        if words.dtype != np.uint32:
            if words.dtype == np.float32:
                words = words.view(np.uint32)
            elif np.issubdtype(words.dtype, np.integer) and words.size \
                    and (words.min() < 0 or words.max() > 0xFFFFFFFF):
                raise ValueError("words must be 32-bit values")
            else:
                words = words.astype(np.uint32)
        n = words.shape[0]
        if not (0 <= line and line + n <= self.config.lines):
            raise ValueError(f"lines {line}..{line + n - 1} outside 0..{self.config.lines - 1}")
        self.mem[line:line + n] = words

    def read_lines(self, line: int, n: int) -> np.ndarray:
        if not (0 <= line and n >= 0 and line + n <= self.config.lines):
            raise ValueError(f"lines {line}..{line + n - 1} outside 0..{self.config.lines - 1}")
        return self.mem[line:line + n].copy()

    def load_program(self, words) -> None:
        """Write ``words`` into the program memory from pc 0 (later words are kept, as the
        host's PROG writes leave them)."""
        words = [int(w) for w in words]
        if len(words) > self.config.prog_depth:
            raise ValueError(f"program of {len(words)} words exceeds prog_depth "
                             f"{self.config.prog_depth}")
        for w in words:
            if not 0 <= w < 1 << 128:
                raise ValueError(f"instruction word 0x{w:x} does not fit 128 bits")
        self.prog[:len(words)] = words

    def get_matrix(self, base: int, rows: int, cols: int) -> np.ndarray:
        """The ``rows x cols`` matrix at line ``base`` as uint32 bits (a copy;
        :func:`sim.model.vector.get_matrix`)."""
        return get_matrix(self.mem, base, rows, cols, self.config.size)

    def set_matrix(self, base: int, values) -> None:
        """Store a matrix at line ``base`` (padding lanes untouched; a float array is stored
        as FP32 bits, an integer one as raw words: :func:`sim.model.vector.set_matrix`)."""
        set_matrix(self.mem, base, values, self.config.size)

    def get_words(self, base: int, count: int) -> np.ndarray:
        """Words ``0..count-1`` of the region at line ``base`` (uint32 copy)."""
        return get_vector(self.mem, base, count, self.config.size)

    def set_words(self, base: int, words) -> None:
        """Store words ``0..len-1`` of the region at line ``base`` (float: FP32 bits)."""
        set_vector(self.mem, base, words, self.config.size)

    # ---- execution -----------------------------------------------------------------------
    def check(self) -> tuple[int, int]:
        # every limit the sequencer checks, including the softmax row limit max_classes
        return check_program_for(self.prog, self.config)

    def run(self) -> tuple[int, int]:
        """Check, then execute the program. Returns ``(Status, err_pc)``: the first bad
        instruction when rejected, ``(Status.OK, 0)`` after a run (as the sequencer).

        Raises ``RuntimeError`` (before executing anything) when the program would execute an
        ``ALLREDUCE``: it needs the other cores of the ring, run the cores together in
        :class:`sim.model.multicore.MultiCoreModel`."""
        status, err_pc = self.check()
        if status != Status.OK:
            return status, err_pc
        pc = allreduce_pc(self.prog)
        if pc is not None:
            name = OP_NAMES[decode(self.prog[pc])[0]]
            raise RuntimeError(
                f"{name} at pc {pc}: a single CoreModel cannot run it (it needs "
                f"the other {self.config.ranks - 1} core(s) of the ring); run the cores "
                f"together with sim.model.multicore.MultiCoreModel")
        gen = self._execute()
        try:
            req = next(gen)
        except StopIteration as stop:
            return stop.value
        raise AssertionError(f"unexpected request {req!r}")   # allreduce_pc found none

    def _execute(self):
        """Execute the (already checked) program as a generator: at every ``ALLREDUCE`` it
        yields ``("allreduce", fields)`` (the instruction's fields; it has no loop-flagged
        fields) and resumes, with the next instruction, once the caller has written the
        all-reduced lines; at every ``SENDRECV`` likewise ``("sendrecv", fields)``, resumed
        once the caller has moved the words; it returns ``(Status.OK, 0)`` at the ``HALT``. Everything else is
        :meth:`run` (the run's ``run_flags``, ``trace`` and ``gwin`` start here)."""
        self.run_flags = 0          # flags of this run (the core's `flags` counter)
        #: the instructions this run executed, in order: ``(op, fields)`` with the loop offset
        #: applied, ``acc`` resolved to 0/1 and, for MATMUL, ``width_a``/``width_b`` of its
        #: precision entry (the inputs of the cycle formulas, sim.tb.cycles.core_step_*)
        self.trace = []
        self.gwin = gradient_window(self.prog, self.config.size)
        pc = 0
        loop = None                 # [body_pc, count, stride, iteration]
        cnt = self.counters
        while True:
            op, f = decode(self.prog[pc])
            cnt["instructions"] += 1
            it = loop[3] if loop else 0
            offset = it * loop[2] if loop else 0
            eff = effective_fields(op, f, offset)
            if op in (Op.MATMUL, Op.REDUCE):
                eff = dict(eff, acc=int(resolve_acc(f["acc"], it)))
            if op == Op.MATMUL:
                wa, wb, _ = self.prec[(f["layer"], f["mode"])]
                eff.update(width_a=wa, width_b=wb)
            self.trace.append((op, eff))
            if op == Op.HALT:
                return Status.OK, 0
            if op == Op.MATMUL:
                self._matmul(eff, bool(eff["acc"]))
            elif op in (Op.VEC, Op.REDUCE, Op.SOFTMAX_XENT):
                self._vector(op, eff, bool(eff["acc"]) if op == Op.REDUCE else False)
            elif op == Op.OPT:
                self._opt(f)
            elif op == Op.LOOP:
                loop = [pc + 1, f["count"], f["stride"], 0]
            elif op == Op.ENDLOOP:
                loop[3] += 1
                if loop[3] < loop[1]:
                    pc = loop[0]
                    continue
                loop = None
            elif op == Op.FENCE:
                pass
            elif op == Op.ADAPT:
                self.adapt()
            elif op == Op.ALLREDUCE:
                cnt["allreduces"] += 1
                yield "allreduce", dict(eff)
            elif op == Op.SENDRECV:
                cnt["sendrecvs"] += 1
                yield "sendrecv", dict(eff)
            else:                   # unreachable after check_program
                raise AssertionError(f"opcode {op} at pc {pc}")
            pc += 1

    def _matmul(self, f: dict, accumulate: bool) -> None:
        mode, M, K, N = f["mode"], f["M"], f["K"], f["N"]
        width_a, width_b, rounding = self.prec[(f["layer"], mode)]
        A = self.get_matrix(f["a"], M, K).view(np.float32)
        B = self.get_matrix(f["b"], K, N).view(np.float32)
        C = self.get_matrix(f["c"], M, N).view(np.float32)
        res = matmul_pass(mode, A, B, C, self.config.array, width_a=width_a, width_b=width_b,
                          rounding=rounding, accumulate=accumulate, lfsrs=self.lfsrs,
                          stats=self.stats[(f["layer"], mode)])
        target = {FWD: f["c"], BWD_DATA: f["a"], BWD_WEIGHT: f["b"]}[mode]
        self.set_matrix(target, res.out)
        self._snoop(target, np.asarray(res.out, np.float32).view(np.uint32))
        self.invalid |= res.invalid
        self.overflow |= res.overflow
        self.run_flags |= int(res.invalid) | int(res.overflow) << 1
        self.counters["matmuls"] += 1
        self.counters["macs"] += M * K * N
        self.counters["beats"] += pass_beats(mode, M, K, N, self.config.size)

    def _vector(self, op: int, f: dict, acc: bool) -> None:
        gscale = gscale_bits(f["imm"], self.optim.scale_exp) if op == Op.SOFTMAX_XENT else 0
        run_vector(self.mem, op, f, acc=int(acc), gscale=gscale, config=self.config,
                   **self._vector_kwargs())
        rows, cols = f["rows"], f["cols"]
        if op == Op.REDUCE:
            n = 1 if f["rop"] == Rop.SUMSQ else cols
            self._snoop(f["d"], self.get_words(f["d"], n)[None, :])
        else:
            self._snoop(f["d"], self.get_matrix(f["d"], rows, cols))
            if op == Op.SOFTMAX_XENT:
                self._snoop(f["e"], self.get_words(f["e"], rows)[None, :])
        self.counters[{Op.VEC: "vec", Op.REDUCE: "reduce", Op.SOFTMAX_XENT: "softmax"}[op]] += 1

    def _snoop(self, base: int, words: np.ndarray) -> None:
        """The gradient-write snoop: ``words`` (``rows x cols`` uint32, a matrix at line
        ``base``; one row for a vector) were written; a NaN / Inf among those in the gradient
        window sets flag bit 2."""
        lo, hi = self.gwin
        if lo >= hi:
            return
        S = self.config.size
        rows, cols = words.shape
        lpr = -(-cols // S)
        lines = base + np.arange(rows)[:, None] * lpr + np.arange(cols)[None, :] // S
        bad = ((words >> 23) & 0xFF) == 0xFF
        if np.any(bad & (lines >= lo) & (lines < hi)):
            self.grad_nonfinite = True
            self.run_flags |= 4

    def _vector_kwargs(self) -> dict:
        return {"grad_config": self.grad_config, "exp_config": self.divsqrt_config,
                "log_config": self.log_config}

    def _opt(self, f: dict) -> None:
        n = f["count"]
        if n > OPT_MAX_COUNT:
            raise ValueError(f"OPT count {n} exceeds the optimizer's {OPT_MAX_COUNT}-word range")
        opt = self.optim
        regions = {Mem.W: f["w"], Mem.M: f["m"], Mem.V: f["v"], Mem.G: f["g"]}
        for mem, base in regions.items():
            opt.mems[mem][:n] = self.get_words(base, n).view(np.float32)
        opt.setreg(Reg.N, n)
        # a NaN or Inf that reached a BFP converter in this run, or was written into a one-pass
        # OPT's gradient lines, skips the step, as a non-finite gradient does (the engine's
        # skip_in; the sequencer issues OPT only once every earlier MATMUL -- and, one-pass,
        # every earlier vector instruction -- has completed)
        skipped = opt.step(force_skip=bool(self.run_flags), one_pass=bool(f["one_pass"]))
        if not skipped:
            rule = opt.regs[Reg.MODE] & 3
            written = {Mode.SGD: (Mem.W,), Mode.MOMENTUM: (Mem.W, Mem.M),
                       Mode.ADAM: (Mem.W, Mem.M, Mem.V)}[rule]
            for mem in written:
                self.set_words(regions[mem], opt.mems[mem][:n].view(np.uint32))
        self.counters["opt"] += 1

    # ---- host actions ----------------------------------------------------------------------
    @property
    def flags(self) -> int:
        """Sticky flags: bit 0 a NaN, bit 1 an Inf reached a matmul pass's converter; bit 2 a
        NaN / Inf was written into the gradient window."""
        return int(self.invalid) | int(self.overflow) << 1 | int(self.grad_nonfinite) << 2

    def apply(self, actions) -> dict:
        """Execute host actions (format: module docstring); returns the results."""
        out: dict = {}
        for act in actions:
            kind, *args = act
            if kind == "write":
                self.write_lines(*args)
            elif kind == "read":
                key, line, n = args
                out[key] = self.read_lines(line, n)
            elif kind == "program":
                self.load_program(*args)
            elif kind == "prec":
                self.set_precision(*args)
            elif kind == "setreg":
                self.optim_setreg(*args)
            elif kind == "thresh":
                self.set_threshold(*args)
            elif kind == "stats":
                key, = args
                out[key] = self.stat_states()
            elif kind in ("run", "status", "counters") and args:
                raise ValueError(f"({kind!r},) takes no arguments, not {act!r}")
            elif kind == "run":
                out.setdefault("run", []).append(self.run())
            elif kind == "status":
                out["status"] = self.optim_status()
            elif kind == "counters":
                out["counters"] = dict(self.counters, array_beats=self.counters["beats"],
                                       flags=self.flags)
            else:
                raise ValueError(f"unknown host action {kind!r} in {act!r}")
        return out
