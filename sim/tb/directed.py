"""A directed host-command stream for the training core (docs/testing.md, "Coverage"): the
paths compiled programs and the random fuzzer leave out, checked word for word like any fuzz
stream (:func:`sim.tb.fuzz.fuzz_core` over :class:`sim.tb.fuzz.HostModel`).

Compiled programs use the FAST statistics, precision entries and ``(layer, mode)`` pairs of
their own few layers, and train on well-scaled data; the coverage report
(``docs/bench/coverage.md``) showed the sequencer's per-slot arms and the vector unit's FP32
special-value arms untouched in the cocotb tier. :func:`directed_commands` reaches them on
purpose:

* **FAST, every slot.** A precision entry for every ``(layer, mode)`` (widths below the top,
  every rounding mode), a threshold for every statistic slot (some never written, some too
  high to raise, the rest 0), a ``MATMUL`` for every ``(layer, mode)``, the statistics read
  back through ``REG``, then ``ADAPT`` rounds with ``MATMUL`` rounds between them until every
  width reaches the top, and one ``ADAPT`` whose statistic would raise a width the host has
  already set to the top. Each round's products are kept in their own lines, so the widths
  every ``ADAPT`` chose are checked through the results (where the banks are too small for
  a region per round, e.g. S = 8 with 1,024 lines, the regions are reused round after round
  and a round's results are read back before a later one overwrites them).
* **Every bank on the matmul engine's ports.** One ``MATMUL`` per mode with its operands
  in banks ``(k, k+1, k+2)`` for every ``k`` (the scratchpad's crossbar pairs the FAST
  rounds leave out: they use banks 0 to 2).
* **FP32 special values in the vector unit.** Every ``VEC`` operation (with and without
  broadcast), ``REDUCE`` (both operations, every ``acc``) and ``SOFTMAX_XENT`` on
  class-covering operands (:func:`sim.model.fp32.random_pairs`: subnormals, zeros, infinities,
  NaNs, near-cancellation, exponent sums near overflow and underflow), ``SCALE`` by immediates
  from the subnormal to the top binade.

The stream only uses a configuration's first ``DIRECTED_BANKS`` banks and needs
:func:`directed_depth` lines in each (:func:`directed_commands` raises ``ValueError``
otherwise). :func:`intent` reruns the stream on the golden model and reports what it reached,
so a test can check that the stream still does what it is for.
"""
from __future__ import annotations

import numpy as np

from hdl.core.config import CoreConfig
from hdl.core.core import STAT_REG_BASE
from hdl.core.host import HostOp
from hdl.core.isa import PREC_ENTRY, Acc, Op, Rop, Vop, encode, stat_slots
from sim.model import fp32 as f32
from sim.model.core import adapt_raises
from sim.tb.fuzz import HostModel, _line_int

__all__ = ["directed_commands", "directed_depth", "out_regions", "intent", "DIRECTED_BANKS",
           "MODES"]

#: Banks the stream uses (operands of one instruction are in different banks).
DIRECTED_BANKS = 8
#: The matmul modes (FWD, BWD_DATA, BWD_WEIGHT); mode 3 has no precision entry or statistic.
MODES = (0, 1, 2)
#: The operand each matmul mode writes (docs/isa.md): FWD ``c``, BWD_DATA ``a``,
#: BWD_WEIGHT ``b``; it reads the other two.
WRITES = {0: "c", 1: "a", 2: "b"}
#: ``MATMUL`` rounds (the first at the host's widths, one after each ``ADAPT``).
ROUNDS = 6
#: Vector shapes: a ``ROWS x COLS`` matrix.
ROWS, COLS = 8, 32
#: ``SCALE`` immediates: subnormal, smallest normal, small and large powers of two, ordinary,
#: the largest finite value, signed zero.
SCALE_IMMS = (0x00000001, 0x00800000, 0x0D800000, 0x40400000, 0xBF000000, 0x71800000,
              0x7F7FFFFF, 0x80000000)
#: Matrices the vector program writes (VEC with and without broadcast, the SCALEs, two
#: SOFTMAX_XENT gradients), each in its own lines.
VECTOR_OUTPUTS = (sum(2 if vop in Vop.READS_B else 1 for vop in Vop.ALL) + len(SCALE_IMMS) + 2)


#: Output regions per ``(layer, mode)`` pair the stream needs at least: rounds 2 and 3 run in
#: one program, so they must not share one.
MIN_OUT_REGIONS = 2


def out_regions(config: CoreConfig) -> int:
    """Output regions of ``S x S`` per ``(layer, mode)`` pair: one per ``MATMUL`` round where
    banks 0 to 2 hold them between the inputs and the crossbar round's two top tiles, else as
    many as they hold (round ``r`` writes region ``r mod out_regions``)."""
    tile = config.layers * len(MODES) * config.size
    return min(ROUNDS, (config.bank_depth - 2 * config.size) // tile - 1)


def directed_depth(config: CoreConfig) -> int:
    """Lines per bank :func:`directed_commands` needs: ``1 + MIN_OUT_REGIONS`` tiles of
    ``S x S`` per ``(layer, mode)`` pair (banks 0 to 2), or ``VECTOR_OUTPUTS`` matrices of
    ``ROWS x COLS`` (bank 6), whichever is more, and two ``S x S`` tiles at the top of every
    bank (the crossbar round)."""
    S = config.size
    return 2 * S + max((1 + MIN_OUT_REGIONS) * config.layers * len(MODES) * S,
                       VECTOR_OUTPUTS * ROWS * -(-COLS // S))


def _write_matrix(cmds, base, values, rows, cols, S):
    """WRITE commands of a ``rows x cols`` matrix of FP32 bit patterns (row-major; each row
    padded to whole lines with +0)."""
    cl = -(-cols // S)
    v = np.asarray(values, np.uint32).reshape(rows, cols)
    for r in range(rows):
        row = list(v[r]) + [0] * (cl * S - cols)
        for k in range(cl):
            cmds.append((HostOp.WRITE, base + r * cl + k, _line_int(row[k * S:(k + 1) * S])))


def _prec(width_a, width_b, rounding):
    return PREC_ENTRY.const({"width_a": width_a, "width_b": width_b,
                             "rounding": rounding}).as_value().value


def _run(cmds, prog):
    cmds += [(HostOp.PROG, pc, w) for pc, w in enumerate(prog)]
    cmds.append((HostOp.START, 0, 0))


def directed_commands(config: CoreConfig, seed: int = 0) -> list[tuple[int, int, int]]:
    """The directed stream of raw host commands ``(op, addr, data)`` (module docstring); its
    programs all end ``OK``. Assumes a zero scratchpad and no thresholds written (a reset core
    whose scratchpad was cleared), as :class:`sim.tb.fuzz.HostModel` does."""
    if not isinstance(config, CoreConfig):
        raise TypeError(f"config must be a CoreConfig, not {config!r}")
    if config.banks < DIRECTED_BANKS:
        raise ValueError(f"config.banks must be >= {DIRECTED_BANKS} for the directed stream, "
                         f"not {config.banks}")
    if config.bank_depth < directed_depth(config):
        raise ValueError(f"config.bank_depth must be >= {directed_depth(config)} for the "
                         f"directed stream, not {config.bank_depth}")
    if config.max_classes < COLS:
        raise ValueError(f"config.max_classes must be >= {COLS} for the directed stream, "
                         f"not {config.max_classes}")
    cfg = config
    rng = np.random.default_rng(seed)
    cmds: list[tuple[int, int, int]] = []
    cmds += _fast_commands(cfg, rng)
    cmds += _vector_commands(cfg, rng)
    cmds += _crossbar_commands(cfg, rng)
    return cmds


# ---- the matmul engine's ports on every bank -------------------------------------------------
def _crossbar_commands(cfg, rng):
    """One ``S x S`` ``MATMUL`` per mode with its operands ``a``, ``b``, ``c`` in banks
    ``(k, k+1, k+2) mod banks`` for every ``k``: the matmul engine's read and write ports
    reach every bank of the scratchpad's crossbar (the FAST rounds keep them in banks 0 to
    2). Inputs in each bank's last-but-one tile, results in its last tile (lines no other
    part of the stream uses)."""
    S, D, B = cfg.size, cfg.bank_depth, cfg.banks
    cmds = []
    for bank in range(B):
        vals = (rng.standard_normal(S * S) * 2.0 ** rng.integers(-4, 5)).astype(np.float32)
        _write_matrix(cmds, bank * D + D - 2 * S, vals.view(np.uint32), S, S, S)
    prog = []
    for k in range(B):
        for mode in MODES:
            ops = {}
            for j, name in enumerate("abc"):
                bank = (k + j) % B
                ops[name] = bank * D + D - (S if WRITES[mode] == name else 2 * S)
            prog.append(encode(Op.MATMUL, mode=mode, acc=0, layer=0, loop=0, M=S, K=S, N=S,
                               **ops))
    _run(cmds, prog + [encode(Op.HALT)])
    return cmds


# ---- FAST: every slot ------------------------------------------------------------------------
def _fast_commands(cfg, rng):
    S, D = cfg.size, cfg.bank_depth
    top = max(cfg.array.widths)
    pairs = [(layer, mode) for layer in range(cfg.layers) for mode in MODES]
    cmds = []
    # inputs: one S x S tile per (layer, mode) in each of banks 0, 1 and 2, scaled
    # differently per pair so the statistics differ (a FWD pass reads a and b, BWD_DATA b and
    # c, BWD_WEIGHT a and c: docs/isa.md); outputs: one tile per pair and round after them, in
    # the bank a pass writes (c, a and b)
    P = len(pairs)
    for i, _ in enumerate(pairs):
        for bank in (0, 1, 2):
            vals = (rng.standard_normal(S * S) * 2.0 ** rng.integers(-6, 7)).astype(np.float32)
            _write_matrix(cmds, bank * D + i * S, vals.view(np.uint32), S, S, S)
    # widths below the top, every rounding mode
    low = [w for w in cfg.array.widths if w < top]
    for i, (layer, mode) in enumerate(pairs):
        cmds.append((HostOp.PREC, layer * 4 + mode,
                     _prec(low[i % len(low)], low[(i // 2) % len(low)], i % 3)))
    # thresholds, first rounds: slot k never written (k % 5 == 4), too high to raise
    # (k % 5 == 3: r <= 2**15), else 0 (raise whenever the statistic has a numerator)
    slots = [(layer, mode, op) for layer, mode in pairs for op in (0, 1)]
    for k, (layer, mode, op) in enumerate(slots):
        if k % 5 == 4:
            continue
        value = 0xFFFF_0000 if k % 5 == 3 else 0
        cmds.append((HostOp.THRESH, layer * 8 + mode * 2 + op, value))

    R = out_regions(cfg)

    def readback(rnd):
        """READs of the region round ``rnd`` is about to overwrite, if an earlier round
        wrote it (its results would not reach the final comparison otherwise)."""
        if rnd < R:
            return []
        first = (P + (rnd % R) * P) * S
        return [(HostOp.READ, bank * D + first + k, 0) for bank in (0, 1, 2)
                for k in range(P * S)]

    def matmuls(rnd):
        out = lambda bank, i: bank * D + (P + (rnd % R) * P + i) * S      # noqa: E731
        inp = lambda bank, i: bank * D + i * S                      # noqa: E731
        return [encode(Op.MATMUL, mode=mode, acc=0, layer=layer, loop=0, M=S, K=S, N=S,
                       **{name: (out if WRITES[mode] == name else inp)(bank, i)
                          for bank, name in enumerate("abc")})
                for i, (layer, mode) in enumerate(pairs)]

    halt = [encode(Op.HALT)]
    adapt = [encode(Op.ADAPT)]
    _run(cmds, matmuls(0) + halt)
    # every statistic register (2 words a slot), mode 3's included
    cmds += [(HostOp.REG, STAT_REG_BASE + k, 0) for k in range(2 * stat_slots(cfg))]
    _run(cmds, adapt + matmuls(1) + halt)
    # every slot may raise from now on
    cmds += [(HostOp.THRESH, layer * 8 + mode * 2 + op, 0) for layer, mode, op in slots]
    cmds += readback(2) + readback(3)
    _run(cmds, adapt + matmuls(2) + adapt + matmuls(3) + halt)
    # statistics below the top width for every slot that has one, then every width set to the
    # top by the host before the next ADAPT: each raise finds its width already at the top
    for i, (layer, mode) in enumerate(pairs):
        cmds.append((HostOp.PREC, layer * 4 + mode, _prec(low[0], low[0], i % 3)))
    cmds += readback(4)
    _run(cmds, matmuls(4) + halt)
    for i, (layer, mode) in enumerate(pairs):
        cmds.append((HostOp.PREC, layer * 4 + mode, _prec(top, top, i % 3)))
    cmds += readback(5)
    _run(cmds, adapt + matmuls(5) + halt)
    cmds += [(HostOp.REG, STAT_REG_BASE + k, 0) for k in range(2 * stat_slots(cfg))]
    return cmds


# ---- the vector unit on FP32 special values --------------------------------------------------
def _vector_commands(cfg, rng):
    S, D = cfg.size, cfg.bank_depth
    n = ROWS * COLS
    lines = ROWS * -(-COLS // S)
    cmds = []
    add_a, add_b = f32.random_pairs(rng, n, "add")
    mul_a, _ = f32.random_pairs(rng, n, "mul")
    base = {"add_a": 3 * D, "mul_a": 3 * D + lines, "add_b": 4 * D, "logits": 4 * D + lines}
    _write_matrix(cmds, base["add_a"], add_a, ROWS, COLS, S)
    _write_matrix(cmds, base["mul_a"], mul_a, ROWS, COLS, S)
    _write_matrix(cmds, base["add_b"], add_b, ROWS, COLS, S)
    # logits: ordinary values, wide ones (exp over- and underflow), and specials in a few rows
    logits = (rng.standard_normal(n) * 4).astype(np.float32).view(np.uint32)
    logits[COLS:2 * COLS] = (rng.standard_normal(COLS) * 200).astype(np.float32).view(np.uint32)
    logits[2 * COLS:3 * COLS] = f32.random_fp32(rng, COLS)
    logits[3 * COLS + 5] = 0x7F800000                   # one +Inf logit
    logits[4 * COLS + 7] = 0x7FC00000                   # one NaN logit
    logits[5 * COLS:6 * COLS] = 0xFF800000              # a row of -Inf
    _write_matrix(cmds, base["logits"], logits, ROWS, COLS, S)
    labels = [int(x) for x in rng.integers(0, COLS, ROWS)]
    labels[-1] = COLS + 3                                # a label past the classes
    for k in range(-(-ROWS // S)):
        cmds.append((HostOp.WRITE, 5 * D + k, _line_int(
            (labels[k * S:(k + 1) * S] + [0] * S)[:S])))
    out = iter(range(6 * D, 7 * D, lines))              # one output region per instruction
    small = iter(range(7 * D, 8 * D, -(-COLS // S)))    # vectors (one row) and losses

    prog = []
    for vop in Vop.ALL:
        for bcast in ((0, 1) if vop in Vop.READS_B else (0,)):
            a = base["mul_a"] if vop in (Vop.SCALE,) else base["add_a"]
            prog.append(encode(Op.VEC, vop=vop, bcast=bcast, loop=0, rows=ROWS, cols=COLS,
                               a=a, b=base["add_b"], d=next(out), imm=0x3FC00000))
    for imm in SCALE_IMMS:
        prog.append(encode(Op.VEC, vop=Vop.SCALE, bcast=0, loop=0, rows=ROWS, cols=COLS,
                           a=base["mul_a"], b=base["add_b"], d=next(out), imm=imm))
    for src in ("add_a", "add_b", "mul_a"):
        for acc in Acc.ALL:
            prog.append(encode(Op.REDUCE, rop=Rop.BIAS_GRAD, acc=acc, loop=0, rows=ROWS,
                               cols=COLS, a=base[src], d=next(small)))
        prog.append(encode(Op.REDUCE, rop=Rop.SUMSQ, acc=0, loop=0, rows=ROWS, cols=COLS,
                           a=base[src], d=next(small)))
    for src in ("logits", "add_a"):
        prog.append(encode(Op.SOFTMAX_XENT, loop=0, rows=ROWS, cols=COLS, a=base[src], b=5 * D,
                           d=next(out), e=next(small), imm=0x3E000000))    # imm = 1/8
    _run(cmds, prog + [encode(Op.HALT)])
    return cmds


# ---- what the stream reaches, on the golden model ----------------------------------------------
def intent(config: CoreConfig, seed: int = 0) -> dict:
    """Run :func:`directed_commands` on :class:`sim.tb.fuzz.HostModel` and report what it
    reached: ``statuses`` (START statuses and rejected host commands), ``pairs_run``
    (``(layer, mode)`` pairs with a statistic before the first ``ADAPT``), ``raised``
    (``(layer, mode, operand)`` slots some ``ADAPT`` raised), ``raise_at_top`` (slots whose
    statistic exceeded the threshold while the width was already at the top), ``kept``
    (slots some ``ADAPT`` left, with a statistic, under their threshold), ``final_widths``,
    and ``special_results`` (counts of NaN, infinite, subnormal and zero words the vector
    unit wrote)."""
    model = HostModel(config)
    core = model.core
    top = max(config.array.widths)
    out = {"statuses": {}, "pairs_run": set(), "raised": set(), "raise_at_top": set(),
           "kept": set()}
    first_adapt = True
    real_adapt = core.adapt

    def watched_adapt():
        nonlocal first_adapt
        states = core.stat_states()
        if first_adapt:
            out["pairs_run"] = {(l, m) for (l, m, _), st in states.items() if st.seen}
            first_adapt = False
        for slot, st in states.items():
            layer, mode, op = slot
            if adapt_raises(st, core.thresholds[slot]):
                if core.prec[(layer, mode)][op] < top:
                    out["raised"].add(slot)
                else:
                    out["raise_at_top"].add(slot)
            elif st.seen:
                out["kept"].add(slot)
        real_adapt()

    core.adapt = watched_adapt
    for op, addr, data in directed_commands(config, seed):
        status, _ = model.command(op, addr, data)
        key = ("START" if op == HostOp.START else "host", int(status))
        out["statuses"][key] = out["statuses"].get(key, 0) + 1
    out["final_widths"] = dict(core.prec)
    D = config.bank_depth
    words = np.asarray(core.mem[6 * D:8 * D], np.uint32).ravel()
    e, frac = (words >> 23) & 0xFF, words & 0x7FFFFF
    out["special_results"] = {"nan": int(np.sum((e == 255) & (frac != 0))),
                              "inf": int(np.sum((e == 255) & (frac == 0))),
                              "subnormal": int(np.sum((e == 0) & (frac != 0))),
                              "zero": int(np.sum((e == 0) & (frac == 0)))}
    return out

