"""The training core's instruction set: encoding layouts, field checks, assembler and
disassembler (docs/isa.md is generated from this module).

One instruction is a 128-bit :data:`INSTR` word: a 4-bit ``op`` and an ``args`` union with one
:class:`~amaranth.lib.data.StructLayout` per opcode. The hardware decodes with these layouts
and software packs and unpacks with the same ones (``INSTR.const(...)``, ``INSTR.from_bits``).

Addresses are **global line addresses** (a line is ``S`` FP32 words; line ``bank *
bank_depth + offset``). A matrix of ``rows x cols`` occupies ``rows * ceil(cols / S)``
consecutive lines, each row padded to whole lines; padding lanes are never written. A vector
of ``n`` words (labels, per-row losses, bias) occupies ``ceil(n / S)`` lines, word ``i`` in
line ``i // S``, lane ``i % S``.

Hazards (docs/core.md): an instruction owns every bank its operand ranges touch from issue to
completion; the sequencer issues it only when none of those banks is owned by a running
instruction, so instructions behave as if executed one after another in program order.

This module is pure Python (plus the layouts); the golden model, the compiler and the
hardware all use :func:`operand_ranges` and :func:`check_instruction` semantics.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = [
    "Op", "Vop", "Rop", "Acc", "Status", "OP_NAMES", "MODE_NAMES", "VOP_NAMES", "ROP_NAMES",
    "ADDR_BITS", "DIM_BITS", "INSTR_BITS", "ARG_LAYOUTS", "INSTR", "PREC_ENTRY",
    "LOOP_FIELDS", "encode", "decode", "disassemble", "assemble", "assemble_program",
    "disassemble_program", "Range", "operand_ranges", "check_instruction", "check_program",
    "ProgramError", "STATUS_NAMES", "check_program_for", "ARGS", "VECTOR_CMD", "arg_name",
    "THRESH_FRAC_BITS", "THRESH_NEVER", "stat_slot", "stat_slots", "check_allreduce",
    "ALLREDUCE_MAX_WORDS", "check_sendrecv", "sendrecv_span",
]

ADDR_BITS = 16      #: a line address field
OPT_MAX_COUNT = 1 << 16   #: largest OPT region (the optimizer engine's N range)
DIM_BITS = 12       #: a rows / cols / M / K / N field
INSTR_BITS = 128


#: Thresholds of ADAPT are unsigned Q16.16: ``r > t / 2**16`` <=> ``num * 2**16 > t * den``.
THRESH_FRAC_BITS = 16
#: Reset value of every threshold (``r`` never exceeds it in practice: ADAPT changes nothing).
THRESH_NEVER = 0xFFFF_FFFF


def stat_slot(layer: int, mode: int, operand: int) -> int:
    """Index of a statistic / threshold: ``(layer * 4 + mode) * 2 + operand`` (the precision
    entry's address times 2 plus the operand: 0 = ``width_a``'s, 1 = ``width_b``'s)."""
    return (layer * 4 + mode) * 2 + operand


def stat_slots(config) -> int:
    """Number of slot indices of a :class:`hdl.core.config.CoreConfig` (mode 3 is unused:
    its slots stay zero)."""
    return config.layers * 8


class Op:
    """Opcodes (``INSTR.op``)."""
    HALT = 0          #: wait until every unit is idle, then stop (``done``)
    MATMUL = 1        #: one matmul-engine pass (FWD / BWD_DATA / BWD_WEIGHT)
    VEC = 2           #: elementwise FP32 op over a matrix (vector unit)
    REDUCE = 3        #: bias gradient (column sums) or sum of squares (vector unit)
    SOFTMAX_XENT = 4  #: softmax + cross-entropy: per-row loss and the logits' gradient
    OPT = 5           #: one optimizer step over a parameter region and its state (one_pass: a
                      #: single pass, skip decided by the run's flags; clipping: two passes)
    LOOP = 6          #: begin a counted loop (one level)
    ENDLOOP = 7       #: end of the loop body: next iteration or fall through
    FENCE = 8         #: wait until every unit is idle
    ADAPT = 9         #: FAST: raise the widths whose statistic exceeds its threshold, clear
                      #: the statistics (docs/fast.md)
    ALLREDUCE = 10    #: ring all-reduce of a line range with the other cores' (collective
                      #: engine, docs/multicore.md); only on a core with ``ranks >= 2``
    SENDRECV = 11     #: send a line range to the next core of the ring and receive one from the
                      #: previous core (pipeline stages); only on a core with ``ranks >= 2``
    ALL = (HALT, MATMUL, VEC, REDUCE, SOFTMAX_XENT, OPT, LOOP, ENDLOOP, FENCE, ADAPT,
           ALLREDUCE, SENDRECV)
    #: opcodes that run on the collective engine
    COLLECTIVE = (ALLREDUCE, SENDRECV)


OP_NAMES = {Op.HALT: "HALT", Op.MATMUL: "MATMUL", Op.VEC: "VEC", Op.REDUCE: "REDUCE",
            Op.SOFTMAX_XENT: "SOFTMAX_XENT", Op.OPT: "OPT", Op.LOOP: "LOOP",
            Op.ENDLOOP: "ENDLOOP", Op.FENCE: "FENCE", Op.ADAPT: "ADAPT",
            Op.ALLREDUCE: "ALLREDUCE", Op.SENDRECV: "SENDRECV"}
MODE_NAMES = {0: "FWD", 1: "BWD_DATA", 2: "BWD_WEIGHT"}   # hdl.array.config FWD, BWD_*


class Vop:
    """``VEC`` operations. ``b`` is a matrix like ``a``, or one row broadcast over the rows
    when ``bcast`` (bias add). ``relu(x) = x if x > 0 or x is NaN else +0``."""
    ADD = 0        #: d = a + b
    RELU = 1       #: d = relu(a)
    RELU_GRAD = 2  #: d = a if b > 0 else +0   (a = dY, b = stored forward output)
    SCALE = 3      #: d = a * imm
    ADD_RELU = 4   #: d = relu(a + b)
    COPY = 5       #: d = a (bit copy)
    ZERO = 6       #: d = +0
    ALL = (ADD, RELU, RELU_GRAD, SCALE, ADD_RELU, COPY, ZERO)
    READS_A = (ADD, RELU, RELU_GRAD, SCALE, ADD_RELU, COPY)
    READS_B = (ADD, RELU_GRAD, ADD_RELU)


VOP_NAMES = {Vop.ADD: "ADD", Vop.RELU: "RELU", Vop.RELU_GRAD: "RELU_GRAD", Vop.SCALE: "SCALE",
             Vop.ADD_RELU: "ADD_RELU", Vop.COPY: "COPY", Vop.ZERO: "ZERO"}


class Rop:
    """``REDUCE`` operations."""
    BIAS_GRAD = 0  #: d[c] = ((+0 + a[0,c]) + a[1,c]) + ... (rows in order); with acc: + d[c]
    SUMSQ = 1      #: d[0] = lane_sum(a*a) over the rows x cols elements in row-major order
    ALL = (BIAS_GRAD, SUMSQ)


ROP_NAMES = {Rop.BIAS_GRAD: "BIAS_GRAD", Rop.SUMSQ: "SUMSQ"}


class Acc:
    """Accumulate field of ``MATMUL`` and ``REDUCE``."""
    OFF = 0          #: overwrite the output
    ON = 1           #: add into the output
    AFTER_FIRST = 2  #: overwrite in loop iteration 0, add in later ones (micro-batches)
    ALL = (OFF, ON, AFTER_FIRST)


class Status:
    """Program status (the ``START`` response and the ``status`` register). A program that
    fails the check runs nothing; ``err_pc`` names the first bad instruction."""
    OK = 0
    ERR_OPCODE = 1   #: unknown opcode
    ERR_FIELD = 2    #: a sub-op, mode, accumulate or layer field out of range, a
                     #: SOFTMAX_XENT ``imm`` that is not a normal FP32 number, or a one-pass
                     #: OPT whose ``count`` is not a whole number of lines (a multiple of S),
                     #: or REDUCE SUMSQ on a core built without it (``vector_sumsq``)
    ERR_SHAPE = 3    #: a zero or too large dimension (softmax row > max_classes, OPT count
                     #: > 65536), or a zero loop count / count
    ERR_ADDR = 4     #: an operand range outside the scratchpad, or a read range that
                     #: overlaps a written range other than exactly (in place)
    ERR_BANK = 5     #: two ports of one instruction need the same bank port
    ERR_LOOP = 6     #: nested LOOP, ENDLOOP outside a loop, or HALT inside a loop
    ERR_NO_HALT = 7  #: the program runs off the end of the program memory
    #: an ``ALLREDUCE`` or ``SENDRECV`` ended in the collective engine's ``TIMEOUT`` (no link
    #: beat for ``timeout`` cycles): the run stops once the other units are idle; the region is
    #: left partly reduced / received (the only run-time error; ``err_pc`` is that instruction)
    ERR_LINK = 8
    ALL = tuple(range(9))


STATUS_NAMES = {v: k for k, v in vars(Status).items() if k.isupper() and k != "ALL"}

MATMUL_ARGS = data.StructLayout({
    "mode": 2, "acc": 2, "layer": 4, "loop": 3,
    "M": DIM_BITS, "K": DIM_BITS, "N": DIM_BITS,
    "a": ADDR_BITS, "b": ADDR_BITS, "c": ADDR_BITS,
})
VEC_ARGS = data.StructLayout({
    "vop": 3, "bcast": 1, "loop": 3, "rows": DIM_BITS, "cols": DIM_BITS,
    "a": ADDR_BITS, "b": ADDR_BITS, "d": ADDR_BITS, "imm": 32,
})
REDUCE_ARGS = data.StructLayout({
    "rop": 1, "acc": 2, "loop": 2, "rows": DIM_BITS, "cols": DIM_BITS,
    "a": ADDR_BITS, "d": ADDR_BITS,
})
SOFTMAX_ARGS = data.StructLayout({
    "loop": 4, "rows": DIM_BITS, "cols": DIM_BITS,
    "a": ADDR_BITS, "b": ADDR_BITS, "d": ADDR_BITS, "e": ADDR_BITS, "imm": 32,
})
OPT_ARGS = data.StructLayout({
    "count": 20, "w": ADDR_BITS, "m": ADDR_BITS, "v": ADDR_BITS, "g": ADDR_BITS,
    "one_pass": 1,
})
LOOP_ARGS = data.StructLayout({"count": 16, "stride": ADDR_BITS})
#: ``ALLREDUCE``: lines ``a .. a + lines - 1`` (``lines * S`` words) all-reduced over the ring
#: in segments of ``seg`` lines; ``timeout`` cycles without progress give ``ERR_LINK``;
#: ``comp``/``width``: the links' compression (:class:`hdl.multi.config.CollComp`: 0 FP32
#: words, 1 BFP groups of ``width``-bit mantissas, rounded by the sending converter as
#: ``rounding`` says: :class:`hdl.bfp.converter.Rounding`, 0 nearest even, 1 stochastic with
#: the converter's LFSR, 2 truncation); ``poison``: wait for the matmul engine, and
#: if this run's ``flags`` are set send the canonical NaN as the region's word 0 (so every
#: core's two-pass ``OPT`` skips, docs/multicore.md). ``comp`` 2: top-k compression with error
#: feedback (the engine's ``TopK``; ``seg`` and ``width`` unused): the residual is kept in
#: lines ``b .. b + lines - 1`` and the ``ranks`` messages are gathered in lines
#: ``g .. g + glines - 1`` (``glines * S >= ranks * TopK.message_words(lines * S)``); ``b`` and
#: ``g`` are at or after ``a``.
ALLREDUCE_ARGS = data.StructLayout({
    "a": ADDR_BITS, "lines": 16, "seg": 16, "timeout": 16, "comp": 2, "width": 4, "poison": 1,
    "b": ADDR_BITS, "g": ADDR_BITS, "glines": 16, "rounding": 2,
})
#: ``SENDRECV``: send lines ``a .. a + lines - 1`` (``lines * S`` FP32 words) to the next core
#: of the ring (rank ``r + 1``) and, at the same time, receive ``rlines * S`` words from the
#: previous core (rank ``r - 1``) into lines ``b .. b + rlines - 1``; either count may be 0,
#: not both; the two ranges may not overlap. ``timeout`` cycles without progress give
#: ``ERR_LINK`` (24 bits: a stage's receive may wait for the other stage's whole pass). The
#: words are copied bit for bit (no compression). ``sdir`` = 1 sends to the previous core
#: (rank ``r - 1``) and ``rdir`` = 1 receives from the next (rank ``r + 1``) instead, over
#: the reverse links (``CoreConfig.reverse_links``; without them either bit is
#: ``ERR_FIELD``): pipeline stages send activations forward and gradients back.
SENDRECV_ARGS = data.StructLayout({
    "a": ADDR_BITS, "lines": 16, "b": ADDR_BITS, "rlines": 16, "timeout": 24,
    "sdir": 1, "rdir": 1,
})
#: Words an ``ALLREDUCE`` or a ``SENDRECV`` reaches (the collective engine's 16-bit word
#: addresses; a ``SENDRECV``'s two ranges together).
ALLREDUCE_MAX_WORDS = 1 << 16
EMPTY_ARGS = data.StructLayout({})

#: ``{opcode: args layout}``
ARG_LAYOUTS = {
    Op.HALT: EMPTY_ARGS, Op.MATMUL: MATMUL_ARGS, Op.VEC: VEC_ARGS, Op.REDUCE: REDUCE_ARGS,
    Op.SOFTMAX_XENT: SOFTMAX_ARGS, Op.OPT: OPT_ARGS, Op.LOOP: LOOP_ARGS,
    Op.ENDLOOP: EMPTY_ARGS, Op.FENCE: EMPTY_ARGS, Op.ADAPT: EMPTY_ARGS,
    Op.ALLREDUCE: ALLREDUCE_ARGS, Op.SENDRECV: SENDRECV_ARGS,
}
_ARG_NAME = {Op.HALT: "halt", Op.MATMUL: "matmul", Op.VEC: "vec", Op.REDUCE: "reduce",
             Op.SOFTMAX_XENT: "softmax", Op.OPT: "opt", Op.LOOP: "loop",
             Op.ENDLOOP: "endloop", Op.FENCE: "fence", Op.ADAPT: "adapt",
             Op.ALLREDUCE: "allreduce", Op.SENDRECV: "sendrecv"}
# ops without fields have no union member (a zero-width member would give `wire [-1:0]`)
ARGS = data.UnionLayout({_ARG_NAME[op]: lay for op, lay in ARG_LAYOUTS.items() if lay.size})
assert ARGS.size <= INSTR_BITS - 4
_PAD = INSTR_BITS - 4 - ARGS.size
INSTR = data.StructLayout({"op": 4, "args": ARGS, **({"_pad": _PAD} if _PAD else {})})

#: Which address fields the loop offset is added to, bit ``i`` of ``loop`` <-> ``LOOP_FIELDS[op][i]``
LOOP_FIELDS = {Op.MATMUL: ("a", "b", "c"), Op.VEC: ("a", "b", "d"), Op.REDUCE: ("a", "d"),
               Op.SOFTMAX_XENT: ("a", "b", "d", "e")}

#: A precision-table entry (layer x pass): widths of the two streamed operands and rounding
#: (``hdl.bfp.converter.Rounding``: 0 nearest-even, 1 stochastic, 2 truncate).
PREC_ENTRY = data.StructLayout({"width_a": 4, "width_b": 4, "rounding": 2})


def arg_name(op: int) -> str:
    return _ARG_NAME[op]


# ---- encoding --------------------------------------------------------------------------------
def encode(op: int, **fields) -> int:
    """The 128-bit word of one instruction; fields not given are 0.

    Raises ``ValueError`` for an unknown opcode or field name, or a value that does not fit.
    """
    if op not in ARG_LAYOUTS:
        raise ValueError(f"op must be one of {tuple(ARG_LAYOUTS)}, not {op!r}")
    lay = ARG_LAYOUTS[op]
    names = {n for n, _ in lay}
    for k, v in fields.items():
        if k not in names:
            raise ValueError(f"{OP_NAMES[op]} has no field {k!r} (fields: {sorted(names)})")
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{OP_NAMES[op]}.{k} must be an int, not {v!r}")
        width = Shape.cast(lay[k].shape).width
        if not 0 <= v < (1 << width):
            raise ValueError(f"{OP_NAMES[op]}.{k} = {v} does not fit in {width} bits")
    args = {n: fields.get(n, 0) for n in names}
    if not args:
        return INSTR.const({"op": op}).as_value().value
    return INSTR.const({"op": op, "args": {_ARG_NAME[op]: args}}).as_value().value


def decode(word: int) -> tuple[int, dict]:
    """``(op, fields)`` of a 128-bit word. An unknown opcode gives ``(op, {})``."""
    v = INSTR.from_bits(word)
    op = v.op
    if op not in ARG_LAYOUTS or not ARG_LAYOUTS[op].size:
        return op, {}
    a = getattr(v.args, _ARG_NAME[op])
    return op, {n: getattr(a, n) for n, _ in ARG_LAYOUTS[op]}


def _fmt(op, name, value):
    if name == "mode":
        return MODE_NAMES.get(value, str(value))
    if name == "vop":
        return VOP_NAMES.get(value, str(value))
    if name == "rop":
        return ROP_NAMES.get(value, str(value))
    if name in ("a", "b", "c", "d", "e", "w", "m", "v", "g", "imm", "stride"):
        return f"0x{value:x}"
    return str(value)


def disassemble(word: int) -> str:
    """One line of assembly, e.g. ``MATMUL mode=FWD acc=0 ... c=0x1400``."""
    op, fields = decode(word)
    if op not in OP_NAMES:
        return f".word 0x{word:032x}"
    parts = [OP_NAMES[op]] + [f"{n}={_fmt(op, n, v)}" for n, v in fields.items()]
    return " ".join(parts)


_NAMED = {"mode": {v: k for k, v in MODE_NAMES.items()},
          "vop": {v: k for k, v in VOP_NAMES.items()},
          "rop": {v: k for k, v in ROP_NAMES.items()}}


def assemble(line: str) -> int:
    """Inverse of :func:`disassemble` (fields may be omitted: 0; ints in any Python base)."""
    text = line.split("#", 1)[0].strip()
    if not text:
        raise ValueError("empty instruction")
    head, *rest = text.split()
    if head == ".word":
        if len(rest) != 1:
            raise ValueError(f".word takes one value: {line!r}")
        return int(rest[0], 0)
    names = {v: k for k, v in OP_NAMES.items()}
    if head.upper() not in names:
        raise ValueError(f"unknown mnemonic {head!r} in {line!r}")
    op = names[head.upper()]
    fields = {}
    for tok in rest:
        m = re.fullmatch(r"(\w+)=(\S+)", tok)
        if not m:
            raise ValueError(f"expected name=value, not {tok!r} in {line!r}")
        k, v = m.groups()
        if k in _NAMED and v.upper() in _NAMED[k]:
            fields[k] = _NAMED[k][v.upper()]
        else:
            try:
                fields[k] = int(v, 0)
            except ValueError:
                raise ValueError(f"bad value {v!r} for {k} in {line!r}") from None
    return encode(op, **fields)


def assemble_program(text: str) -> list[int]:
    return [assemble(ln) for ln in text.splitlines() if ln.split("#", 1)[0].strip()]


def disassemble_program(words) -> str:
    return "\n".join(disassemble(w) for w in words)


# ---- operand ranges and checks -----------------------------------------------------------------
@dataclass(frozen=True)
class Range:
    """Lines ``[start, start + lines)`` used by port ``port`` of an instruction: ``"r"`` read,
    ``"w"`` written, ``"rw"`` both (through the same bank's read and write ports)."""
    port: str
    kind: str
    start: int
    lines: int
    span: int = 0      #: lines added for the loop iterations after the first (static check)

    def banks(self, bank_depth: int) -> set[int]:
        if self.lines == 0:
            return set()
        return set(range(self.start // bank_depth, (self.start + self.lines - 1) // bank_depth
                         + 1))


def _cdiv(a, b):
    return -(-a // b)


def operand_ranges(op: int, f: dict, S: int, *, offset: int = 0, span: int = 0) -> list[Range]:
    """The line ranges an instruction touches. ``offset`` (the loop offset, run time) is added
    to the start of every field flagged in ``loop``; ``span`` (static check: ``(count - 1) *
    stride``) is added to their length, so the range covers every iteration."""
    def rng(port, kind, field, lines):
        bit = LOOP_FIELDS.get(op, ()).index(field) if field in LOOP_FIELDS.get(op, ()) else None
        flagged = bit is not None and (f.get("loop", 0) >> bit) & 1
        return Range(port, kind, f[field] + (offset if flagged else 0),
                     lines + (span if flagged else 0), span if flagged else 0)

    if op == Op.MATMUL:
        M, K, N = f["M"], f["K"], f["N"]
        kinds = {0: ("r", "r", "rw"), 1: ("rw", "r", "r"), 2: ("r", "rw", "r")}.get(f["mode"])
        if kinds is None:
            return []
        return [rng("a", kinds[0], "a", M * _cdiv(K, S)), rng("b", kinds[1], "b", K * _cdiv(N, S)),
                rng("c", kinds[2], "c", M * _cdiv(N, S))]
    if op == Op.VEC:
        n = f["rows"] * _cdiv(f["cols"], S)
        out = []
        if f["vop"] in Vop.READS_A:
            out.append(rng("a", "r", "a", n))
        if f["vop"] in Vop.READS_B:
            out.append(rng("b", "r", "b", _cdiv(f["cols"], S) if f["bcast"] else n))
        out.append(rng("d", "w", "d", n))
        return out
    if op == Op.REDUCE:
        n = f["rows"] * _cdiv(f["cols"], S)
        if f["rop"] == Rop.SUMSQ:
            return [rng("a", "r", "a", n), rng("d", "w", "d", 1)]
        return [rng("a", "r", "a", n),
                rng("d", "rw" if f["acc"] != Acc.OFF else "w", "d", _cdiv(f["cols"], S))]
    if op == Op.SOFTMAX_XENT:
        n = f["rows"] * _cdiv(f["cols"], S)
        nr = _cdiv(f["rows"], S)
        return [rng("a", "r", "a", n), rng("b", "r", "b", nr), rng("d", "w", "d", n),
                rng("e", "w", "e", nr)]
    if op == Op.OPT:
        n = _cdiv(f["count"], S)
        return [Range("w", "rw", f["w"], n), Range("m", "rw", f["m"], n),
                Range("v", "rw", f["v"], n), Range("g", "r", f["g"], n)]
    if op == Op.ALLREDUCE:
        return [Range("a", "rw", f["a"], f["lines"])] + (
            [Range("b", "rw", f["b"], f["lines"]), Range("g", "rw", f["g"], f["glines"])]
            if f["comp"] == 2 else [])
    if op == Op.SENDRECV:
        return ([Range("a", "r", f["a"], f["lines"])] if f["lines"] else []) + \
               ([Range("b", "w", f["b"], f["rlines"])] if f["rlines"] else [])
    return []


def check_allreduce(f: dict, *, S: int, collective) -> int:
    """:class:`Status` of an ``ALLREDUCE``'s fields on a core whose collective engine has
    config ``collective`` (:class:`hdl.multi.config.CollectiveConfig`, ``None``: the core has
    none, ``ERR_OPCODE``). ``ERR_FIELD`` (tested first): ``comp > 2``; BFP with a ``width``
    not in ``bfp.widths`` or ``rounding == 3``; ``timeout == 0``; ``seg * ranks < lines`` (BFP segments need not
    be whole groups: the engine pads them on the link). ``ERR_SHAPE``: ``lines == 0``,
    ``seg == 0`` or ``lines * S`` past the engine's ``depth`` words. The engine then never
    answers ``BAD_*`` (each of its checks is one of these).

    Top-k (``comp == 2``; ``seg`` and ``width`` unchecked): ``ERR_FIELD`` for an engine built
    without top-k (``collective.topk`` is ``None``), a bad ``timeout``, or ``b < a`` or
    ``g < a``; ``ERR_SHAPE`` for ``lines == 0``, ``glines * S`` short of ``ranks`` messages
    (:meth:`~hdl.multi.config.TopK.message_words`), or the hull ``a .. max(b + lines,
    g + glines)`` past ``depth`` words. Overlapping ranges share a bank: ``ERR_BANK``."""
    if collective is None:
        return Status.ERR_OPCODE
    if f["comp"] == 2:
        tk = collective.topk
        if (tk is None or f["timeout"] == 0 or f["timeout"] >= 1 << collective.timeout_bits
                or f["b"] < f["a"] or f["g"] < f["a"]):
            return Status.ERR_FIELD
        hull = max(f["a"] + f["lines"], f["b"] + f["lines"], f["g"] + f["glines"]) - f["a"]
        if (f["lines"] == 0 or hull * S > collective.depth
                or f["glines"] * S < collective.ranks * tk.message_words(f["lines"] * S)):
            return Status.ERR_SHAPE
        return Status.OK
    bfp = f["comp"] == 1
    if (f["comp"] > 2 or (bfp and (f["width"] not in collective.bfp.widths
                                   or f["rounding"] == 3))
            or f["timeout"] == 0 or f["timeout"] >= 1 << collective.timeout_bits
            or f["seg"] * collective.ranks < f["lines"]):
        return Status.ERR_FIELD
    if f["lines"] == 0 or f["seg"] == 0 or f["lines"] * S > collective.depth:
        return Status.ERR_SHAPE
    return Status.OK


def sendrecv_span(f: dict) -> tuple[int, int]:
    """``(first line, lines)`` of the hull of a ``SENDRECV``'s non-empty ranges (what the
    collective engine's word addresses reach, relative to the first line)."""
    rs = [(f["a"], f["lines"])] * bool(f["lines"]) + [(f["b"], f["rlines"])] * bool(f["rlines"])
    if not rs:
        return 0, 0
    lo = min(a for a, _ in rs)
    return lo, max(a + n for a, n in rs) - lo


def check_sendrecv(f: dict, *, S: int, collective) -> int:
    """:class:`Status` of a ``SENDRECV``'s fields on a core whose collective engine has config
    ``collective`` (``None``: ``ERR_OPCODE``). ``ERR_FIELD``: ``timeout`` 0 or too wide for the
    engine, or ``sdir`` / ``rdir`` 1 on an engine without reverse links. ``ERR_SHAPE``: ``lines == rlines == 0``, or the hull of the two ranges
    (:func:`sendrecv_span`) past the engine's ``depth`` words. Overlapping ranges are
    ``ERR_ADDR`` (:func:`check_instruction`). The engine then never answers ``BAD_*``."""
    if collective is None:
        return Status.ERR_OPCODE
    if f["timeout"] == 0 or f["timeout"] >= 1 << collective.timeout_bits:
        return Status.ERR_FIELD
    if (f.get("sdir", 0) or f.get("rdir", 0)) and not collective.reverse:
        return Status.ERR_FIELD
    if (f["lines"] == 0 and f["rlines"] == 0) or sendrecv_span(f)[1] * S > collective.depth:
        return Status.ERR_SHAPE
    return Status.OK


def check_instruction(op: int, f: dict, *, S: int, lines: int, bank_depth: int, layers: int,
                      dim_max: int, span: int = 0, max_classes: int | None = None,
                      collective=None, sumsq: bool = True) -> int:
    """:class:`Status` of one instruction (``span`` as in :func:`operand_ranges`;
    ``max_classes``: the longest softmax row, ``CoreConfig.max_classes``; ``collective``: the
    core's :class:`hdl.multi.config.CollectiveConfig`, ``None`` without one, when
    ``ALLREDUCE`` is ``ERR_OPCODE``; ``sumsq``: ``CoreConfig.vector_sumsq``, without which
    ``REDUCE SUMSQ`` is ``ERR_FIELD``). Loop structure is checked by :func:`check_program`."""
    if op not in ARG_LAYOUTS:
        return Status.ERR_OPCODE
    if op == Op.ALLREDUCE:
        st = check_allreduce(f, S=S, collective=collective)
        if st != Status.OK:
            return st
    if op == Op.SENDRECV:
        st = check_sendrecv(f, S=S, collective=collective)
        if st != Status.OK:
            return st
    if op == Op.MATMUL:
        if f["mode"] > 2 or f["acc"] not in Acc.ALL or f["layer"] >= layers:
            return Status.ERR_FIELD
        if min(f["M"], f["K"], f["N"]) == 0 or max(f["M"], f["K"], f["N"]) > dim_max:
            return Status.ERR_SHAPE
    elif op == Op.VEC:
        if f["vop"] not in Vop.ALL:
            return Status.ERR_FIELD
        if f["rows"] == 0 or f["cols"] == 0:
            return Status.ERR_SHAPE
    elif op == Op.REDUCE:
        if f["acc"] not in Acc.ALL or (f["rop"] == Rop.SUMSQ and not sumsq):
            return Status.ERR_FIELD
        if f["rows"] == 0 or f["cols"] == 0:
            return Status.ERR_SHAPE
    elif op == Op.SOFTMAX_XENT:
        if not 1 <= (f["imm"] >> 23) & 0xFF <= 254:
            return Status.ERR_FIELD         # the gradient scale must be a normal number
        if f["rows"] == 0 or f["cols"] < 2 or (max_classes is not None
                                                and f["cols"] > max_classes):
            return Status.ERR_SHAPE
    elif op == Op.OPT:
        if f["one_pass"] and f["count"] % S:
            return Status.ERR_FIELD         # the gradient-write snoop watches whole lines
        if not 1 <= f["count"] <= OPT_MAX_COUNT:
            return Status.ERR_SHAPE
    elif op == Op.LOOP:
        if f["count"] == 0:
            return Status.ERR_SHAPE
    ranges = operand_ranges(op, f, S, span=span)
    for r in ranges:
        if r.start + r.lines > lines:
            return Status.ERR_ADDR
    # One read port and one write port per bank: two ranges that both read (or both write)
    # may not touch the same bank ("rw" uses both ports of its banks).
    for i, r in enumerate(ranges):
        for s in ranges[i + 1:]:
            reads = "r" in r.kind and "r" in s.kind
            writes = "w" in r.kind and "w" in s.kind
            if (reads or writes) and r.banks(bank_depth) & s.banks(bank_depth):
                return Status.ERR_BANK
    # A read range and a write range of one instruction may overlap only exactly (in place:
    # every element is read before it is written); a SENDRECV's not at all (its words are
    # received while others are still being sent). Two ranges that both move with the loop
    # keep their relative position: they are compared without the loop span (so interleaved
    # per-micro-batch records are legal); otherwise the ranges covering every iteration are.
    for r in ranges:
        for s in ranges:
            if r.kind != "r" or s.kind != "w":
                continue
            both = r.span and s.span
            r0, r1 = r.start, r.start + r.lines - (r.span if both else 0)
            s0, s1 = s.start, s.start + s.lines - (s.span if both else 0)
            if r0 < s1 and s0 < r1 and ((r0, r1) != (s0, s1) or op == Op.SENDRECV):
                return Status.ERR_ADDR
    return Status.OK


class ProgramError(ValueError):
    """A program the core would reject: ``status`` (:class:`Status`) at instruction ``pc``."""

    def __init__(self, status: int, pc: int, text: str = ""):
        self.status, self.pc = status, pc
        super().__init__(f"program rejected: {STATUS_NAMES.get(status, status)} at pc {pc}"
                         + (f" ({text})" if text else ""))


def check_program(words, *, S: int, lines: int, bank_depth: int, layers: int, dim_max: int,
                  prog_depth: int, max_classes: int | None = None,
                  collective=None, sumsq: bool = True) -> tuple[int, int]:
    """``(status, pc)`` of the whole-program check the sequencer runs before executing
    anything: instructions from pc 0 up to the first ``HALT`` outside a loop. ``pc`` is the
    first bad instruction (0 when OK). Words beyond ``len(words)`` read as 0 (``HALT``)."""
    words = list(words)
    in_loop, span = False, 0
    for pc in range(prog_depth):
        word = words[pc] if pc < len(words) else 0
        op, f = decode(word)
        st = check_instruction(op, f, S=S, lines=lines, bank_depth=bank_depth, layers=layers,
                               dim_max=dim_max, span=span if in_loop else 0,
                               max_classes=max_classes, collective=collective, sumsq=sumsq)
        if st != Status.OK:
            return st, pc
        if op == Op.LOOP:
            if in_loop:
                return Status.ERR_LOOP, pc
            in_loop, span = True, (f["count"] - 1) * f["stride"]
        elif op == Op.ENDLOOP:
            if not in_loop:
                return Status.ERR_LOOP, pc
            in_loop, span = False, 0
        elif op == Op.HALT:
            if in_loop:
                return Status.ERR_LOOP, pc
            return Status.OK, 0
    return Status.ERR_NO_HALT, prog_depth - 1


def check_program_for(words, config) -> tuple[int, int]:
    """:func:`check_program` with every limit taken from a :class:`~hdl.core.config.CoreConfig`
    (what the sequencer of that configuration checks)."""
    return check_program(words, S=config.size, lines=config.lines,
                         bank_depth=config.bank_depth, layers=config.layers,
                         dim_max=(1 << config.dim_bits) - 1, prog_depth=config.prog_depth,
                         max_classes=config.max_classes, collective=config.collective,
                         sumsq=config.vector_sumsq)


#: What the sequencer hands the vector unit for ``VEC``, ``REDUCE`` and ``SOFTMAX_XENT``:
#: ``op`` and ``args`` as in :data:`INSTR` but with the loop offset already added to the
#: flagged addresses (the unit ignores ``loop``); ``acc`` is the resolved accumulate flag of a
#: ``REDUCE`` (``Acc.AFTER_FIRST`` becomes 0 in loop iteration 0, else 1); ``gscale`` is the
#: FP32 gradient scale of a ``SOFTMAX_XENT``: ``imm * 2**k`` with ``k`` the optimizer's
#: loss-scale exponent (an exact exponent add; ``imm`` is normally ``1 / batch``).
VECTOR_CMD = data.StructLayout({"op": 4, "args": ARGS, "acc": 1, "gscale": 32})
