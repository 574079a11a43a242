"""Fast tier of the training core's vector unit (hdl/core/vector.py) in Amaranth's simulator:
four simulated scratchpad ports (sim/tb/memport_tb.py) over one memory image, every command
compared bit-exactly with the golden model (sim/model/vector.py) on the WHOLE image (padding
lanes and memory outside the destination untouched), every port's accesses checked against the
ISA's operand ranges and every command's cycle count against ``VectorUnit.cycles()``. The
unit runs at ``vector_lanes`` 1, 2 and S (elements per cycle of VEC and REDUCE BIAS_GRAD)."""
import dataclasses
import functools
import random

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, ResetInserter, Signal

from hdl.core.config import CoreConfig
from hdl.core.isa import (VECTOR_CMD, Acc, Op, Rop, Vop, arg_name, decode, encode,
                          operand_ranges)
from hdl.core.vector import VectorUnit, _LineReader, _LineWriter
from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.log_config import FP32LogConfig
from hdl.grad.config import GradConfig
from sim.model.core import effective_fields, resolve_acc
from sim.model.vector import run_vector, set_matrix, set_vector
from sim.tb.amaranth_tb import ReusableSim, fp32_unit_counts, run_sim, stream_get
from sim.tb.memport_tb import LineMemory

F32 = np.float32
CFG = CoreConfig.preset("tiny")
S = CFG.size
#: S = 8 (the default line) with small banks: the widest unit the fast tier builds
CFG8 = CoreConfig(size=8, banks=4, bank_depth=256)
LINES = 512                     # the image (the unit's address space is larger)
#: max_cols = 8 makes every bias gradient wider than 8 columns run in chunks.
GC = GradConfig(lanes=8, max_cols=8, max_classes=16)
DC = FP32DivSqrtConfig.preset("tiny")
LC = FP32LogConfig.preset("tiny")
SPECIALS = [0x7FC00000, 0xFFC00001, 0x7F800001, 0x00000000, 0x80000000, 0x7F800000,
            0xFF800000, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0xBF800000,
            0x7F7FFFFF, 0xFF7FFFFF, 0x33800000]
ONE = 0x3F800000
#: vector_lanes at S = 4: one element per cycle, two, a whole line
LANES = [1, 2, S]
#: the simulations' lanes in ``make test``: two lanes (a line in two beats) in ``make
#: test-long``, since ``test_random_commands_s8[2]``, ``test_reset_in_the_middle[*-2]`` and
#: the line reader / writer tests keep a partial line in ``make test``
SIM_LANES = [1, pytest.param(2, marks=pytest.mark.long), S]


def _f32_bits(x):
    return int(np.array(x, F32).view(np.uint32))


@functools.cache
def _unit(fp32="default", lanes=S, cfg=CFG):
    """One unit per configuration: tests of one configuration share its elaborated simulation
    (:func:`_sim`)."""
    return VectorUnit(config=dataclasses.replace(cfg, vector_lanes=lanes), grad_config=GC,
                      fp32_config=FP32Config.preset(fp32), divsqrt_config=DC, log_config=LC)


@functools.cache
def _sim(design) -> ReusableSim:
    """The elaborated simulation of ``design`` (a :func:`_unit` or :func:`_reset_top`), built
    once (4 to 10 s) and started from its initial state by every run."""
    return ReusableSim(design, testbenches=1, processes=1)


def _image(seed, S=S):
    """Random FP32 values (normal, wide-range, specials) and raw random words."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 2**32, size=(LINES, S), dtype=np.uint32)    # raw garbage
    vals = (rng.standard_normal((LINES, S)) * 4).astype(F32).view(np.uint32)
    img[:LINES // 2] = vals[:LINES // 2]
    sp = np.array(SPECIALS, np.uint32)
    pos = rng.choice(LINES // 2 * S, size=60, replace=False)
    img.reshape(-1)[pos] = sp[rng.integers(0, len(sp), size=60)]
    return img


def _cmd_bits(op, fields, acc, gscale):
    return VECTOR_CMD.const({"op": op, "args": {arg_name(op): fields}, "acc": acc,
                             "gscale": gscale}).as_value().value


def _run(dut, img, cmds, *, deadline=20000, top=None, mid=None):
    """Run ``cmds`` = [(op, fields, acc, gscale)] one after another; after each ``done`` the
    image must equal the model applied to the image before the command. Returns the cycles
    from accept to done of each command. ``top``: the simulated design (default ``dut``);
    ``mid(ctx, k)``: an async hook run after command k's accept (may return True: do not wait
    for done, e.g. after a reset)."""
    cfg = dut.config
    S = cfg.size
    mem = LineMemory(img, {"a": dut.a, "b": dut.b, "d": dut.d, "e": dut.e},
                     latency=cfg.spad_latency)
    cycles, failures = [], []

    async def tb(ctx):
        t = 0
        for k, (op, fields, acc, gscale) in enumerate(cmds):
            f = decode(encode(op, **fields))[1]
            expect = img.copy()
            run_vector(expect, op, f, acc=acc, gscale=gscale, config=cfg, grad_config=GC,
                       exp_config=DC, log_config=LC)
            mem.reads = {n: set() for n in mem.reads}
            mem.writes = {n: set() for n in mem.writes}
            ctx.set(dut.cmd.payload.as_value(), _cmd_bits(op, f, acc, gscale))
            ctx.set(dut.cmd.valid, 1)
            for _ in range(50):
                ready = ctx.get(dut.cmd.ready)
                await ctx.tick()
                t += 1
                if ready:
                    break
            else:
                failures.append(f"cmd {k}: never accepted")
                return
            ctx.set(dut.cmd.valid, 0)
            accept = t - 1
            if mid is not None and await mid(ctx, k):
                continue
            assert ctx.get(dut.busy)
            for _ in range(deadline):
                if ctx.get(dut.done):
                    break
                await ctx.tick()
                t += 1
            else:
                failures.append(f"cmd {k} ({op}, {fields}): no done within {deadline} cycles")
                return
            cycles.append(t - accept)
            want = dut.cycles(op, f["rows"], f["cols"], vop=f.get("vop", 0),
                              rop=f.get("rop", 0), acc=acc)
            if t - accept != want:
                failures.append(f"cmd {k} ({op}, {fields}, acc={acc}): done after "
                                f"{t - accept} cycles, published {want}")
            await ctx.tick()
            t += 1
            assert not ctx.get(dut.busy) and not ctx.get(dut.done)
            bad = np.argwhere(img != expect)
            if len(bad):
                failures.append(f"cmd {k} ({op}, {fields}, acc={acc}): {len(bad)} words differ, "
                                + ", ".join(f"({ln},{j}) got {img[ln, j]:#010x} expected "
                                            f"{expect[ln, j]:#010x}" for ln, j in bad[:6]))
                return
            # every access inside the ISA's operand ranges of its port and kind
            rng = operand_ranges(op, f, S)
            for name in "abde":
                for kind, used in (("r", mem.reads[name]), ("w", mem.writes[name])):
                    ok = set()
                    for r in rng:
                        if r.port == name and kind in r.kind:
                            ok |= set(range(r.start, r.start + r.lines))
                    if not used <= ok:
                        failures.append(f"cmd {k} ({op}, {fields}): port {name} kind {kind} "
                                        f"touched lines {sorted(used - ok)[:8]} outside its "
                                        f"operand range")
            img[:] = expect          # a NaN payload mismatch would have been caught above

    _sim(top if top is not None else dut).run(tb, processes=[mem.process])
    assert not mem.errors, mem.errors[:5]
    assert not failures, "\n".join(failures)
    return cycles


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lanes", SIM_LANES)
def test_vec_every_op(lanes):
    """Every vop, bcast on/off, shapes with cols below / at / above S and not multiples of S,
    in place (d == a, d == b) and a bcast bias add; default (deep) FP32 pipelines."""
    dut = _unit(lanes=lanes)
    img = _image(1)
    scale = _f32_bits(-0.375)
    cmds = []
    for k, vop in enumerate(Vop.ALL):
        for bcast in (0, 1):
            rows, cols = [(3, 6), (2, 8), (1, 1), (4, 3)][(2 * k + bcast) % 4]
            cmds.append((Op.VEC, dict(vop=vop, bcast=bcast, rows=rows, cols=cols, a=0, b=40,
                                      d=300 + 20 * k + 10 * bcast,
                                      imm=scale if vop == Vop.SCALE else _f32_bits(2.0)),
                         0, 0))
    cmds += [
        (Op.VEC, dict(vop=Vop.ADD_RELU, rows=5, cols=7, a=60, b=100, d=60), 0, 0),   # d == a
        (Op.VEC, dict(vop=Vop.RELU_GRAD, rows=3, cols=5, a=0, b=120, d=120), 0, 0),  # d == b
        (Op.VEC, dict(vop=Vop.SCALE, rows=2, cols=9, a=130, d=130, imm=_f32_bits(1e-30)), 0, 0),
        (Op.VEC, dict(vop=Vop.COPY, rows=4, cols=5, a=20, d=20), 0, 0),              # in place
        (Op.VEC, dict(vop=Vop.ADD, bcast=1, rows=6, cols=10, a=140, b=160, d=450), 0, 0),
    ]
    _run(dut, img, cmds)


@pytest.mark.parametrize("lanes", [1, S])
def test_vec_specials_exhaustive_pairs(lanes):
    """Every pair of special operands through ADD, ADD_RELU, RELU_GRAD, SCALE, RELU, COPY
    (1-cycle FP32 pipelines)."""
    dut = _unit("tiny", lanes=lanes)
    img = _image(2)
    sp = np.array(SPECIALS, np.uint32)
    n = len(sp)
    a = np.repeat(sp, n).reshape(n, n)
    b = np.tile(sp, n).reshape(n, n)
    set_matrix(img, 0, a)
    set_matrix(img, 64, b)
    cmds = [(Op.VEC, dict(vop=vop, rows=n, cols=n, a=0, b=64, d=200,
                          imm=_f32_bits(-0.0) if vop == Vop.SCALE else 0), 0, 0)
            for vop in (Vop.ADD, Vop.ADD_RELU, Vop.RELU_GRAD, Vop.RELU, Vop.COPY)]
    cmds += [(Op.VEC, dict(vop=Vop.SCALE, rows=n, cols=n, a=0, d=200, imm=int(s)), 0, 0)
             for s in sp[[0, 2, 4, 5, 7, 8]]]
    _run(dut, img, cmds)


@pytest.mark.parametrize("lanes", SIM_LANES)
def test_reduce(lanes):
    """BIAS_GRAD (acc 0/1; short rows that pause the adder loop; wider than max_cols: column
    chunks; cols not a multiple of the lanes) and SUMSQ (acc is ignored); default pipelines."""
    dut = _unit(lanes=lanes)
    img = _image(3)
    cmds = []
    for acc in (0, 1):
        for rows, cols in ((3, 6), (5, 13), (1, 1), (2, 20), (7, 4), (4, 8)):
            cmds.append((Op.REDUCE, dict(rop=Rop.BIAS_GRAD, acc=2, rows=rows, cols=cols,
                                         a=0, d=300 + 10 * len(cmds)), acc, 0))
        for rows, cols in ((3, 6), (1, 1), (5, 13), (9, 8)):
            cmds.append((Op.REDUCE, dict(rop=Rop.SUMSQ, acc=acc, rows=rows, cols=cols,
                                         a=40, d=300 + 10 * len(cmds)), acc, 0))
    _run(dut, img, cmds)


@pytest.mark.parametrize("lanes", [1, S])
def test_softmax(lanes):
    """SOFTMAX_XENT: cols not a multiple of S, rows not a multiple of S, rows shorter than
    lanes and up to max_classes; labels with junk high bits and a label >= C; NaN/Inf rows;
    in place (d == a, e == b); gscale with a loss scale; default pipelines. (One element per
    cycle at any vector_lanes: the readers' narrow mode.)"""
    dut = _unit(lanes=lanes)
    img = _image(4)
    rng = np.random.default_rng(4)
    z = (rng.standard_normal((12, 16)) * 5).astype(F32)
    z[2, 3] = np.nan
    z[3, 1] = np.inf
    z[4, :] = -np.inf
    z[5, 0] = 1e30
    z[6, :] = 0.0
    set_matrix(img, 0, z)                     # 12 x 16 -> lines 0..47
    labels = rng.integers(0, 7, size=12).astype(np.uint32) | \
        (rng.integers(0, 2**16, size=12).astype(np.uint32) << 16)
    labels[1] = (labels[1] & 0xFFFF0000) | 7    # = C for the 7-column shape: no onehot
    set_vector(img, 100, labels)
    set_vector(img, 110, labels)
    gs = _f32_bits(0.125 * 2**10)
    cmds = [
        (Op.SOFTMAX_XENT, dict(rows=5, cols=7, a=0, b=100, d=200, e=250), 0, gs),
        (Op.SOFTMAX_XENT, dict(rows=6, cols=10, a=120, b=100, d=260, e=290), 0, ONE),
        (Op.SOFTMAX_XENT, dict(rows=3, cols=2, a=20, b=100, d=300, e=310), 0, gs),
        (Op.SOFTMAX_XENT, dict(rows=12, cols=16, a=0, b=110, d=0, e=110), 0, ONE),  # in place
    ]
    _run(dut, img, cmds)


@pytest.mark.parametrize("lanes", SIM_LANES)
def test_mixed_program_tiny_pipelines(lanes):
    """A training-step-like sequence back to back on 1-cycle FP32 pipelines."""
    dut = _unit("tiny", lanes=lanes)
    img = _image(5)
    labels = np.arange(6, dtype=np.uint32) % 5
    set_vector(img, 200, labels)
    cmds = [
        (Op.VEC, dict(vop=Vop.ADD_RELU, bcast=1, rows=6, cols=5, a=0, b=60, d=100), 0, 0),
        (Op.SOFTMAX_XENT, dict(rows=6, cols=5, a=100, b=200, d=120, e=210), 0,
         _f32_bits(1 / 6)),
        (Op.VEC, dict(vop=Vop.RELU_GRAD, rows=6, cols=5, a=120, b=100, d=120), 0, 0),
        (Op.REDUCE, dict(rop=Rop.BIAS_GRAD, rows=6, cols=5, a=120, d=230), 0, 0),
        (Op.REDUCE, dict(rop=Rop.BIAS_GRAD, acc=1, rows=6, cols=5, a=120, d=230), 1, 0),
        (Op.REDUCE, dict(rop=Rop.SUMSQ, rows=6, cols=5, a=120, d=240), 0, 0),
        (Op.VEC, dict(vop=Vop.ZERO, rows=6, cols=5, d=120), 0, 0),
    ]
    _run(dut, img, cmds)


def _random_cmds(rng, S, n, *, bias_only=False):
    """``n`` random VEC / REDUCE commands on an image of LINES lines: every vop, bcast, rows
    1..6, cols 1..3S+3 (mostly not multiples of S or of the lanes), operands in disjoint
    regions or exactly in place, BIAS_GRAD with acc 0/1 (chunked when cols > 8)."""
    cmds = []
    for _ in range(n):
        rows, cols = rng.randint(1, 6), rng.randint(1, 3 * S + 3)
        a, b, d = rng.randrange(0, 60), rng.randrange(100, 160), rng.randrange(300, 360)
        if bias_only or rng.random() < 0.3:
            acc = rng.randint(0, 1)
            cmds.append((Op.REDUCE, dict(rop=Rop.BIAS_GRAD, acc=acc, rows=rows, cols=cols,
                                         a=a, d=d), acc, 0))
            continue
        vop = rng.choice(Vop.ALL)
        bcast = rng.randint(0, 1)
        place = rng.random()
        if place < 0.2 and vop != Vop.ZERO:
            d = a                               # in place on a
        elif place < 0.35 and vop in Vop.READS_B and not bcast:
            d = b                               # in place on b
        imm = _f32_bits(rng.choice([-0.375, 3.0, 1e-30, 2.0**100]))
        cmds.append((Op.VEC, dict(vop=vop, bcast=bcast, rows=rows, cols=cols, a=a, b=b, d=d,
                                  imm=imm), 0, 0))
    return cmds


@pytest.mark.parametrize("lanes", SIM_LANES)
def test_random_commands(lanes):
    """Random shapes, vops, bcast, in-place operands and bias gradients (1-cycle FP32
    pipelines, so the short-row pause of the bias gradient is 3 cycles)."""
    dut = _unit("tiny", lanes=lanes)
    img = _image(20 + lanes)
    _run(dut, img, _random_cmds(random.Random(lanes), S, 24))


def _random_program(dut, img, seed):
    """Run 16 random commands (``_random_cmds``) on ``dut`` against the golden model; return
    ``(op, decoded fields, acc, cycles)`` of each."""
    cmds = _random_cmds(random.Random(seed), S, 16)
    got = _run(dut, img, cmds)
    assert len(got) == len(cmds)
    return [(op, decode(encode(op, **fields))[1], acc, c)
            for (op, fields, acc, _), c in zip(cmds, got)]


@pytest.mark.parametrize("lat", [1, 2, 3], ids=["latency1", "spad_reg", "spad_out_reg"])
def test_read_register_fpga_shape(lat):
    """``CoreConfig.vector_read_reg`` (the FPGA build's readers, one lane): random commands
    (bias gradients in chunks, in-place operands), then softmax rows, against the golden model,
    every command's cycles exactly ``cycles()``, each one more than without the register (the
    softmax two: its e FIFO's read register). With ``spad_reg`` the ports' read data
    comes two cycles after a read (the scratchpad's registered clients, served so by
    ``LineMemory(latency=2)``): one cycle more again per command (per bias-gradient chunk);
    with ``spad_out_reg`` too three cycles after (``latency=3``), one more again."""
    extra = lat - 1
    dut = _unit("tiny", lanes=1, cfg=dataclasses.replace(CFG, vector_read_reg=True,
                                                         spad_reg=lat >= 2,
                                                         spad_out_reg=lat == 3,
                                                         optim_one_port=lat >= 2))
    assert dut.config.spad_latency == lat
    plain = _unit("tiny", lanes=1)
    plain._MustUse__used = True              # its formulas only (elaborated by other tests)
    assert (dut.read_reg, plain.read_reg) == (1 + extra, 0)
    img = _image(41)
    for op, f, acc, c in _random_program(dut, img, 41):
        chunks = (-(-f["cols"] // dut.bg_chunk) if op == Op.REDUCE and f["rop"] != Rop.SUMSQ
                  else 1)
        assert c == plain.cycles(op, f["rows"], f["cols"], vop=f.get("vop", 0),
                                 rop=f.get("rop", 0), acc=acc) + chunks * (1 + extra)
    z = (np.random.default_rng(41).standard_normal((4, 10)) * 3).astype(F32)
    set_matrix(img, 0, z)
    set_vector(img, 100, np.array([1, 9, 0, 4], np.uint32))
    sx = _run(dut, img, [(Op.SOFTMAX_XENT, dict(rows=4, cols=10, a=0, b=100, d=200, e=250), 0,
                          ONE)])
    # the softmax's input, e FIFO read and output FIFO head are registered too: three more
    # cycles of latency
    assert dut.softmax_latency == plain.softmax_latency + 3
    assert sx == [plain.cycles(Op.SOFTMAX_XENT, 4, 10) + 4 + extra]


@pytest.mark.parametrize("opt_shared", [False, True])
def test_shared_units_fpga_shape(opt_shared):
    """``CoreConfig.vector_shared_units`` (the FPGA build: one lane, read registers): the
    elementwise add and multiply and the bias-gradient add run on the softmax's units, behind
    an operand register. Random commands (bias gradients in chunks, in-place operands), then
    softmax rows, against the golden model, every command in exactly ``cycles()``: each
    datapath's latency one cycle more than without sharing; one multiplier and two adders
    fewer. With ``optim_shared_units`` (the optimizer's ports idle here) the softmax's divider
    is pooled too: its latency one cycle more again."""
    fpga = dataclasses.replace(CFG, vector_read_reg=True)
    dut = _unit("tiny", lanes=1, cfg=dataclasses.replace(fpga, vector_lanes=1,
                                                         vector_shared_units=True,
                                                         optim_shared_units=opt_shared))
    own = _unit("tiny", lanes=1, cfg=fpga)
    own._MustUse__used = True                # its formulas only (elaborated by other tests)
    img = _image(43)
    for op, f, acc, c in _random_program(dut, img, 43):
        assert c == dut.cycles(op, f["rows"], f["cols"], vop=f.get("vop", 0),
                               rop=f.get("rop", 0), acc=acc)
    assert (dut.ew_latency, dut.bg_latency, dut.softmax_latency) == (
        own.ew_latency + 1, own.bg_latency + 1, own.softmax_latency + 1 + opt_shared)
    z = (np.random.default_rng(43).standard_normal((5, 10)) * 3).astype(F32)
    set_matrix(img, 0, z)
    set_vector(img, 100, np.array([1, 9, 0, 4, 7], np.uint32))
    sx = _run(dut, img, [(Op.SOFTMAX_XENT, dict(rows=5, cols=10, a=0, b=100, d=200, e=250), 0,
                          ONE)])
    assert sx == [dut.cycles(Op.SOFTMAX_XENT, 5, 10)]
    shared, alone = fp32_unit_counts(dut), fp32_unit_counts(own)
    assert (alone["FP32Add"] - shared["FP32Add"], alone["FP32Mul"] - shared["FP32Mul"]) == (2, 1)


def test_serial_log_fpga_shape():
    """``CoreConfig.serial_log`` (the FPGA build's softmax loss on the serial log): softmax
    rows of 10 classes and of 3 (fewer than the log's 7-cycle interval; each row still takes
    ``lanes = 8`` slots) against the golden model (gradients and losses), every command in
    exactly ``cycles()``: the softmax's latency ``LOG_SERIAL_LATENCY + 2`` more."""
    from hdl.fp32.log_serial import LOG_SERIAL_LATENCY
    fpga = dataclasses.replace(CFG, vector_read_reg=True, vector_lanes=1,
                               vector_shared_units=True, optim_shared_units=True)
    dut = _unit("tiny", lanes=1, cfg=dataclasses.replace(fpga, serial_log=True))
    piped = _unit("tiny", lanes=1, cfg=fpga)
    piped._MustUse__used = True              # its formulas only (elaborated by other tests)
    assert dut.softmax_latency == piped.softmax_latency + LOG_SERIAL_LATENCY + 2
    img = _image(47)
    rng = np.random.default_rng(47)
    set_matrix(img, 0, (rng.standard_normal((6, 10)) * 3).astype(F32))
    set_vector(img, 100, np.array([1, 9, 0, 4, 7, 2], np.uint32))
    set_matrix(img, 300, (rng.standard_normal((9, 3)) * 3).astype(F32))
    set_vector(img, 330, np.array([0, 1, 2, 2, 1, 0, 0, 2, 1], np.uint32))
    sx = _run(dut, img, [
        (Op.SOFTMAX_XENT, dict(rows=6, cols=10, a=0, b=100, d=200, e=250), 0, ONE),
        (Op.SOFTMAX_XENT, dict(rows=9, cols=3, a=300, b=330, d=340, e=380), 0, ONE)])
    assert sx == [dut.cycles(Op.SOFTMAX_XENT, 6, 10), dut.cycles(Op.SOFTMAX_XENT, 9, 3)]


@pytest.mark.parametrize("lanes", [2, 8])
def test_random_commands_s8(lanes):
    """S = 8 (the default line) at 8 and 2 lanes: random commands on default pipelines."""
    dut = _unit(lanes=lanes, cfg=CFG8)
    img = _image(30 + lanes, S=8)
    _run(dut, img, _random_cmds(random.Random(100 + lanes), 8, 16))


@pytest.mark.parametrize("lanes", SIM_LANES)
def test_loop_iterations(lanes):
    """A loop body as the sequencer runs it (hdl/core/sequencer.py): every iteration with the
    loop offset added to the flagged address fields (sim.model.core.effective_fields) and
    ``acc = AFTER_FIRST`` resolved per iteration: per-micro-batch bias add + ReLU, ReLU
    gradient and a bias gradient accumulated over the iterations into one vector."""
    dut = _unit(lanes=lanes)
    img = _image(9)
    count, stride = 3, 12          # micro-batches of 4 x 7 records, 12 lines apart
    body = [
        (Op.VEC, dict(vop=Vop.ADD_RELU, bcast=1, loop=0b101, rows=4, cols=7, a=0, b=100,
                      d=200)),                                    # a, d move; b (bias) stays
        (Op.VEC, dict(vop=Vop.RELU_GRAD, loop=0b111, rows=4, cols=7, a=40, b=200, d=40)),
        (Op.REDUCE, dict(rop=Rop.BIAS_GRAD, acc=Acc.AFTER_FIRST, loop=0b01, rows=4, cols=7,
                         a=40, d=120)),                           # a moves; d accumulates
    ]
    cmds = []
    for it in range(count):
        for op, f in body:
            e = effective_fields(op, f, it * stride)
            acc = int(resolve_acc(f["acc"], it)) if op == Op.REDUCE else 0
            cmds.append((op, e, acc, 0))
    _run(dut, img, cmds)


def _beats(img, base, rows, cols, stride, zero, L, narrow):
    """The beats a line reader emits: (words, eol, last); words past the row's end are the
    line's words (narrow: one word)."""
    S = img.shape[1]
    step = 1 if narrow else L
    out = []
    for r in range(rows):
        for c in range(0, cols, step):
            line = base + r * stride + c // S
            words = tuple(0 if zero else int(img[line, (c + j) % S]) for j in range(step))
            eol = c + step >= cols
            out.append((words, int(eol), int(eol and r == rows - 1)))
    return out


@pytest.mark.parametrize("L, narrow", [(1, 0), (2, 0), (2, 1), (S, 0), (S, 1)])
@pytest.mark.parametrize("rows, cols, stride, zero", [(3, 6, 2, 0), (4, 9, 3, 0), (5, 3, 0, 0),
                                                      (2, 5, 7, 0), (2, 6, 2, 1)])
def test_line_reader_backpressure(rows, cols, stride, zero, L, narrow):
    """The line reader alone under random backpressure (stalls at any beat, so the held
    r_data is exercised mid-line), wide (L elements per beat) and narrow: every beat, eol and
    last in order; no read while stalled or in ZERO mode."""
    rd = _LineReader(line_bits=CFG.line_bits, S=S, L=L)
    img = _image(7)
    mem = LineMemory(img, {"r": rd})
    base = 10
    expect = _beats(img, base, rows, cols, stride, zero, L, narrow)
    got = []
    rng = random.Random(rows * 100 + cols + 1000 * L + 7 * narrow)

    async def tb(ctx):
        for _ in range(2):              # twice: the reader restarts cleanly
            ctx.set(rd.base, base)
            ctx.set(rd.rows, rows)
            ctx.set(rd.cols, cols)
            ctx.set(rd.stride, stride)
            ctx.set(rd.zero, zero)
            ctx.set(rd.narrow, narrow)
            ctx.set(rd.start, 1)
            await ctx.tick()
            ctx.set(rd.start, 0)
            for words, _, _ in expect:
                p = await stream_get(ctx, rd.o, rng=rng, stall_prob=0.5)
                got.append((tuple(int(p.x[j]) for j in range(len(words))), int(p.eol),
                            int(p.last)))
            for _ in range(5):
                await ctx.tick()
                assert not ctx.get(rd.o.valid)

    run_sim(rd, tb, processes=[mem.process])
    assert got == expect * 2
    assert not mem.errors
    if zero:
        assert not mem.reads["r"]


def test_line_reader_widest_row():
    """Edge case: rows of the largest ``cols`` the ISA's field holds (``2**DIM_BITS - 1``),
    wide beats, ZERO mode (a row spans more lines than the test image; the walk is the same):
    each row ends exactly at its last beat (the column counter plus a beat must not wrap),
    then the next row, then ``last``."""
    from hdl.core.isa import DIM_BITS
    rows, cols, L = 2, (1 << DIM_BITS) - 1, S
    rd = _LineReader(line_bits=CFG.line_bits, S=S, L=L)
    img = _image(7)
    mem = LineMemory(img, {"r": rd})
    expect = _beats(img, 3, rows, cols, 0, 1, L, 0)
    got = []

    async def tb(ctx):
        for name, v in (("base", 3), ("rows", rows), ("cols", cols), ("stride", 0),
                        ("zero", 1), ("narrow", 0), ("start", 1)):
            ctx.set(getattr(rd, name), v)
        await ctx.tick()
        ctx.set(rd.start, 0)
        for _ in expect:
            p = await stream_get(ctx, rd.o)
            got.append((tuple(int(p.x[j]) for j in range(L)), int(p.eol), int(p.last)))
        for _ in range(3):
            await ctx.tick()
            assert not ctx.get(rd.o.valid)

    run_sim(rd, tb, processes=[mem.process])
    assert got == expect and len(got) == rows * -(-cols // L)
    assert not mem.errors and not mem.reads["r"]


@pytest.mark.parametrize("L, narrow", [(1, 0), (2, 0), (2, 1), (S, 0), (S, 1)])
@pytest.mark.parametrize("rows, cols", [(3, 6), (2, 9), (4, 1), (1, 4), (2, 8)])
def test_line_writer_gaps(rows, cols, L, narrow):
    """The line writer alone, beats arriving with random gaps: the matrix lands in place, no
    padding word and nothing outside it is written, one write per line, ``fin`` after the
    last write and ``eol`` on each row's last beat."""
    wr = _LineWriter(line_bits=CFG.line_bits, S=S, L=L)
    img = _image(11)
    before = img.copy()
    mem = LineMemory(img, {"w": wr})
    base, step = 20, 1 if narrow else L
    rng = np.random.default_rng(rows * 10 + cols + 100 * L + narrow)
    vals = rng.integers(0, 2**32, size=(rows, cols + L), dtype=np.uint32)
    want = before.copy()
    set_matrix(want, base, vals[:, :cols])
    lines_written, eols, fin = [], [], []
    pick = random.Random(cols)

    async def tb(ctx):
        ctx.set(wr.base, base)
        ctx.set(wr.rows, rows)
        ctx.set(wr.cols, cols)
        ctx.set(wr.narrow, narrow)
        ctx.set(wr.start, 1)
        await ctx.tick()
        ctx.set(wr.start, 0)
        for r in range(rows):
            for c in range(0, cols, step):
                while pick.random() < 0.4:
                    await ctx.tick()
                    assert not ctx.get(wr.w_en)
                for j in range(L):      # words past the row's end carry junk
                    ctx.set(wr.i.payload[j], int(vals[r, c + j]) if j < step else 0xDEAD)
                ctx.set(wr.i.valid, 1)
                eols.append(ctx.get(wr.eol))
                if ctx.get(wr.w_en):
                    lines_written.append(ctx.get(wr.w_addr))
                await ctx.tick()
                ctx.set(wr.i.valid, 0)
        for _ in range(3):
            fin.append(ctx.get(wr.fin))
            await ctx.tick()

    run_sim(wr, tb, processes=[mem.process])
    assert not mem.errors
    assert np.array_equal(img, want)
    L_row = -(-cols // S)
    assert lines_written == list(range(base, base + rows * L_row))
    assert eols == [int(c + step >= cols) for _ in range(rows) for c in range(0, cols, step)]
    assert fin == [1, 1, 1]


def test_softmax_too_many_classes_is_contained():
    """cols > max_classes is for the sequencer to reject (the model raises); the unit still
    finishes and writes nothing outside the d and e ranges."""
    dut = _unit("tiny")
    img = _image(8)
    before = img.copy()
    mem = LineMemory(img, {"a": dut.a, "b": dut.b, "d": dut.d, "e": dut.e})
    f = dict(rows=3, cols=GC.max_classes + 4, a=0, b=100, d=200, e=300)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.cmd.payload.as_value(), _cmd_bits(Op.SOFTMAX_XENT, f, 0, ONE))
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick().until(dut.cmd.ready)
        ctx.set(dut.cmd.valid, 0)
        for n in range(2000):
            if ctx.get(dut.done):
                seen["done"] = n
                break
            await ctx.tick()

    _sim(dut).run(tb, processes=[mem.process])
    assert "done" in seen and not mem.errors
    rng = {r.port: r for r in operand_ranges(Op.SOFTMAX_XENT, f, S)}
    assert mem.writes["d"] <= set(range(200, 200 + rng["d"].lines))
    assert mem.writes["e"] == {300}
    outside = np.ones(LINES, bool)
    outside[200:200 + rng["d"].lines] = False
    outside[300] = False
    assert np.array_equal(img[outside], before[outside])


class _WithReset(Elaboratable):
    def __init__(self, dut):
        self.dut, self.rst = dut, Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = ResetInserter(self.rst)(self.dut)
        return m


@functools.cache
def _reset_top(lanes) -> _WithReset:
    """A unit (its own, not :func:`_unit`'s) under a reset the testbench drives."""
    return _WithReset(_unit.__wrapped__(lanes=lanes))


@pytest.mark.parametrize("lanes", [2, S])
@pytest.mark.parametrize("which", ["softmax", "bias_acc"])
def test_reset_in_the_middle(which, lanes):
    """Reset while a command is half done (reads, blocks and writes in flight); then the unit
    is idle and the next commands run correctly."""
    top = _reset_top(lanes)
    dut = top.dut
    img = _image(6)
    set_vector(img, 100, np.arange(8, dtype=np.uint32) % 7)
    first = (Op.SOFTMAX_XENT, dict(rows=8, cols=7, a=0, b=100, d=200, e=250), 0, ONE) \
        if which == "softmax" else \
        (Op.REDUCE, dict(rop=Rop.BIAS_GRAD, acc=1, rows=6, cols=20, a=0, d=200), 1, 0)
    cmds = [first, (Op.VEC, dict(vop=Vop.ADD, rows=3, cols=6, a=0, b=40, d=300), 0, 0),
            first]
    snap = {}

    async def mid(ctx, k):
        if k != 0:
            return False
        for _ in range(40):
            await ctx.tick()
        assert ctx.get(dut.busy)
        ctx.set(top.rst, 1)
        await ctx.tick()
        ctx.set(top.rst, 0)
        assert not ctx.get(dut.busy) and ctx.get(dut.cmd.ready)
        snap["ok"] = True
        return True

    # The aborted command is not compared (``mid`` returns True); it left a partial
    # destination, and each later command's model starts from the image as it then is.
    _run(dut, img, cmds, top=top, mid=mid)
    assert snap["ok"]


def test_bad_parameters():
    with pytest.raises(TypeError, match=r"VectorUnit\.config must be a CoreConfig"):
        VectorUnit(config=GC)
    with pytest.raises(TypeError, match=r"VectorUnit\.grad_config"):
        VectorUnit(config=CFG, grad_config=CFG)
    with pytest.raises(TypeError, match=r"VectorUnit\.fp32_config"):
        VectorUnit(config=CFG, fp32_config=1)
    with pytest.raises(TypeError, match=r"VectorUnit\.divsqrt_config"):
        VectorUnit(config=CFG, divsqrt_config=LC)
    with pytest.raises(TypeError, match=r"VectorUnit\.log_config"):
        VectorUnit(config=CFG, log_config=DC)
    with pytest.raises(ValueError, match=r"max_cols \(2\).*S = 4"):
        VectorUnit(config=CFG, grad_config=GradConfig(max_cols=2))
    with pytest.raises(ValueError, match=r"lanes \(4\).*adder latency \(7\)"):
        VectorUnit(config=CFG, grad_config=GradConfig(lanes=4))


def test_vector_lanes_config():
    """CoreConfig.vector_lanes: a divisor of size, 0 (the default) for size; presets and
    dataclasses.replace keep it resolved against the current size."""
    assert CoreConfig().vector_lanes == 0 and CoreConfig().vec_lanes == 8
    assert CFG.vec_lanes == 4                                       # tiny: S = 4
    assert dataclasses.replace(CoreConfig(), size=4).vec_lanes == 4
    assert CoreConfig(vector_lanes=2).vec_lanes == 2
    for bad in (3, 16, 5):
        with pytest.raises(ValueError, match=r"CoreConfig\.vector_lanes must divide size = 8"):
            CoreConfig(vector_lanes=bad)
    with pytest.raises(ValueError, match=r"CoreConfig\.vector_lanes must be >= 0"):
        CoreConfig(vector_lanes=-1)
    with pytest.raises(TypeError, match=r"CoreConfig\.vector_lanes must be an int"):
        CoreConfig(vector_lanes=2.0)
    with pytest.raises(ValueError, match=r"vector_lanes must divide size = 4"):
        CoreConfig(size=4, vector_lanes=8)


@pytest.mark.parametrize("lanes", LANES)
def test_published_timing(lanes):
    """The formulas (the simulations above assert every command's count against them)."""
    dut = _unit(lanes=lanes)
    dut._MustUse__used = True                # built for its attributes only
    t = dut.ew_latency
    assert dut.lanes == lanes
    assert (dut.vec_overhead, dut.copy_overhead) == (t + 5, 3)
    assert dut.cycles(Op.VEC, 32, 64) == 32 * 64 // lanes + t + 5
    assert dut.cycles(Op.VEC, 2, 3, vop=Vop.ZERO) == 2 * -(-3 // lanes) + 3
    assert dut.cycles(Op.VEC, 32, 10) == 32 * -(-10 // lanes) + t + 5
    assert dut.cycles(Op.REDUCE, 32, 64, rop=Rop.SUMSQ) == 32 * 64 + dut.sumsq_overhead
    assert dut.cycles(Op.SOFTMAX_XENT, 32, 10) == 320 + dut.softmax_latency + 22
    assert dut.cycles(Op.SOFTMAX_XENT, 3, 2) == 3 * 8 + dut.softmax_latency + 6
    assert dut.bg_chunk == 8
    one = dut.cycles(Op.REDUCE, 2, 8)
    g = 8 // lanes                           # beats of a chunk row
    assert one == 2 * g + max(0, dut.bg_row_min - g) + g + dut.bg_overhead
    assert dut.cycles(Op.REDUCE, 2, 16) == 2 * one
    assert dut.cycles(Op.REDUCE, 2, 16, acc=1) == 2 * one + 2 * (t + 2)
    with pytest.raises(ValueError, match="op must be"):
        dut.cycles(Op.MATMUL, 1, 1)
