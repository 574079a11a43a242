"""Cycle counts as the documentation states them, written out again for the tests.

Each function is a formula from a block's page under ``docs/``, implemented here from the
text and not imported from ``hdl`` (whose own ``cycles``/``latency`` helpers are what the
tests check). The inputs are configuration facts: sizes, widths, lane counts, and the FP32
units' pipeline latencies, which the FP32 units' own tests measure. Nothing here imports
cocotb, so the fast tier can use it.
"""
from __future__ import annotations

__all__ = ["beat_cycles", "fmac_core_latency", "array_latency", "lanesum_flush",
           "optim_update_latency", "instr_cycles", "optim_sumsq_latency", "optim_step1_cycles",
           "optim_step1_cycles_ii",
           "optim_step_cycles_min", "matmul_pass_overhead", "matmul_pass_cycles",
           "core_opt_busy_cycles", "vector_cycles", "core_check_cycles",
           "core_step_cycle_bounds"]

#: ``FMACCore.latency = 1`` (docs/fmac.md: ``done`` and the product in cycle ``t + B + 1``).
fmac_core_latency = 1


def beat_cycles(width_a: int, width_b: int, lanes: int) -> int:
    """docs/array.md: ``beat_cycles(m_a, m_b) = ceil((m_a/2)(m_b/2)/lanes)``."""
    return -(-((width_a // 2) * (width_b // 2)) // lanes)


def array_latency(size: int, width_a: int, width_b: int, lanes: int) -> int:
    """docs/array.md: an ``inp`` beat's output vector appears ``(2S + 1)*B + 3 +
    FMACCore.LATENCY`` cycles later without backpressure."""
    return (2 * size + 1) * beat_cycles(width_a, width_b, lanes) + 3 + fmac_core_latency


def matmul_pass_overhead(size: int, req_reg: bool = False, mem_latency: int = 1) -> int:
    """docs/array.md (*Measured*): besides its beats, a single pass pays ``(2S + 1)`` beats of
    skew and systolic flow plus ``25 + 2S`` cycles that do not scale with the beat (one more
    with the FPGA build's request registers, ``ArrayConfig.req_reg``, and one more with ports
    of read latency 2, ``ArrayConfig.mem_latency``)."""
    return 25 + 2 * size + int(req_reg) + mem_latency - 1


def matmul_pass_cycles(size: int, beats: int, beat: int, req_reg: bool = False,
                       acc_parts: int = 1, mem_latency: int = 1) -> int:
    """docs/array.md: ``cycles`` of a pass on an idle engine whose tiles keep the array fed
    (square passes of 4S and 8S per side in the benchmark): its beats, ``(2S + 1)`` beats of
    fill and drain, and ``25 + 2S`` fixed cycles; the last beat's ``B - 1`` cycles after its
    start overlap the drain, so the fill costs ``2S*B + 1``: ``(beats + 2S)*B + 2S + 26``
    (= ``beats + 4S + 26`` at 1-cycle beats, the 42 / 58 cycles the page quotes); ``+ 1``
    with ``req_reg``, ``+ 1`` with ``mem_latency = 2``. With an accumulator of ``S / F`` lanes (``acc_parts = F``, a result
    line in ``F`` cycles): ``F - 1`` more while ``B >= F``, and the results' rate bounds the
    pass below that: ``max((beats + 2S)*B + F - 1, beats*F + 2S*B + B - 1) + 2S + 26``."""
    F = acc_parts
    body = max((beats + 2 * size) * beat + F - 1, beats * F + 2 * size * beat + beat - 1)
    return body + 1 + matmul_pass_overhead(size, req_reg, mem_latency)


def lanesum_flush(lm: int, la: int, lanes: int) -> int:
    """docs/datapaths.md (``LaneSum``): flush latency ``Lm + La + 2 + (lanes-1)(La+1) + 1``."""
    return lm + la + 2 + (lanes - 1) * (la + 1) + 1


def optim_update_latency(lm: int, la: int, lsqrt: int, ldiv: int) -> int:
    """docs/datapaths.md: update pipeline ``2 + 6*Lmul + 3*Ladd + Lsqrt + Ldiv``."""
    return 2 + 6 * lm + 3 * la + lsqrt + ldiv


def optim_sumsq_latency(lm: int, la: int, lanes: int) -> int:
    """docs/datapaths.md: ``sumsq_latency`` = read 2 + the update pipeline's three multiplies
    to ``g*g`` + ``LaneSum`` flush (no square stage of its own) + 1."""
    return 2 + 3 * lm + lanesum_flush(0, la, lanes) + 1


def optim_step1_cycles(n: int, lm: int, la: int, lsqrt: int, ldiv: int, lanes: int) -> int:
    """docs/datapaths.md: busy cycles of a one-pass ``STEP1`` (no clipping, not skipped):
    ``N + max(latency + 3, sumsq_latency)``."""
    return n + max(optim_update_latency(lm, la, lsqrt, ldiv) + 3,
                   optim_sumsq_latency(lm, la, lanes))


def optim_step1_cycles_ii(n: int, ii: int, latency: int, sumsq_latency: int) -> int:
    """docs/datapaths.md (shared units): a one-pass ``STEP1`` reads one element every ``ii``
    cycles: ``ii*(N - 1) + 1 + max(latency + 3, sumsq_latency)`` (``ii = 1``: the formula
    of :func:`optim_step1_cycles`)."""
    return ii * (n - 1) + 1 + max(latency + 3, sumsq_latency)


def optim_step_cycles_min(n: int, lm: int, la: int, lsqrt: int, ldiv: int, lanes: int) -> int:
    """docs/datapaths.md: a two-pass ``STEP`` takes about ``2N + Lsum (+ Lclip) + Lupdate``;
    this is that sum without the clip factor (the fewest cycles a STEP can take)."""
    return 2 * n + optim_sumsq_latency(lm, la, lanes) + optim_update_latency(lm, la, lsqrt, ldiv)


def core_opt_busy_cycles(n: int) -> int:
    """docs/core.md: a one-pass ``OPT`` (no clipping) keeps the training core's optimizer busy
    ``3 + N + 88`` cycles (SETREG N and STEP1 in the two cycles after issue, the unit free a
    cycle after ``busy`` falls; ``N + 88`` is ``STEP1`` with the default FP32 units)."""
    return 3 + n + 88


def vector_cycles(kind: str, rows: int, cols: int, *, lanes: int, ladd: int, lmul: int,
                  bg_latency: int, sumsq_latency: int, softmax_latency: int, bg_chunk: int,
                  grad_lanes: int, acc: bool = False) -> int:
    """docs/vector.md: cycles from the cycle ``cmd`` is accepted to the ``done`` cycle of one
    vector command, ``beats(w) = ceil(w / L)``, ``Lew = max(Ladd, Lmul)``:

    * ``"vec"`` (arithmetic ``VEC``): ``rows * beats(cols) + Lew + 5``;
    * ``"copy"`` (``VEC COPY``/``ZERO``): ``rows * beats(cols) + 3``;
    * ``"sumsq"`` (``REDUCE SUMSQ``): ``rows * cols + LaneSum.latency + 3``;
    * ``"bias_grad"`` (``REDUCE BIAS_GRAD``): per chunk of ``w <= bg_chunk`` columns, ``g =
      beats(w)``: ``rows*g + (rows-1)*max(0, Ladd+2-g) + g + BiasGrad.latency + 9``, plus
      ``Lew + 2`` with ``acc``; chunks add;
    * ``"softmax"`` (``SOFTMAX_XENT``): ``rows * max(cols, lanes) + SoftmaxXent.latency +
      2*cols + 2`` (``lanes`` = ``GradConfig.lanes``, ``grad_lanes`` here).
    """
    beats = lambda w: -(-w // lanes)                                    # noqa: E731
    lew = max(ladd, lmul)
    if kind == "vec":
        return rows * beats(cols) + lew + 5
    if kind == "copy":
        return rows * beats(cols) + 3
    if kind == "sumsq":
        return rows * cols + sumsq_latency + 3
    if kind == "bias_grad":
        total = 0
        for c0 in range(0, cols, bg_chunk):
            g = beats(min(bg_chunk, cols - c0))
            total += (rows * g + (rows - 1) * max(0, ladd + 2 - g) + g + bg_latency + 9
                      + (lew + 2 if acc else 0))
        return total
    if kind == "softmax":
        return rows * max(cols, grad_lanes) + softmax_latency + 2 * cols + 2
    raise ValueError(f"vector_cycles: kind must be vec, copy, sumsq, bias_grad or softmax, "
                     f"not {kind!r}")


def instr_cycles(decode_stages: int = 0) -> int:
    """docs/core.md, *Sequencer*: cycles of an instruction that waits for nothing. Without
    decoder stages 3 (fetch, decode, check or issue); with them fetch, the memory's word
    into a fabric register, load into the instruction register, ``decode_stages + 1`` of
    decode, check or issue."""
    return 3 if decode_stages == 0 else 5 + decode_stages


def core_check_cycles(static_instructions: int, decode_stages: int = 0) -> int:
    """docs/core.md: the program check before a run takes :func:`instr_cycles` per
    instruction from pc 0 to the first ``HALT`` outside a loop (loop bodies once)."""
    return instr_cycles(decode_stages) * static_instructions


def core_step_cycle_bounds(static_instructions: int, executed: int, matmul: list[int],
                           vector: list[int], opt: int, adapt_cycles: int = 0,
                           decode_stages: int = 0) -> tuple[int, int]:
    """docs/core.md, *Cycles of a step*: lower and upper bound of the ``cycles`` counter of a
    compiled step program (its MATMULs, vector instructions, then one ``OPT`` and ``HALT``).

    ``matmul``: each MATMUL's pass cycles (``matmul_pass_cycles``), ``vector``: each vector
    instruction's ``vector_cycles``, ``opt``: the OPT's busy cycles (``core_opt_busy_cycles``
    one-pass), ``executed``: instructions executed (loop bodies per iteration, ``LOOP``,
    ``ENDLOOP`` and ``HALT`` included), ``adapt_cycles``: the ``ADAPT`` instructions' slot
    cycles. With ``M = sum(matmul) + len(matmul)`` (a MATMUL keeps the unit busy one cycle
    more than its pass), ``V = sum(vector)``::

        lower = I*P + M + opt + I + 1
        upper = I*P + M + V + opt + I * executed + adapt_cycles

    (``I`` = :func:`instr_cycles`: 3, or 7 with the decoder's register stages). ``cycles = I*P + M + V + opt - overlap + idle`` exactly (in
    a step program at most two units run at once);
    ``overlap <= V`` (the matmul engine and the optimizer never run together in a step
    program: OPT waits for the matmul engine and only HALT follows it), ``idle >= I + 1`` (the
    first instruction's fetch, load, decode, issue; HALT's last cycle), ``idle <= I * executed
    + adapt_cycles`` (fetch, load, decode and one issue cycle per instruction; waiting cycles
    have a unit busy)."""
    i = instr_cycles(decode_stages)
    check = core_check_cycles(static_instructions, decode_stages)
    m = sum(matmul) + len(matmul)
    lower = check + m + opt + i + 1
    upper = check + m + sum(vector) + opt + i * executed + adapt_cycles
    return lower, upper
