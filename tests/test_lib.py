"""Fast tier of the shared helpers in :mod:`hdl.lib`: ``LaneSum`` (lanes as an int or from a
config), the FP32 bit-pattern tests, ``StreamRegister`` and ``StreamSkid``, the rotated lane memories with
:class:`~hdl.lib.rotate.ColumnRows`, and that ``hdl.lib`` imports no block
package."""
import subprocess
import sys

import numpy as np
import pytest
from amaranth.hdl import Module, Signal

from hdl.fp32.config import FP32Config
from hdl.grad.config import GradConfig
from hdl.lib.fp32bits import gt_zero, is_inf_or_nan, is_nan, order_key
from hdl.lib.lanesum import LaneSum
from hdl.lib.streamreg import StreamRegister, StreamSkid
from sim.model.optim import f32_bits, lane_sum
from sim.tb.amaranth_tb import run_sim, stream_get, stream_put

F32 = np.float32


def test_lib_imports_no_block_package():
    code = ("import sys, hdl.lib.dataflow, hdl.lib.lanesum, hdl.lib.fp32bits, hdl.lib.mustuse, "
            "hdl.lib.memport; "
            "print([m for m in sys.modules if m.startswith(('hdl.grad', 'hdl.optim', 'hdl.core', "
            "'hdl.array', 'hdl.bfp'))])")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("kw, exc, match", [
    ({"lanes": 3}, ValueError, r"LaneSum\.lanes must be a power of two, not 3"),
    ({"lanes": 128}, ValueError, r"LaneSum\.lanes must be <= 64"),
    ({"lanes": 8.0}, TypeError, r"LaneSum\.lanes must be an int"),
    ({"lanes": 4, "fp32_config": FP32Config(add_stages=5)}, ValueError,
     r"LaneSum\.lanes \(4\) must exceed the FP32 adder latency"),
    ({"config": GradConfig(lanes=4), "fp32_config": FP32Config(add_stages=5)}, ValueError,
     r"GradConfig\.lanes \(4\) must exceed the FP32 adder latency"),
    ({"lanes": 8, "config": GradConfig()}, TypeError, r"lanes or config, not both"),
])
def test_lanesum_rejects(kw, exc, match):
    with pytest.raises(exc, match=match):
        LaneSum(**kw)


def test_lanesum_lanes_from_int_or_config():
    fc = FP32Config.preset("tiny")
    a = LaneSum(lanes=16, square=True, fp32_config=fc)
    b = LaneSum(config=GradConfig(lanes=16), square=True, fp32_config=fc)
    c = LaneSum(fp32_config=fc)
    assert (a.lanes, b.lanes, c.lanes) == (16, 16, 8)
    assert a.latency == b.latency
    for x in (a, b, c):
        x._MustUse__used = True


@pytest.mark.parametrize("square", [False, True])
def test_lanesum_order(square):
    """Two reductions back to back, bit-exact with ``sim.model.optim.lane_sum``."""
    import random
    fc = FP32Config.preset("tiny")
    dut = LaneSum(lanes=4, square=square, fp32_config=fc)
    rng = np.random.default_rng(7)
    rows = [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(F32)
            for n in (13, 3)]
    got = []
    prng = random.Random(8)

    async def tb(ctx):
        for x in rows:
            for k, v in enumerate(x):
                await stream_put(ctx, dut.i, {"x": f32_bits(v), "last": int(k == len(x) - 1)},
                                 rng=prng, idle_prob=0.3)
            got.append(await stream_get(ctx, dut.o, raw=True))

    run_sim(dut, tb)
    with np.errstate(all="ignore"):
        want = [f32_bits(lane_sum(x * x if square else x, 4)) for x in rows]
    assert got == want


@pytest.mark.parametrize("bits, nan, nonfinite, pos", [
    (0x00000000, 0, 0, 0), (0x80000000, 0, 0, 0), (0x00000001, 0, 0, 1),
    (0x3F800000, 0, 0, 1), (0xBF800000, 0, 0, 0), (0x7F800000, 0, 1, 1),
    (0xFF800000, 0, 1, 0), (0x7FC00000, 1, 1, 0), (0xFFC00001, 1, 1, 0),
])
def test_fp32bits(bits, nan, nonfinite, pos):
    x = Signal(32)
    outs = [Signal(name=n) for n in ("nan", "nonfinite", "pos")]
    key = Signal(32)
    m = Module()
    m.d.comb += [outs[0].eq(is_nan(x)), outs[1].eq(is_inf_or_nan(x)), outs[2].eq(gt_zero(x)),
                 key.eq(order_key(x))]
    res = {}

    async def tb(ctx):
        ctx.set(x, bits)
        res["flags"] = [ctx.get(o) for o in outs]
        keys = []
        for v in (0xFF800000, 0xBF800000, 0x80000001, 0x80000000, 0x00000000, 0x00000001,
                  0x3F800000, 0x7F800000):           # -Inf < -1 < -min < -0 < +0 < ... < +Inf
            ctx.set(x, v)
            keys.append(ctx.get(key))
        res["keys"] = keys

    run_sim(m, tb)
    assert res["flags"] == [nan, nonfinite, pos]
    assert res["keys"] == sorted(res["keys"]) and len(set(res["keys"])) == len(res["keys"])


@pytest.mark.parametrize("stage", [StreamRegister, StreamSkid])
@pytest.mark.parametrize("idle, stall", [(0.0, 0.0), (0.3, 0.5), (0.6, 0.2), (0.0, 0.7)])
def test_stream_stage_order_rules_and_rate(stage, idle, stall):
    """300 words through the register slice or the skid buffer with random idle cycles and
    backpressure: every word once, in order; the stream rules hold on ``o`` every cycle (a
    word offered and not taken is offered again, unchanged); without idle or backpressure one
    word per cycle, each leaving the published ``latency`` cycles after it entered (a stage
    that halved the rate, or added a cycle, fails)."""
    import random
    dut = stage(16)
    words = list(np.random.default_rng(3).integers(0, 1 << 16, 300))
    got, offered, ended, sent = [], [], [], []    # offered / sent: a transfer on o / i
    prng = random.Random(5)

    async def producer(ctx):
        for w in words:
            await stream_put(ctx, dut.i, int(w), rng=prng, idle_prob=idle)

    async def consumer(ctx):
        for _ in words:
            got.append(await stream_get(ctx, dut.o, rng=prng, stall_prob=stall, raw=True))
        ended.append(ctx.get(dut.o.valid))

    async def rules(ctx):
        held = None
        async for _, _, valid, ready, payload, iv, ir in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload, dut.i.valid, dut.i.ready):
            if held is not None:
                assert valid and payload == held, "o dropped or changed an offered word"
            held = payload if valid and not ready else None
            offered.append(bool(valid and ready))
            sent.append(bool(iv and ir))

    run_sim(dut, producer, consumer, processes=[rules])
    assert got == [int(w) for w in words]
    assert ended == [0]
    taken = [t for t, x in enumerate(offered) if x]
    entered = [t for t, x in enumerate(sent) if x]
    assert len(taken) == len(entered) == len(words)
    if not idle and not stall:      # one word per cycle, each latency cycles after it entered
        assert taken == list(range(taken[0], taken[0] + len(words)))
        assert taken == [t + stage.latency for t in entered]


@pytest.mark.parametrize("stage", [StreamRegister, StreamSkid])
def test_stream_stage_rejects_non_shape(stage):
    with pytest.raises(TypeError):
        stage("sixteen")


def test_stream_skid_ready_is_a_register():
    """Toggling ``o.ready`` inside a cycle never moves ``i.ready`` (a direct connection, or a
    buffer whose ``ready`` were ``~full | o.ready``, would); a refused word is kept and offered
    first, before the next one is taken."""
    dut = StreamSkid(8)
    log = {}

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 0x11)
        for r in (0, 1, 0):
            ctx.set(dut.o.ready, r)
            assert ctx.get(dut.i.ready) == 1
        await ctx.tick()                    # 0x11 refused: into the buffer
        ctx.set(dut.i.payload, 0x22)
        readies = []
        for r in (1, 0, 1):
            ctx.set(dut.o.ready, r)
            readies.append(ctx.get(dut.i.ready))
            assert ctx.get(dut.o.payload) == 0x11 and ctx.get(dut.o.valid) == 1
        log["held"] = readies
        await ctx.tick()                    # 0x11 leaves; 0x22 was not taken
        ctx.set(dut.o.ready, 1)
        log["next"] = (ctx.get(dut.o.payload), ctx.get(dut.i.ready))

    run_sim(dut, tb)
    assert log["held"] == [0, 0, 0]
    assert log["next"] == (0x22, 1)


def test_units_outside_a_datapath_are_checked():
    """A component's ``units=`` (FP32 units reached through ``UnitPort`` members): a bad kind
    or type names the parameter, a port that no operation takes is refused at elaboration,
    and ``pool_unit``'s unit serves one port per cycle with every port seeing the result."""
    from amaranth.hdl import Fragment

    from hdl.grad.biasgrad import BiasGrad
    from hdl.grad.elementwise import Elementwise
    from hdl.grad.softmax import SoftmaxXent
    from hdl.lib.dataflow import UnitPort
    with pytest.raises(ValueError, match="Elementwise.units"):
        Elementwise(units=("add", "log"))
    with pytest.raises(TypeError, match="BiasGrad.units"):
        BiasGrad(units="add")
    with pytest.raises(ValueError, match="UnitPort.kind"):
        UnitPort("fma")
    with pytest.raises(ValueError, match=r"SoftmaxXent.units: 3 'add' units, but the "
                                         r"datapath has 2"):
        SoftmaxXent(units=("add",) * 3)                # its OUT dataflow has two adds
    ew = Elementwise(units=("add", "mul"))
    assert isinstance(ew.signature.members["unit_mul0"].signature, UnitPort)
    Fragment.get(ew, None)                             # both ports taken by its operations


@pytest.mark.parametrize("n", [2, 4, 8])
def test_rotated_block_memories_column_rows(n):
    """Rows written into both banks of :func:`rotated_block_memories`, then columns read as a
    column counter steps (wrapping) and restarts at random, with the read rows from
    :class:`ColumnRows` registers: every read, rotated back, is the column of the numpy
    block, and equals the read with the rows from logic (``r_rows=None``). A row register
    stepped the wrong way, or not restarted with the counter, reads another row."""
    from amaranth.hdl import Cat
    from hdl.lib.rotate import ColumnRows, rotate_lanes, rotated_block_memories
    W = 8
    m = Module()
    w_lanes = [Signal(W, name=f"w{k}") for k in range(n)]
    w_row, w_bank, w_en = Signal(range(n)), Signal(), Signal()
    col, bank = Signal(range(n)), Signal()
    step, restart = Signal(), Signal()
    rows = ColumnRows(n, "rows")
    outs = []
    for tag, r_rows in (("reg", rows), ("logic", None)):
        ports, read = rotated_block_memories(m, name=f"{tag}_lane", width=W, w_lanes=w_lanes,
                                             w_row=w_row, w_bank=w_bank, r_col=col,
                                             r_bank=bank, r_rows=r_rows)
        m.d.comb += [p.en.eq(w_en) for p in ports]
        out = Signal(n * W, name=f"{tag}_col")
        m.d.comb += out.eq(rotate_lanes([read.word_select(k, W) for k in range(n)], col,
                                        left=False))
        outs.append(out)
    with m.If(restart):
        m.d.sync += [col.eq(0)] + rows.restart()
    with m.Elif(step):
        m.d.sync += [col.eq(col + 1)] + rows.step()
    rng = np.random.default_rng(n)
    block = rng.integers(0, 1 << W, (2, n, n))
    checked = []

    async def bench(ctx):
        for b in range(2):
            for r in range(n):
                ctx.set(w_en, 1)
                ctx.set(w_bank, b)
                ctx.set(w_row, r)
                for k in range(n):
                    ctx.set(w_lanes[k], int(block[b, r, k]))
                await ctx.tick()
        ctx.set(w_en, 0)
        c = 0
        for _ in range(12 * n):
            b = int(rng.integers(2))
            ctx.set(bank, b)
            got_reg, got_logic = ctx.get(outs[0]), ctx.get(outs[1])
            want = sum(int(block[b, j, c]) << (W * j) for j in range(n))
            assert got_reg == want and got_logic == want, (c, b)
            checked.append(c)
            act = rng.random()
            ctx.set(restart, act < 0.15)
            ctx.set(step, act >= 0.15 and act < 0.85)
            await ctx.tick()
            c = 0 if act < 0.15 else (c + 1) % n if act < 0.85 else c
        assert set(checked) == set(range(n))

    run_sim(m, bench, max_cycles=1000)


def test_column_rows_rejects():
    from hdl.lib.rotate import ColumnRows, rotated_block_memories
    with pytest.raises(ValueError, match=r"ColumnRows n must be a power of two, not 3"):
        ColumnRows(3, "r")
    with pytest.raises(ValueError, match=r"r_rows must have 4 rows \(one per lane\), not 2"):
        m = Module()
        m._MustUse__silence = True
        rotated_block_memories(m, name="x", width=4,
                               w_lanes=[Signal(4) for _ in range(4)], w_row=Signal(2),
                               w_bank=Signal(), r_col=Signal(2), r_bank=Signal(),
                               r_rows=ColumnRows(2, "r"))
