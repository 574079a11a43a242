"""Generate docs/isa.md from the layouts and tables the hardware uses (``make docs``;
``tests/test_core_isa.py`` fails when the committed page is stale).

    python -m hdl.core.isadoc [-o docs/isa.md]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from amaranth.hdl import Shape

from .config import CoreConfig
from .isa import (ARG_LAYOUTS, INSTR, INSTR_BITS, LOOP_FIELDS, OP_NAMES, PREC_ENTRY,
                  ROP_NAMES, STATUS_NAMES, VOP_NAMES, Acc, Op, Status, Vop, arg_name, encode,
                  disassemble)

__all__ = ["render"]

_OP_DOC = {
    Op.HALT: "wait until every unit is idle, then stop: `done` pulses, START answers `OK`",
    Op.MATMUL: "one matmul-engine pass; widths and rounding from the precision table entry "
               "(`layer`, `mode`); `a`, `b`, `c` are the bases of the engine's A, B, C",
    Op.VEC: "elementwise FP32 operation `vop` over a `rows x cols` matrix",
    Op.REDUCE: "`rop` BIAS_GRAD: column sums of `a` into vector `d` (+ `d` with accumulate); "
               "SUMSQ: sum of squares of `a` into word 0 of line `d` (`ERR_FIELD` on a core built "
               "without it, `CoreConfig.vector_sumsq = False`: the FPGA build)",
    Op.SOFTMAX_XENT: "softmax + cross-entropy of logits `a` (`rows x cols`) with labels `b` "
                     "(vector of `rows` ints): gradient to `d`, per-row loss to vector `e`; "
                     "gradient scale `imm * 2**k` (`k`: the optimizer's loss-scale exponent)",
    Op.OPT: "one optimizer step over `count` words: weights `w`, state `m`, `v`, gradient `g` "
            "(hyperparameters: optimizer registers written by the host); `one_pass` (`count` a "
            "multiple of `S`): one fused pass over the words when clipping is off, the skip "
            "decided by the run's `flags` (converter NaN / Inf, and NaN / Inf written into the "
            "`g` lines by the matmul engine or the vector unit), else the two-pass step (check "
            "pass over `g`, then the update)",
    Op.LOOP: "begin a counted loop of `count` iterations; iteration `i` adds `i * stride` lines "
             "to the address fields flagged in an instruction's `loop` bits",
    Op.ENDLOOP: "end of the loop body: next iteration, or fall through",
    Op.FENCE: "wait until every unit is idle",
    Op.ADAPT: "FAST precision update (docs/fast.md): wait until every unit is idle, then for "
              "every layer, mode and operand whose statistic `r = num / den` exceeds its "
              "threshold (`num * 2**16 > threshold * den`, host command `THRESH`) raise that "
              "operand's width in the precision table by 2 (up to `max_mantissa`); then clear "
              "every statistic",
    Op.ALLREDUCE: "ring all-reduce of the `lines * S` words of lines `a ..` with the other "
                  "cores' (a core built with `ranks >= 2`; else `ERR_OPCODE`): the collective "
                  "engine's FP32 sums in segments of `seg` lines, the links carrying FP32 "
                  "words (`comp = 0`) or BFP groups of `width`-bit mantissas (`comp = 1`, "
                  "rounded as `rounding` says: 0 nearest even, 1 stochastic with each core's "
                  "converter LFSR, 2 truncation, 3 `ERR_FIELD`); "
                  "`comp = 2`: top-k with error feedback (16 of every 256 words sent as "
                  "index/value pairs, the residual kept in lines `b ..`, the cores' messages "
                  "gathered in lines `g .. g + glines - 1`, summed in rank order; `seg` and "
                  "`width` unused); runs "
                  "beside the other units under the bank scoreboard; `poison`: waits for the "
                  "matmul engine and the vector unit and, if the run's `flags` are set, sends "
                  "the canonical NaN as word 0 (every core's two-pass `OPT` then skips); "
                  "`timeout` cycles without progress stop the run with `ERR_LINK` "
                  "(docs/multicore.md)",
    Op.SENDRECV: "point-to-point transfer for pipeline stages (a core built with `ranks >= 2`; "
                 "else `ERR_OPCODE`): send the `lines * S` words of lines `a ..` to the next "
                 "core of the ring (rank `r + 1`) and, in the same command, receive `rlines * "
                 "S` words from the previous core (rank `r - 1`) into lines `b ..`; either count "
                 "may be 0, not both (`ERR_SHAPE`); the ranges may not overlap (`ERR_ADDR`); FP32 "
                 "words copied bit for bit; runs on the collective engine beside the other units "
                 "under the bank scoreboard; `timeout` cycles without progress stop the run with "
                 "`ERR_LINK` (docs/multicore.md)",
}


def _width(shape) -> int:
    return Shape.cast(shape).width if not hasattr(shape, "size") else shape.size


def render(config: CoreConfig | None = None) -> str:
    cfg = config or CoreConfig()
    out = ["# Tessera ISA", "",
           "Generated by `python -m hdl.core.isadoc` from `hdl/core/isa.py` (the layouts the "
           "sequencer decodes with); do not edit by hand. The design around it: "
           "[core.md](core.md).", "",
           f"An instruction is a {INSTR_BITS}-bit word (`INSTR`, LSB first): `op` in bits "
           f"0..3, then the opcode's argument struct from bit 4 (an `args` union). Addresses "
           f"are global line addresses (a line is `S` FP32 words; line = "
           f"`bank * bank_depth + offset`). Software packs with `INSTR.const(...)` "
           f"(`hdl.core.isa.encode`) and unpacks with `INSTR.from_bits` "
           f"(`hdl.core.isa.decode`); `assemble`/`disassemble` round-trip every "
           f"instruction.", "",
           "## Opcodes", "", "| op | name | effect |", "|---|---|---|"]
    for op in Op.ALL:
        out.append(f"| {op} | `{OP_NAMES[op]}` | {_OP_DOC[op]} |")
    out += ["", "## Fields", "",
            "Bit offsets are from bit 0 of the instruction word.", ""]
    args_off = INSTR["args"].offset
    for op in Op.ALL:
        lay = ARG_LAYOUTS[op]
        out += [f"### {OP_NAMES[op]} (`op = {op}`, `args.{arg_name(op)}`)", ""]
        fields = list(lay)
        if not fields:
            out += ["No fields.", ""]
            continue
        out += ["| field | bits | width |", "|---|---|---|"]
        for name, f in fields:
            w = _width(f.shape)
            lo = args_off + f.offset
            out.append(f"| `{name}` | {lo}..{lo + w - 1} | {w} |")
        if op in LOOP_FIELDS:
            flags = ", ".join(f"bit {i}: `{n}`" for i, n in enumerate(LOOP_FIELDS[op]))
            out += ["", f"`loop` flags (loop offset added to): {flags}."]
        out.append("")
    out += ["## Sub-operations", "",
            "| VEC `vop` | name |", "|---|---|",
            *[f"| {v} | `{n}` |" for v, n in VOP_NAMES.items()], "",
            "`ADD: d = a + b`; `RELU: d = relu(a)`; `RELU_GRAD: d = a if b > 0 else +0`; "
            "`SCALE: d = a * imm`; `ADD_RELU: d = relu(a + b)`; `COPY: d = a` (bits); "
            "`ZERO: d = +0`; `relu(x) = x if x > 0 or NaN else +0`. With `bcast`, `b` is one "
            "row broadcast over the rows (bias).", "",
            "| REDUCE `rop` | name |", "|---|---|",
            *[f"| {v} | `{n}` |" for v, n in ROP_NAMES.items()], "",
            "| `acc` | meaning |", "|---|---|",
            f"| {Acc.OFF} | overwrite |", f"| {Acc.ON} | accumulate into the output |",
            f"| {Acc.AFTER_FIRST} | overwrite in loop iteration 0, accumulate in later ones "
            f"(micro-batch gradient accumulation) |", "",
            "## Program status", "",
            "START first checks the whole program (pc 0 to the first HALT outside a loop); "
            "a program that fails runs nothing and START answers with the status and the pc "
            "of the first bad instruction.", "",
            "| status | name |", "|---|---|",
            *[f"| {v} | `{STATUS_NAMES[v]}` |" for v in Status.ALL], "",
            "Rules: every operand range inside the scratchpad; two ranges of one instruction "
            "that both read (or both write) a bank are rejected (`ERR_BANK`: a bank has one "
            "read and one write port; a read-modify-write range uses both); a read range "
            "overlapping a write range must coincide with it (in place), ranges that move with "
            "the loop compared per iteration, others over all iterations (`ERR_ADDR`).", "",
            "## Precision table", "",
            f"`PREC_ENTRY` ({PREC_ENTRY.size} bits): "
            + ", ".join(f"`{n}` {f.offset}..{f.offset + _width(f.shape) - 1}"
                        for n, f in PREC_ENTRY)
            + f". Index `layer * 4 + mode`, `layer < layers` ({cfg.layers} by default); "
              "rounding 0 nearest-even, 1 stochastic, 2 truncate; widths even, "
              "2..max_mantissa. Reset value 8/8 nearest.", "",
            "## Example", "", "```"]
    D = cfg.bank_depth
    example = [encode(Op.LOOP, count=4, stride=64),
               encode(Op.MATMUL, mode=0, M=8, K=64, N=64, a=4 * D, b=0, c=5 * D, loop=0b001),
               encode(Op.VEC, vop=Vop.ADD_RELU, bcast=1, rows=8, cols=64, a=5 * D, b=512,
                      d=5 * D),
               encode(Op.ENDLOOP), encode(Op.HALT)]
    out += [disassemble(w) for w in example] + ["```", ""]
    from ..bfp.stat import stat_layout
    from .core import REGS, STAT_REG_BASE
    from .host import HostOp, HostStatus, host_cmd_layout, host_rsp_layout
    cl, rl = host_cmd_layout(cfg), host_rsp_layout(cfg)
    out += ["## Host commands", "",
            "The core's `cmd` stream (`host_cmd_layout`: "
            + ", ".join(f"`{n}` {_width(f.shape)} bits" for n, f in cl)
            + ", data = max(32·S, 128) bits) and `rsp` stream (`host_rsp_layout`: "
            + ", ".join(f"`{n}`" for n, _ in rl)
            + "); one response per command, in order; the host driver is "
              "`sim/host/driver.py`.", "",
            "| op | name |", "|---|---|",
            *[f"| {v} | `{k}` |" for k, v in vars(HostOp).items()
              if k.isupper() and k != "ALL"], "",
            "| status | name |", "|---|---|",
            *[f"| {v} | `{k}` |" for k, v in vars(HostStatus).items() if k.isupper()], "",
            "## Registers (`REG` index)", "", "| index | name | meaning |", "|---|---|---|",
            *[f"| {i} | `{n}` | {doc} |" for i, (n, doc) in enumerate(REGS)], "",
            "### FAST statistics (docs/fast.md)", "",
            f"Statistic `k = stat_slot(layer, mode, operand) = (layer * 4 + mode) * 2 + "
            f"operand` (operand 0: the `width_a` side, 1: the `width_b` side; mode 3 unused) "
            f"is read as `REG {STAT_REG_BASE} + 2k` (bits 0..63) and `REG {STAT_REG_BASE} + "
            f"2k + 1` (bits 64..) of its `stat_layout` value: "
            + ", ".join(f"`{n}` bits {f.offset}..{f.offset + _width(f.shape) - 1}"
                        for n, f in stat_layout(cfg.array.bfp(0)))
            + f". `THRESH` writes threshold `k` (`addr = k`, unsigned Q16.16 in `data[:32]`); "
              f"`addr` of mode 3 or a layer >= `layers` ({cfg.layers}) answers `BAD_ADDR`.",
            ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="docs/isa.md")
    args = ap.parse_args(argv)
    text = render()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
