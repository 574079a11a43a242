"""Fuzzing of the training core's host protocol with seeded random command streams and
malformed programs (docs/testing.md, "Fuzzing"), shared by both test tiers.

* :class:`HostModel` -- the expected response of every raw host command ``(op, addr, data)``
  (any op, address and data, not only what the driver sends), over the core's golden model
  :class:`sim.model.core.CoreModel`: ``BAD_ADDR`` / ``BAD_VALUE`` / ``BAD_OP`` for rejected
  commands (which change nothing), the program check's status for START, the line for READ, the
  register for REG (those the model knows).
* :func:`random_program` -- a short program: valid instructions with random operands in random
  banks, then (mostly) malformed by a mutation: a flipped bit, a random word, an unknown
  opcode, a missing ``HALT``, a broken loop structure, an out-of-range field.
* :func:`random_commands` -- a stream of raw commands: writes and reads in and out of range,
  programs loaded with ``PROG`` and run with ``START``, precision entries, optimizer registers,
  register reads and unknown opcodes.
* :func:`fuzz_core` -- runs a stream through a host transport (``transact(cmds, deadline)``, as
  :class:`sim.host.driver.CoreDriver` uses; every wait has a cycle deadline) in batches,
  compares every response with :class:`HostModel`, and finally reads back the whole scratchpad
  and compares it with the model's (lines after canonicalising NaNs: NaN payloads are free,
  docs/datapaths.md).

The two engines the core is built from are fuzzed alone too (tests/test_fuzz_engines.py):
:func:`matmul_engine_commands` / :func:`fuzz_matmul_engine` (raw commands of the matmul
engine against :class:`sim.model.array.MatmulEngineModel`) and :func:`optim_engine_commands` /
:class:`OptimFuzzModel` / :func:`fuzz_optim_engine` (raw commands of the optimizer engine
against :class:`sim.model.optim.OptimEngineModel` plus the engine's sticky ``error`` bit).

Randomness is :class:`random.Random` with a fixed seed (no ``hypothesis``): a failure is
reproduced by its seed, and the report names the command index.
"""
from __future__ import annotations

import random

import numpy as np

from hdl.core.config import CoreConfig
from hdl.core.core import REGS, STAT_REG_BASE, STATE_LAYOUT
from hdl.core.host import HostOp, HostStatus, host_data_bits
from hdl.core.isa import (INSTR_BITS, PREC_ENTRY, Acc, Op, Rop, Status, Vop, decode, encode,
                          stat_slots)
from hdl.bfp.stat import stat_layout
from hdl.optim.config import MODE_CLIP, MODE_DYNSCALE, Mem, Mode, Reg
from sim.host.driver import pack_cmd, unpack_rsp
from sim.model.core import CoreModel
from sim.model.fp32 import canon

__all__ = ["HostModel", "random_fp32_word", "random_program", "random_commands",
           "program_commands", "edge_commands", "clear_commands", "fuzz_core", "OP_BAD", "MUTATIONS", "matmul_engine_commands",
           "matmul_engine_expect", "fuzz_matmul_engine", "optim_engine_commands", "OptimFuzzModel",
           "fuzz_optim_engine"]

#: The first host opcode that is not a command (the 4-bit ``op`` field carries up to 15).
OP_BAD = max(HostOp.ALL) + 1
assert OP_BAD not in HostOp.ALL

#: Mutations :func:`random_program` applies (``None``: the program stays valid).
MUTATIONS = (None, "flip", "random_word", "bad_opcode", "no_halt", "endloop_alone",
             "nested_loop", "halt_in_loop", "long_loop", "loop_zero", "wide_softmax",
             "same_bank", "big_dim", "bad_field", "far_addr")


def _f32(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def _line_int(words) -> int:
    """A line of 32-bit words as one integer (word 0 in the low bits)."""
    return sum(int(w) << (32 * j) for j, w in enumerate(words))


def _canon_int(line: int, S: int) -> int:
    """A line (integer of ``S`` words) with every NaN word canonical
    (:func:`sim.model.fp32.canon`): NaN payloads are free (docs/datapaths.md)."""
    words = np.array([(line >> (32 * j)) & 0xFFFFFFFF for j in range(S)], np.uint32)
    return _line_int(canon(words))


class HostModel:
    """Expected responses of raw host commands (see the module docstring).

    ``command(op, addr, data)`` returns ``(status, data)`` with ``data`` ``None`` where the
    response data is not specified (``-`` in hdl/core/host.py) or not modelled (the timing
    counters), and updates the golden model as the core would."""

    def __init__(self, config: CoreConfig):
        self.config = config
        self.core = CoreModel(config)
        self.state = (Status.OK, 0)        # status and err_pc of the last START
        self.run_counts = {}               # the core's per-run counters the model knows
        self.last_run = None               # (status, err_pc) of the last START, None before

    def command(self, op: int, addr: int, data: int):
        cfg, core = self.config, self.core
        S = cfg.size
        if op == HostOp.WRITE:
            if addr >= cfg.lines:
                return HostStatus.BAD_ADDR, None
            core.mem[addr] = [(data >> (32 * j)) & 0xFFFFFFFF for j in range(S)]
            return HostStatus.OK, None
        if op == HostOp.READ:
            if addr >= cfg.lines:
                return HostStatus.BAD_ADDR, None
            return HostStatus.OK, _line_int(core.mem[addr])
        if op == HostOp.PROG:
            if addr >= cfg.prog_depth:
                return HostStatus.BAD_ADDR, None
            core.prog[addr] = data & ((1 << INSTR_BITS) - 1)
            return HostStatus.OK, None
        if op == HostOp.PREC:
            if addr >= cfg.layers * 4:
                return HostStatus.BAD_ADDR, None
            e = PREC_ENTRY.from_bits(data & ((1 << PREC_ENTRY.size) - 1))
            try:
                core.set_precision(addr // 4, addr % 4, e.width_a, e.width_b, e.rounding)
            except ValueError:
                return HostStatus.BAD_VALUE, None
            return HostStatus.OK, None
        if op == HostOp.SETREG:
            if addr not in Reg.ALL:
                return HostStatus.BAD_ADDR, None
            try:
                core.optim_setreg(addr, data & 0xFFFFFFFF)
            except ValueError:
                return HostStatus.BAD_VALUE, None
            return HostStatus.OK, None
        if op == HostOp.START:
            before = dict(core.counters)
            status, err_pc = core.run()
            self.state = (status, err_pc)
            d = {k: core.counters[k] - before[k] for k in core.counters}
            self.run_counts = {"instructions": d["instructions"], "array_beats": d["beats"],
                               "macs": d["macs"],
                               "flags": core.run_flags if status == Status.OK else 0}
            return status, err_pc
        if op == HostOp.THRESH:
            layer, mode, operand = addr // 8, (addr // 2) % 4, addr % 2
            if addr >= cfg.layers * 8 or mode == 3:
                return HostStatus.BAD_ADDR, None
            core.set_threshold(layer, mode, operand, data & 0xFFFFFFFF)
            return HostStatus.OK, None
        if op == HostOp.REG:
            if addr < len(REGS):
                return HostStatus.OK, self.register(REGS[addr][0])
            k = addr - STAT_REG_BASE
            if 0 <= k < 2 * stat_slots(cfg):
                return HostStatus.OK, self.stat_word(k // 2, k % 2)
            return HostStatus.BAD_ADDR, None
        return HostStatus.BAD_OP, None

    def stat_word(self, slot: int, word: int) -> int:
        """REG ``STAT_REG_BASE + 2 slot + word``: 64 bits of the slot's statistic (mode 3's
        slots stay zero)."""
        layer, mode, operand = slot // 8, (slot // 2) % 4, slot % 2
        if mode == 3:
            return 0
        st = self.core.stat_states()[(layer, mode, operand)]
        layout = stat_layout(self.config.array.bfp(0))
        bits = layout.const({"num": st.num, "den": st.den, "exp": st.exp,
                             "seen": int(st.seen)}).as_value().value
        return (bits >> (64 * word)) & ((1 << 64) - 1)

    def register(self, name: str):
        """The value of register ``name`` the model knows, else ``None``."""
        if name == "state":
            status, err_pc = self.state
            return STATE_LAYOUT.const({"status": status, "err_pc": err_pc, "running": 0,
                                       "conflict": 0}).as_value().value
        if name in self.run_counts:
            return self.run_counts[name]
        status = self.core.optim_status()
        if name.startswith("optim_") and name[len("optim_"):] in status:
            return status[name[len("optim_"):]]
        return None


# ---- programs ------------------------------------------------------------------------------
def _region(rng, cfg, bank, lines):
    """Base line of ``lines`` lines inside ``bank``."""
    return bank * cfg.bank_depth + rng.randrange(0, cfg.bank_depth - lines + 1)


def _valid_instruction(rng: random.Random, cfg: CoreConfig) -> int:
    """One instruction that passes the program check on its own: small shapes, each operand
    in its own bank."""
    S = cfg.size
    banks = rng.sample(range(cfg.banks), 4)
    cd = lambda n: -(-n // S)                                   # noqa: E731
    kind = rng.choice(("matmul", "vec", "reduce", "softmax", "opt", "fence"))
    if kind == "matmul":
        M, K, N = (rng.randint(1, 2 * S) for _ in range(3))
        return encode(Op.MATMUL, mode=rng.randrange(3), acc=rng.choice(Acc.ALL),
                      layer=rng.randrange(cfg.layers), loop=0, M=M, K=K, N=N,
                      a=_region(rng, cfg, banks[0], M * cd(K)),
                      b=_region(rng, cfg, banks[1], K * cd(N)),
                      c=_region(rng, cfg, banks[2], M * cd(N)))
    if kind == "vec":
        rows, cols = rng.randint(1, 4), rng.randint(1, 2 * S)
        n = rows * cd(cols)
        a = _region(rng, cfg, banks[0], n)
        d = a if rng.random() < 0.3 else _region(rng, cfg, banks[2], n)
        return encode(Op.VEC, vop=rng.choice(Vop.ALL), bcast=rng.randrange(2), loop=0,
                      rows=rows, cols=cols, a=a, b=_region(rng, cfg, banks[1], n), d=d,
                      imm=_f32(rng.uniform(-2, 2)))
    if kind == "reduce":
        rows, cols = rng.randint(1, 4), rng.randint(1, 2 * S)
        return encode(Op.REDUCE, rop=rng.choice(Rop.ALL), acc=rng.choice(Acc.ALL), loop=0,
                      rows=rows, cols=cols, a=_region(rng, cfg, banks[0], rows * cd(cols)),
                      d=_region(rng, cfg, banks[1], cd(cols)))
    if kind == "softmax":
        rows, cols = rng.randint(1, 4), rng.randint(2, min(cfg.max_classes, 2 * S))
        return encode(Op.SOFTMAX_XENT, loop=0, rows=rows, cols=cols,
                      a=_region(rng, cfg, banks[0], rows * cd(cols)),
                      b=_region(rng, cfg, banks[1], cd(rows)),
                      d=_region(rng, cfg, banks[2], rows * cd(cols)),
                      e=_region(rng, cfg, banks[3], cd(rows)), imm=_f32(1 / rows))
    if kind == "opt":
        one_pass = rng.randrange(2)
        count = S * rng.randint(1, 3) if one_pass else rng.randint(1, 3 * S)
        return encode(Op.OPT, count=count, one_pass=one_pass,
                      **{k: _region(rng, cfg, b, cd(count)) for k, b in zip("wmvg", banks)})
    return encode(Op.FENCE)


def _set(word: int, **fields) -> int:
    op, f = decode(word)
    f.update(fields)
    return encode(op, **f)


def random_program(rng: random.Random, cfg: CoreConfig, mutation="random") -> list[int]:
    """A program of at most ``cfg.prog_depth`` words: a few valid instructions (perhaps in a
    short counted loop), ``HALT``, then the ``mutation`` (one of :data:`MUTATIONS`, or
    ``"random"``: none in about 40 % of the programs). Loops are short (count <= 3) so that
    a run stays within a small cycle bound; a SOFTMAX_XENT's ``imm`` stays within a few
    octaves of 1 unless a mutation makes it invalid (its product with the loss scale must stay
    normal, docs/isa.md)."""
    if mutation == "random":            # about 40 % of the programs run
        mutation = None if rng.random() < 0.35 else rng.choice(MUTATIONS)
    n = rng.randint(1, min(5, cfg.prog_depth - 4))
    body = [_valid_instruction(rng, cfg) for _ in range(n)]
    if rng.random() < 0.3:
        i = rng.randrange(n + 1)
        body[i:i] = [encode(Op.LOOP, count=rng.randint(1, 3), stride=0)]
        body.insert(rng.randint(i + 1, len(body)), encode(Op.ENDLOOP))
    prog = body + [encode(Op.HALT)]
    k = rng.randrange(len(prog))
    if mutation == "flip":
        prog[k] ^= 1 << rng.randrange(INSTR_BITS)
    elif mutation == "random_word":
        prog[k] = rng.getrandbits(INSTR_BITS)
    elif mutation == "bad_opcode":
        prog[k] = (prog[k] & ~0xF) | rng.randint(max(Op.ALL) + 1, 15)
    elif mutation == "no_halt":         # the whole program memory without a HALT
        prog = [w for w in prog if decode(w)[0] not in (Op.HALT, Op.LOOP, Op.ENDLOOP)]
        prog += [encode(Op.FENCE)] * (cfg.prog_depth - len(prog))
    elif mutation == "endloop_alone":
        prog.insert(k, encode(Op.ENDLOOP))
    elif mutation == "nested_loop":
        prog[k:k] = [encode(Op.LOOP, count=2, stride=0)] * 2 + [encode(Op.ENDLOOP)] * 2
    elif mutation == "halt_in_loop":
        prog[k:k] = [encode(Op.LOOP, count=2, stride=0), encode(Op.HALT), encode(Op.ENDLOOP)]
    elif mutation == "long_loop":      # valid: hundreds of iterations, empty or a FENCE
        prog[k:k] = ([encode(Op.LOOP, count=rng.randint(100, 400), stride=rng.randrange(4))]
                     + [encode(Op.FENCE)] * rng.randrange(2) + [encode(Op.ENDLOOP)])
    elif mutation == "loop_zero":
        prog[k:k] = [encode(Op.LOOP, count=0, stride=1), encode(Op.ENDLOOP)]
    elif mutation == "wide_softmax":   # a row longer than max_classes, inside the scratchpad
        prog[k:k] = [encode(Op.SOFTMAX_XENT, loop=0, rows=1, cols=cfg.max_classes + 1, a=0,
                            b=cfg.bank_depth, d=2 * cfg.bank_depth, e=3 * cfg.bank_depth,
                            imm=_f32(1.0))]
    elif mutation == "same_bank":      # two read operands of one pass in one bank
        prog[k:k] = [encode(Op.MATMUL, mode=0, acc=0, layer=0, loop=0, M=1, K=1, N=1, a=0, b=1,
                            c=cfg.bank_depth)]
    elif mutation == "big_dim":
        op, f = decode(prog[k])
        dims = [d for d in ("M", "K", "N", "rows", "cols", "count") if d in f]
        if dims:
            prog[k] = _set(prog[k], **{rng.choice(dims): rng.choice((0, (1 << 12) - 1))})
    elif mutation == "bad_field":
        op, f = decode(prog[k])
        for name, bad in (("mode", 3), ("acc", 3), ("layer", cfg.layers), ("vop", 7)):
            if name in f:
                prog[k] = _set(prog[k], **{name: bad})
                break
    elif mutation == "far_addr":
        op, f = decode(prog[k])
        addrs = [a for a in ("a", "b", "c", "d", "e", "w", "m", "v", "g") if a in f]
        if addrs:
            prog[k] = _set(prog[k], **{rng.choice(addrs): rng.choice(
                (cfg.lines - 1, cfg.lines, (1 << 16) - 1))})
    prog = prog[:cfg.prog_depth]
    for i, w in enumerate(prog):       # keep a valid softmax scale within a few octaves
        op, f = decode(w)
        if op == Op.SOFTMAX_XENT and 1 <= (f["imm"] >> 23) & 0xFF <= 254 \
                and abs(((f["imm"] >> 23) & 0xFF) - 127) > 8:
            prog[i] = _set(w, imm=_f32(0.5))
    return prog


# ---- command streams -----------------------------------------------------------------------
def _addr(rng: random.Random, limit: int) -> int:
    """An address: mostly inside ``0 .. limit - 1``, sometimes just outside or far out."""
    r = rng.random()
    if r < 0.75:
        return rng.randrange(limit)
    return rng.choice((limit, limit + 1, (1 << 16) - 1, rng.randrange(limit, 1 << 16)))


def random_fp32_word(rng: random.Random) -> int:
    """An FP32 word: mostly small numbers, sometimes a special value or random bits."""
    r = rng.random()
    if r < 0.7:
        return _f32(rng.uniform(-4, 4))
    return rng.choice((0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001,
                       0x7F7FFFFF, rng.getrandbits(32)))


def _setreg(rng: random.Random) -> tuple[int, int]:
    reg = _addr(rng, len(Reg.ALL))
    if reg == Reg.MODE:
        val = rng.randrange(4) | rng.choice((0, MODE_CLIP, MODE_DYNSCALE))
    elif reg == Reg.N:
        val = rng.choice((0, 1, rng.randrange(1, 64), 65536, 65537, rng.getrandbits(32)))
    elif reg == Reg.SCALE_EXP:
        val = rng.randrange(0, 16)      # keeps SOFTMAX_XENT's imm * 2**k normal
    elif reg == Reg.GROWTH:
        val = rng.randrange(1, 4)
    elif reg in Reg.FP32:
        val = _f32(rng.uniform(0, 1))
    else:
        val = rng.getrandbits(32)
    return reg, val


def random_commands(rng: random.Random, cfg: CoreConfig, n: int) -> list[tuple[int, int, int]]:
    """About ``n`` raw commands ``(op, addr, data)`` (see the module docstring); a program's
    PROG words are followed by its START."""
    S, db = cfg.size, host_data_bits(cfg)
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.25:
            line = _addr(rng, cfg.lines)
            words = [random_fp32_word(rng) for _ in range(S)]
            data = _line_int(words)
            if rng.random() < 0.1:
                data |= rng.getrandbits(db) & ~((1 << 32 * S) - 1)   # bits beyond the line
            out.append((HostOp.WRITE, line, data))
        elif r < 0.4:
            out.append((HostOp.READ, _addr(rng, cfg.lines), rng.getrandbits(db)))
        elif r < 0.6:
            prog = random_program(rng, cfg)
            out += [(HostOp.PROG, pc, w) for pc, w in enumerate(prog)]
            if rng.random() < 0.2:
                out.append((HostOp.PROG, _addr(rng, cfg.prog_depth), rng.getrandbits(db)))
            out.append((HostOp.START, rng.getrandbits(16), rng.getrandbits(db)))
        elif r < 0.7:
            entry = {"width_a": rng.randrange(16), "width_b": rng.randrange(16),
                     "rounding": rng.randrange(4)}
            if rng.random() < 0.5:
                entry = {"width_a": rng.choice(cfg.array.widths),
                         "width_b": rng.choice(cfg.array.widths), "rounding": rng.randrange(3)}
            data = PREC_ENTRY.const(entry).as_value().value
            out.append((HostOp.PREC, _addr(rng, cfg.layers * 4), data))
        elif r < 0.82:
            out.append((HostOp.SETREG, *_setreg(rng)))
        elif r < 0.9:
            out.append((HostOp.REG, _addr(rng, len(REGS)), rng.getrandbits(db)))
        elif r < 0.93:
            out.append((HostOp.REG, STAT_REG_BASE + _addr(rng, 2 * stat_slots(cfg)),
                        rng.getrandbits(db)))
        elif r < 0.96:
            out.append((HostOp.THRESH, _addr(rng, cfg.layers * 8), rng.getrandbits(db)))
        else:
            out.append((rng.randint(OP_BAD, 15), rng.getrandbits(16), rng.getrandbits(db)))
    return out


# ---- running a stream ------------------------------------------------------------------------
def clear_commands(cfg: CoreConfig) -> list[tuple[int, int, int]]:
    """Commands zeroing the scratchpad and the program memory, which a reset does not do (a
    fresh :class:`HostModel` assumes both zero); checked like any command."""
    return ([(HostOp.WRITE, line, 0) for line in range(cfg.lines)]
            + [(HostOp.PROG, pc, 0) for pc in range(cfg.prog_depth)])


def edge_commands(cfg: CoreConfig) -> list[tuple[int, int, int]]:
    """Named edge cases of the host commands, each next to the boundary it tests: the last
    and the first invalid line, program word, precision entry (and mode 3, an odd width, a
    too wide one, rounding 3), register and optimizer register; the refused optimizer values
    (update rule 3, ``N`` = 0 and one past the range); the first and last statistic register
    and one past each end of that range; the last valid ADAPT threshold slot, one of mode 3 and
    the first past the table; the first and the last unknown opcode."""
    W = max(cfg.array.widths)
    prec = lambda wa, wb, r: PREC_ENTRY.const(                  # noqa: E731
        {"width_a": wa, "width_b": wb, "rounding": r}).as_value().value
    return [
        (HostOp.WRITE, cfg.lines - 1, 1), (HostOp.WRITE, cfg.lines, 2),
        (HostOp.WRITE, (1 << 16) - 1, 3), (HostOp.READ, cfg.lines - 1, 0),
        (HostOp.READ, cfg.lines, 0), (HostOp.PROG, cfg.prog_depth, 0),
        (HostOp.PREC, cfg.layers * 4 - 2, prec(W, W, 2)),
        (HostOp.PREC, cfg.layers * 4, prec(W, W, 0)),
        (HostOp.PREC, 3, prec(W, W, 0)), (HostOp.PREC, 0, prec(3, W, 0)),
        (HostOp.PREC, 0, prec(W, W + 2, 0)), (HostOp.PREC, 0, prec(W, W, 3)),
        (HostOp.PREC, 0, prec(0, W, 0)),
        (HostOp.SETREG, max(Reg.ALL), 0), (HostOp.SETREG, max(Reg.ALL) + 1, 0),
        (HostOp.SETREG, Reg.MODE, 3), (HostOp.SETREG, Reg.MODE, Mode.ADAM | MODE_CLIP),
        (HostOp.SETREG, Reg.N, 0), (HostOp.SETREG, Reg.N, 65537), (HostOp.SETREG, Reg.N, 65536),
        (HostOp.REG, len(REGS) - 1, 0), (HostOp.REG, len(REGS), 0),
        (HostOp.REG, STAT_REG_BASE - 1, 0), (HostOp.REG, STAT_REG_BASE, 0),
        (HostOp.REG, STAT_REG_BASE + 2 * stat_slots(cfg) - 1, 0),
        (HostOp.REG, STAT_REG_BASE + 2 * stat_slots(cfg), 0),
        (HostOp.THRESH, cfg.layers * 8 - 3, 1), (HostOp.THRESH, cfg.layers * 8 - 1, 2),
        (HostOp.THRESH, cfg.layers * 8, 3),
        (OP_BAD, 0, 0), (OP_BAD, (1 << 16) - 1, (1 << 128) - 1), (15, 0, 0),
    ]


def program_commands(rng: random.Random, cfg: CoreConfig, mutations=MUTATIONS):
    """For each of ``mutations``: a program so malformed (:func:`random_program`), its PROG
    words and a START (named edge cases)."""
    out = []
    for mut in mutations:
        out += [(HostOp.PROG, pc, w) for pc, w in enumerate(random_program(rng, cfg, mut))]
        out.append((HostOp.START, 0, 0))
    return out


async def fuzz_core(config: CoreConfig, transport, *, seed: int, n: int = 0, cmds=None,
                    pre=(), run_deadline: int = 50_000) -> dict:
    """Send ``n`` random raw commands (seed ``seed``), then the list ``cmds``, through
    ``transport`` (after the commands ``pre``, e.g. clearing memories), each batch up to a
    START with a cycle deadline (``run_deadline`` for a START, 8 cycles a command otherwise),
    compare every response with :class:`HostModel`, then read back the whole scratchpad and
    compare it with the model's. Raises ``AssertionError`` naming the seed and the command
    (``TimeoutError`` from the transport on a hang). Returns counts by response kind."""
    rng = random.Random(seed)
    model = HostModel(config)
    cmds = list(pre) + random_commands(rng, config, n) + list(cmds or ())
    stats = {"commands": len(cmds), "runs_ok": 0, "runs_rejected": 0, "rejected": 0,
             "statuses": {}, "sent": 0}
    batch = []

    async def flush(deadline):
        payloads = [pack_cmd(config, op, addr, data) for op, addr, data in batch]
        rsps = await transport.transact(payloads, deadline)
        assert len(rsps) == len(batch), f"seed {seed}: {len(batch)} commands, {len(rsps)} responses"
        for (op, addr, data), rsp in zip(batch, rsps):
            idx = stats["sent"]
            stats["sent"] += 1
            want_status, want_data = model.command(op, addr, data)
            got_op, got_status, got_data = unpack_rsp(config, rsp)
            what = (f"seed {seed}, command {idx}: op {op} addr {addr:#x} data {data:#x}")
            assert got_op == op, f"{what}: response op {got_op}"
            assert got_status == want_status, f"{what}: status {got_status}, expected {want_status}"
            if op == HostOp.START:
                got_data &= 0xFFFF
            if op == HostOp.READ and want_data is not None:
                # NaN payloads are free (docs/datapaths.md): lines compare after canonicalising
                got_data, want_data = (_canon_int(got_data, config.size),
                                        _canon_int(want_data, config.size))
            if want_data is not None:
                assert got_data == want_data, f"{what}: data {got_data:#x}, expected {want_data:#x}"
            key = ("START" if op == HostOp.START else "host", got_status)
            stats["statuses"][key] = stats["statuses"].get(key, 0) + 1
            if op == HostOp.START:
                stats["runs_ok" if got_status == Status.OK else "runs_rejected"] += 1
            elif got_status != HostStatus.OK:
                stats["rejected"] += 1
        batch.clear()

    for cmd in cmds:
        batch.append(cmd)
        if cmd[0] == HostOp.START:
            await flush(run_deadline + 8 * len(batch))
    if batch:
        await flush(8 * len(batch) + 100)
    # every line of the scratchpad equals the model's (nothing outside an addressed region
    # changed), and the optimizer state and registers too
    batch.extend((HostOp.READ, line, 0) for line in range(config.lines))
    batch.extend((HostOp.REG, i, 0) for i in range(len(REGS)))
    await flush(8 * len(batch) + 100)
    stats["mem"] = model.core.mem.copy()
    return stats


# ---- the matmul engine (hdl/array/engine.py) -----------------------------------------------
def _field_max(layout, name: int) -> int:
    return (1 << layout[name].width) - 1


def matmul_engine_commands(rng: random.Random, cfg, n: int) -> list[dict]:
    """``n`` raw commands (field dicts of :func:`hdl.array.engine.cmd_layout`) for the matmul
    engine: ``WRITE``/``READ`` with any ``mem`` (3 is none) and addresses in and out of range,
    ``STATUS``, and ``START`` with every field either valid or random over its whole width
    (mode 3, zero or too large dimensions, odd or too wide widths, rounding 3, ranges past the
    scratchpad)."""
    from hdl.array.engine import OP_READ, OP_START, OP_STATUS, OP_WRITE, cmd_layout
    lay = cmd_layout(cfg)
    S, depth = cfg.size, cfg.mem_depth
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            out.append({"op": OP_WRITE, "mem": rng.choice((0, 1, 2, 0, 1, 2, 3)),
                        "addr": _addr(rng, depth) & _field_max(lay, "addr"),
                        "data": _line_int(random_fp32_word(rng) for _ in range(S))})
        elif r < 0.5:
            out.append({"op": OP_READ, "mem": rng.choice((0, 1, 2, 0, 1, 2, 3)),
                        "addr": _addr(rng, depth) & _field_max(lay, "addr")})
        elif r < 0.55:
            out.append({"op": OP_STATUS})
        else:
            f = {"op": OP_START, "mode": rng.randrange(3), "accumulate": rng.randrange(2),
                 "rounding": rng.randrange(3),
                 "width_a": rng.choice(cfg.widths), "width_b": rng.choice(cfg.widths)}
            for d in "MKN":
                f[d] = rng.randint(1, 2 * S)
            cd = lambda k: -(-k // S)                               # noqa: E731
            need = {"base_a": f["M"] * cd(f["K"]), "base_b": f["K"] * cd(f["N"]),
                    "base_c": f["M"] * cd(f["N"])}
            for b, lines in need.items():
                f[b] = rng.randrange(0, max(depth - lines, 0) + 1)
            if rng.random() < 0.5:              # one field invalid, or anything it holds
                name = rng.choice(("mode", "M", "K", "N", "width_a", "width_b", "rounding",
                                   "base_a", "base_b", "base_c"))
                bad = {"mode": 3, "M": 0, "K": 0, "N": 0, "rounding": 3,
                       "width_a": rng.choice((0, 1, 3, cfg.max_mantissa + 2)),
                       "base_a": depth, "base_b": depth - 1,
                       "base_c": _field_max(lay, "base_c")}
                bad["width_b"] = bad["width_a"]
                f[name] = (bad[name] if rng.random() < 0.7
                           else rng.randint(0, _field_max(lay, name)))
            out.append(f)
    return out


def matmul_engine_expect(model, cfg, cmd: dict):
    """``(status, data or None, (invalid, overflow) or None)`` of one raw command on a
    :class:`sim.model.array.MatmulEngineModel` (which it updates): a WRITE/READ with a bad
    ``mem`` or ``addr`` answers ``ERR_ADDR`` and writes nothing; START as the model."""
    from hdl.array.engine import OP_READ, OP_START, OP_WRITE
    from sim.model import array as G
    op, S = cmd["op"], cfg.size
    if op in (OP_WRITE, OP_READ):
        if cmd["mem"] > 2 or cmd["addr"] >= cfg.mem_depth:
            return G.ERR_ADDR, None, None
        mem = model.MEMS[cmd["mem"]]
        if op == OP_WRITE:
            model.mem[mem][cmd["addr"]] = [(cmd["data"] >> (32 * j)) & 0xFFFFFFFF
                                           for j in range(S)]
            return G.OK, None, None
        return G.OK, _line_int(model.mem[mem][cmd["addr"]]), None
    if op == OP_START:
        c = G.MatmulCommand(**{k: cmd[k] for k in ("mode", "M", "K", "N", "width_a", "width_b",
                                                   "rounding", "base_a", "base_b", "base_c")},
                            accumulate=bool(cmd["accumulate"]))
        status, res = model.run(c)
        return status, None, ((int(res.invalid), int(res.overflow)) if res else None)
    return G.OK, None, None


async def fuzz_matmul_engine(cfg, transport, *, seed: int, n: int, deadline: int = 200_000):
    """``n`` random raw commands (:func:`matmul_engine_commands`) through ``transport`` (back
    to back: the engine may hold one pending command), each response compared with the golden
    model (status, READ data, a pass's converter flags); then every line of A, B and C read back
    and compared (NaNs canonicalised). Returns counts of statuses."""
    from hdl.array.engine import OP_READ, OP_START, cmd_layout, rsp_layout
    from sim.model.array import MatmulEngineModel
    from sim.tb.payload import pack, unpack
    rng = random.Random(seed)
    model = MatmulEngineModel(cfg)
    cmds = matmul_engine_commands(rng, cfg, n)
    cmds += [{"op": OP_READ, "mem": k, "addr": a} for k in range(3)
             for a in range(cfg.mem_depth)]
    rsps = await transport.transact([pack(cmd_layout(cfg), c) for c in cmds], deadline)
    assert len(rsps) == len(cmds), f"seed {seed}: {len(cmds)} commands, {len(rsps)} responses"
    stats = {}
    for i, (cmd, word) in enumerate(zip(cmds, rsps)):
        r = unpack(rsp_layout(cfg), word)
        status, data, flags = matmul_engine_expect(model, cfg, cmd)
        what = f"seed {seed}, command {i}: {cmd}"
        assert r["op"] == cmd["op"], f"{what}: response op {r['op']}"
        assert r["status"] == status, f"{what}: status {r['status']}, expected {status}"
        if data is not None:
            assert _canon_int(r["data"], cfg.size) == _canon_int(data, cfg.size), \
                f"{what}: data {r['data']:#x}, expected {data:#x}"
        if flags is not None:
            assert (r["invalid"], r["overflow"]) == flags, f"{what}: flags"
        key = (cmd["op"], status)
        stats[key] = stats.get(key, 0) + 1
    return stats


# ---- the optimizer engine (hdl/optim/engine.py) ----------------------------------------------
def optim_engine_commands(rng: random.Random, cfg, n: int) -> list[dict]:
    """``n`` raw commands (field dicts of :func:`hdl.optim.engine.cmd_layout`) for the optimizer
    engine: every opcode including the two unknown ones, registers in and out of range with
    valid and refused values, WRITE / READ / ACCUM ranges in and out of the memories (count 0
    too), STEP and STEP1 (before N is set, too)."""
    from hdl.optim.config import Op as OOp
    from hdl.optim.engine import cmd_layout
    lay = cmd_layout()
    depth = cfg.depth
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            reg, val = _setreg(rng)
            if reg == Reg.N:
                val = rng.choice((0, 1, depth, depth + 1, rng.randint(1, depth)))
            elif reg == Reg.GROWTH:
                val = rng.randrange(0, 4)
            out.append({"op": OOp.SETREG, "addr": reg if rng.random() < 0.9
                        else rng.randint(len(Reg.ALL), _field_max(lay, "addr")), "data": val})
        elif r < 0.75:
            op = rng.choice((OOp.WRITE, OOp.READ, OOp.ACCUM))
            count = rng.choice((rng.randint(1, 4), rng.randint(1, depth), 0))
            addr = rng.choice((rng.randint(0, depth - 1), rng.randint(0, depth + 2)))
            out.append({"op": op, "mem": rng.randrange(4), "first": rng.randrange(2),
                        "addr": addr, "count": count})
        elif r < 0.93:
            out.append({"op": rng.choice((OOp.STEP, OOp.STEP1))})
        else:
            out.append({"op": rng.choice((6, 7)), "addr": rng.getrandbits(16)})
    return out


class OptimFuzzModel:
    """:class:`sim.model.optim.OptimEngineModel` plus the engine's sticky ``error`` bit and its
    refusals: a command with an out-of-range register, address range, count or ``N``, an
    update rule 3 or an unknown opcode sets ``error`` and changes nothing (docs/datapaths.md)."""

    def __init__(self, cfg):
        from sim.model.optim import OptimEngineModel
        self.cfg, self.model, self.error = cfg, OptimEngineModel(cfg), 0

    def valid(self, cmd: dict) -> bool:
        from hdl.optim.config import Op as OOp
        op, depth = cmd["op"], self.cfg.depth
        if op == OOp.SETREG:
            a, v = cmd.get("addr", 0), cmd.get("data", 0)
            return (a in Reg.ALL and not (a == Reg.MODE and v & 3 == 3)
                    and not (a == Reg.N and not 1 <= v <= depth))
        if op in (OOp.WRITE, OOp.READ, OOp.ACCUM):
            return cmd["count"] >= 1 and cmd["addr"] + cmd["count"] <= depth
        if op in (OOp.STEP, OOp.STEP1):
            return self.model.regs[Reg.N] != 0
        return False

    def apply(self, cmd: dict, words=None):
        """Apply a command (``words``: the uint32 data of WRITE / ACCUM); returns the READ
        words (uint32), else ``None``."""
        from hdl.optim.config import Op as OOp
        if not self.valid(cmd):
            self.error = 1
            return None
        op, md = cmd["op"], self.model
        if op == OOp.SETREG:
            md.setreg(cmd["addr"], cmd["data"])
        elif op == OOp.WRITE:
            sl = slice(cmd["addr"], cmd["addr"] + cmd["count"])
            md.mems[cmd["mem"]][sl] = np.asarray(words, np.uint32).view(np.float32)
        elif op == OOp.ACCUM:
            md.accum(cmd["addr"], np.asarray(words, np.uint32).view(np.float32), cmd["first"])
        elif op == OOp.READ:
            return md.read(cmd["mem"], cmd["addr"], cmd["count"]).view(np.uint32)
        else:
            md.step(one_pass=op == OOp.STEP1)
        return None

    def status(self) -> dict:
        return dict(self.model.status(), error=self.error)


async def fuzz_optim_engine(cfg, port, *, seed: int, n: int) -> dict:
    """``n`` random raw commands (:func:`optim_engine_commands`, seed ``seed``) to an optimizer
    engine behind ``port``, then READs of all of W, M, V, G. ``port`` moves the data, each wait
    with a deadline (raising ``TimeoutError``): ``async send(payload)`` (a command),
    ``async send_words(words)`` (WRITE / ACCUM data), ``async get_words(count)`` (READ data),
    ``async wait_idle()``, ``status()`` (the ``status`` port as a dict). After every command
    the whole status (``error`` included) must equal :class:`OptimFuzzModel`'s. Returns counts
    of refused commands, steps and reads."""
    from hdl.optim.config import Op as OOp
    from hdl.optim.engine import cmd_layout
    from sim.tb.payload import pack
    rng = random.Random(seed)
    model = OptimFuzzModel(cfg)
    cmds = optim_engine_commands(rng, cfg, n)
    cmds += [{"op": OOp.READ, "mem": m, "addr": 0, "count": cfg.depth} for m in Mem.ALL]
    seen = {"refused": 0, "steps": 0, "reads": 0}
    for i, cmd in enumerate(cmds):
        what = f"seed {seed}, command {i}: {cmd}"
        valid = model.valid(cmd)
        words = None
        if valid and cmd["op"] in (OOp.WRITE, OOp.ACCUM):
            words = [random_fp32_word(rng) for _ in range(cmd["count"])]
        want = model.apply(cmd, words)
        await port.send(pack(cmd_layout(), cmd))
        if words:
            await port.send_words(words)
        if want is not None:
            got = np.array(await port.get_words(len(want)), np.uint32)
            bad = np.nonzero(canon(got) != canon(want))[0]
            assert not len(bad), (f"{what}: word {bad[0]} is {int(got[bad[0]]):#010x}, "
                                  f"expected {int(want[bad[0]]):#010x}")
            seen["reads"] += 1
        await port.wait_idle()
        got_status = port.status()
        for name, v in model.status().items():
            assert got_status[name] == v, \
                f"{what}: status.{name} {got_status[name]:#x}, expected {v:#x}"
        seen["refused"] += not valid
        seen["steps"] += valid and cmd["op"] in (OOp.STEP, OOp.STEP1)
    return seen
