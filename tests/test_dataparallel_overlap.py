"""Per-layer all-reduce (Compiled.dataparallel_program(per_layer=True), DataParallel(per_layer=
True)) and the split gradient placement (compile_mlp(split_grads=True)): ALLREDUCE positions,
engine == host-mediated bit for bit, the sum-order effect of cutting the region, the poison,
the bank analysis (Compiled.allreduce_overlap) and the errors. docs/multicore.md, "Per-layer
all-reduce"."""
import dataclasses

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import Op, Status, check_program_for, decode, encode, operand_ranges
from sim.host.compiler import MLP, CompileError, allreduce_seg_lines, compile_mlp
from sim.host.dataparallel import DataParallel
from sim.host.optim import SGD, Adam
from sim.model.collective import sum_order
from sim.model.multicore import POISON_BITS, MultiCoreModel
from sim.tb.core_cases import mlp_params

LAYERS = (16, 12, 4)        # grads: layer 0 51 lines, layer 1 13 lines (S = 4)
BFP_LAYERS = (15, 15, 4)    # layer blocks of 64 and 16 lines: whole 16-word groups at S = 4
DIGITS = MLP(layers=(64, 64, 10), batch=8, mean_rows=32, optimizer=Adam(lr=3e-3),
             one_pass=False)                     # one of 4 ranks' step of the digits MLP


def _cfg(ranks, preset="tiny", **kw):
    return dataclasses.replace(CoreConfig.preset(preset), ranks=ranks, **kw)


def _params(seed, layers=LAYERS):
    return mlp_params(seed, layers)


def _touches(op, f, S, a, n):
    return [r for r in operand_ranges(op, f, S) if r.start < a + n and a < r.start + r.lines]


@pytest.mark.parametrize("desc,split", [
    (MLP(layers=LAYERS, batch=8, one_pass=False), False),
    (MLP(layers=LAYERS, batch=8, one_pass=False), True),
    (MLP(layers=(16, 12, 8, 4), batch=8, one_pass=False, schedule="overlap"), True),
    (MLP(layers=(16, 12, 8, 4), batch=8, one_pass=False, checkpoint={1}), False),
    (MLP(layers=(16, 4), batch=8, one_pass=False), True)])
def test_per_layer_positions(desc, split):
    """One ALLREDUCE per layer over exactly that layer's dW, db lines, right after the last
    instruction writing them (no later instruction before it touches them; the one before it
    writes them), segments allreduce_seg_lines of the block, poison only on the last; the rest
    of the program is the step's, unchanged, and passes the program check."""
    cfg = _cfg(4)
    c = compile_mlp(desc, cfg, split_grads=split)
    assert c.split_grads == (split and desc.L >= 2)
    prog = c.dataparallel_program(per_layer=True, timeout=300)
    assert check_program_for(prog, cfg) == (Status.OK, 0)
    dec = [decode(w) for w in prog]
    ars = [pc for pc, (op, _) in enumerate(dec) if op == Op.ALLREDUCE]
    assert [w for pc, w in enumerate(prog) if pc not in ars] == c.program
    assert len(ars) == desc.L and [dec[pc][1]["poison"] for pc in ars] == [0] * (desc.L - 1) + [1]
    g0, P = c.regions["grads"]
    b, S = c._b, cfg.size
    got = {}
    for pc in ars:
        f = dec[pc][1]
        a, n = f["a"], f["lines"]
        assert f["seg"] == allreduce_seg_lines(n, 4, S) and f["timeout"] == 300
        # the layer whose block this is: dW_l at off_W[l], db_l right after, up to off_W[l+1]
        l = b.off_W.index(a - g0)
        assert n == (b.off_W[l + 1] if l + 1 < desc.L else P) - b.off_W[l]
        got[l] = pc
        w_op, w_f = dec[pc - 1]
        assert any("w" in r.kind for r in _touches(w_op, w_f, S, a, n)), pc
        for op, f2 in dec[pc + 1:]:
            if op == Op.OPT:
                break
            assert not _touches(op, f2, S, a, n)
    assert sorted(got) == list(range(desc.L))
    assert [got[l] for l in range(desc.L)] == sorted(got.values(), reverse=True)
    # the single ALLREDUCE is still the default
    one = c.dataparallel_program()
    assert [decode(w)[0] for w in one].count(Op.ALLREDUCE) == 1


def _runs(ranks, compression, layers, kinds, steps=4, seed=0):
    """Steps of several DataParallel flavours on the same batches; every core's regions and
    the step outputs."""
    rng, W, b = _params(seed + ranks, layers)
    desc = MLP(layers=layers, batch=4 * ranks, optimizer=Adam(lr=0.01))
    dps = {k: DataParallel(desc, CoreConfig.preset("tiny"), ranks, compression=compression,
                           width=4, **kw) for k, kw in kinds.items()}
    for dp in dps.values():
        dp.init(W, b)
    hist = []
    for t in range(1, steps + 1):
        x, y = rng.random((4 * ranks, layers[0])).astype(np.float32), rng.integers(0, 4, 4 * ranks)
        x[:, :2] *= 100                     # a wide range of gradients: the order matters
        outs = {k: dp.step(x, y, t) for k, dp in dps.items()}
        reads = {k: [dp.read(r) for r in range(ranks)] for k, dp in dps.items()}
        hist.append((outs, reads))
    return dps, hist


def _same(hist, k1, k2):
    for outs, reads in hist:
        o1, o2 = outs[k1], outs[k2]
        if not (np.array_equal(o1["losses"].view(np.uint32), o2["losses"].view(np.uint32))
                and o1["status"] == o2["status"]):
            return False
        for a, c in zip(reads[k1], reads[k2]):
            assert a.keys() == c.keys() == {"params", "grads", "m", "v"}
            if not all(np.array_equal(a[k], c[k]) for k in a):
                return False
    return True


@pytest.mark.parametrize("ranks,compression,layers", [
    (2, "none", LAYERS), (4, "none", LAYERS), (2, "bfp", BFP_LAYERS), (4, "bfp", BFP_LAYERS),
    # BFP with layer blocks that are not whole groups (204 and 52 words): the engine pads
    # each segment's last group on the link
    (2, "bfp", LAYERS), (4, "bfp", LAYERS),
    # top-k with error feedback, one residual per layer block (top-k segments start at each
    # block's first word), the blocks sharing the message buffer
    (2, "topk", LAYERS), (4, "topk", LAYERS)])
def test_per_layer_engine_equals_host(ranks, compression, layers):
    """The per-layer program on MultiCoreModel == the host doing the same per-layer ring
    all-reduces between a backward and an optimizer program, bit for bit (losses, status,
    every core's params, grads, m, v) over 4 steps; one all-reduce per layer per step."""
    kw = {}
    if compression == "topk":                    # the engine's top-k
        kw = {"topk": dataclasses.replace(CoreConfig.preset("tiny"),
                                          ranks=ranks).collective.topk}
    dps, hist = _runs(ranks, compression, layers,
                      {"eng": dict(engine=True, per_layer=True, **kw),
                       "host": dict(per_layer=True, **kw)})
    eng, host = dps["eng"], dps["host"]
    assert eng.split_grads and host.split_grads and eng.blocks == host.blocks
    assert len(eng.blocks) == 2 and eng.seg is None
    for outs, _ in hist:
        assert outs["eng"]["runs"] == [(Status.OK, 0)] * ranks
        assert not outs["eng"]["skipped"] and not outs["eng"]["poisoned"]
    assert _same(hist, "eng", "host")
    assert eng.multi.allreduces == 2 * len(hist)
    assert eng.bytes_ratio == host.bytes_ratio


def test_per_layer_equals_single_at_two_ranks():
    """FP32 links, 2 ranks: cutting the region per layer changes which rank starts each
    element's sum, but a sum of two FP32 values is commutative: the per-layer program equals
    the single-ALLREDUCE program (and the host-mediated single all-reduce) bit for bit."""
    _, hist = _runs(2, "none", LAYERS, {"layer": dict(engine=True, per_layer=True),
                                        "single": dict(engine=True), "host": {}})
    assert _same(hist, "layer", "single") and _same(hist, "layer", "host")


def test_per_layer_sum_order_at_four_ranks():
    """4 ranks: each block has its own segments, so an element's sum may start at another rank
    than in the single all-reduce. The per-layer sums are exactly the FP32 sums in the
    sum_order of the element's segment *within its block* (recomputed here), and an element
    chosen where the two orders differ, with values whose rounding depends on the order,
    gets different bits from the single ALLREDUCE."""
    N = 4
    cfg = _cfg(N)
    c = compile_mlp(MLP(layers=LAYERS, batch=8, one_pass=False), cfg, split_grads=True)
    g0, P = c.regions["grads"]
    S = cfg.size

    def allreduces(prog):
        return [w for w in prog if decode(w)[0] == Op.ALLREDUCE] + [encode(Op.HALT)]
    per = allreduces(c.dataparallel_program(per_layer=True))
    one = allreduces(c.dataparallel_program())
    seg1 = decode(one[0])[1]["seg"] * S
    blocks = [(decode(w)[1]["a"] - g0, decode(w)[1]["lines"], decode(w)[1]["seg"])
              for w in per[:-1]]

    def order_per_layer(i):            # region word i -> rank order of its sum
        for a, n, sg in blocks:
            if a * S <= i < (a + n) * S:
                return sum_order((i - a * S) // (sg * S), N)
    rng = np.random.default_rng(7)
    vec = (rng.standard_normal((N, P * S)) * 2.0 ** rng.integers(-12, 12, (N, P * S))) \
        .astype(np.float32)
    # an element whose first summand differs, with values where the order decides the bits
    i = next(i for i in range(P * S) if order_per_layer(i)[0] != sum_order(i // seg1, N)[0])
    vals = np.float32([1.0, 2.0 ** -24, 2.0 ** -24, -1.0])

    def fsum(order, x):
        acc = x[order[0]]
        for r in order[1:]:
            acc = np.float32(acc + x[r])
        return acc
    perm = next(p for p in np.ndindex(*(N,) * N) if len(set(p)) == N
                and fsum(order_per_layer(i), vals[list(p)]) != fsum(sum_order(i // seg1, N),
                                                                   vals[list(p)]))
    vec[:, i] = vals[list(perm)]
    out = {}
    for name, prog in (("per", per), ("one", one)):
        multi = MultiCoreModel(cfg)
        for r, core in enumerate(multi.cores):
            core.write_lines(g0, vec[r].view(np.uint32).reshape(P, S))
        res = multi.apply([[("program", prog), ("run",)]] * N)
        assert [x["run"] for x in res] == [[(Status.OK, 0)]] * N
        out[name] = [core.read_lines(g0, P).reshape(-1) for core in multi.cores]
        assert all(np.array_equal(o, out[name][0]) for o in out[name])
    want = np.array([fsum(order_per_layer(j), vec[:, j]) for j in range(P * S)], np.float32)
    assert np.array_equal(out["per"][0], want.view(np.uint32))
    assert out["per"][0][i] != out["one"][0][i]
    # both are FP32 sums of the same 4 terms: within 2 * gamma_3 * sum |x_r| of each other
    u = 2.0 ** -24
    bound = 2 * (3 * u / (1 - 3 * u)) * np.abs(vec.astype(np.float64)).sum(axis=0)
    diff = np.abs(out["per"][0].view(np.float32).astype(np.float64)
                  - out["one"][0].view(np.float32).astype(np.float64))
    assert np.all(diff <= bound)


def test_per_layer_at_four_ranks_within_bound_of_single():
    """DataParallel at 4 ranks, FP32: per-layer == single all-reduce after step 1 only within
    the summation-order bound of tests/test_dataparallel.py (2 (N - 1) u max|g| on the
    all-reduced gradients); after steps the runs may diverge, so compare step 1's gradients."""
    _, hist = _runs(4, "none", LAYERS, {"layer": dict(engine=True, per_layer=True),
                                        "single": dict(engine=True)}, steps=1)
    _, reads = hist[0]
    u = 2.0 ** -24
    for r in range(4):
        g1 = reads["single"][r]["grads"].reshape(-1).view(np.float32).astype(np.float64)
        g2 = reads["layer"][r]["grads"].reshape(-1).view(np.float32).astype(np.float64)
        assert np.max(np.abs(g1 - g2)) <= 2 * 3 * u * np.max(np.abs(g1))


@pytest.mark.parametrize("ranks", [2, 4])
def test_per_layer_poison_makes_every_core_skip(ranks):
    """FP32 links: a NaN in the last rank's input raises a run flag there; only the last
    ALLREDUCE (layer 0's) carries the poison, and it makes every core skip (params unchanged,
    grads word 0 the canonical NaN), as the host-mediated per-layer mode does."""
    rng, W, b = _params(5)
    desc = MLP(layers=LAYERS, batch=4 * ranks, optimizer=SGD(lr=0.1))
    x = np.random.default_rng(1).random((4 * ranks, 16)).astype(np.float32)
    y = np.arange(4 * ranks) % 4
    x[-1, 3] = np.nan                                       # the last rank's shard only
    out, dps = {}, {}
    for name, engine in (("eng", True), ("host", False)):
        dp = dps[name] = DataParallel(desc, CoreConfig.preset("tiny"), ranks, engine=engine,
                                      per_layer=True)
        dp.init(W, b)
        before = dp.read(0)["params"]
        res = dp.step(x, y, 1)
        assert res["poisoned"] and res["skipped"]
        out[name] = [dp.read(r) for r in range(ranks)]
        for got in out[name]:
            assert np.array_equal(got["params"], before)
            assert got["grads"].reshape(-1)[0] == POISON_BITS
    assert [e["poisoned"] for e in dps["eng"].multi.history] == [
        [False] * ranks, [False] * (ranks - 1) + [True]]
    for a, c in zip(out["eng"], out["host"]):
        assert all(np.array_equal(a[k], c[k]) for k in a)


def _overlap_of(preset, split):
    c = compile_mlp(DIGITS, _cfg(4, preset), split_grads=split)
    return c, c.allreduce_overlap(c.dataparallel_program(per_layer=True))


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_split_grads_lets_the_last_layer_overlap(preset):
    """Digits MLP 64-64-10, one of 4 ranks (batch 8): with the ordinary placement the whole
    gradient region is one bank, so the last layer's ALLREDUCE hides BWD_DATA(1) and
    RELU_GRAD(1) and BWD_WEIGHT(0) waits for it; with split_grads its block starts a bank of
    its own, and the ALLREDUCE hides the rest of the backward pass (BWD_DATA(1), RELU_GRAD(1),
    BWD_WEIGHT(0), REDUCE(0)) up to layer 0's ALLREDUCE (one collective engine). The gradient
    region stays one contiguous range of the OPT (count = P * S)."""
    c0, ov0 = _overlap_of(preset, False)
    c1, ov1 = _overlap_of(preset, True)
    D = c0.config.bank_depth
    for c, ov in ((c0, ov0), (c1, ov1)):
        assert [o["pc"] for o in ov] == [7, 12] and [o["poison"] for o in ov] == [0, 1]
        assert ov[1]["wait"] == 13 and ov[1]["why"] == "bank" and ov[1]["hidden"] == []
        opt = decode(c.program[-2])
        assert opt[0] == Op.OPT and opt[1]["g"] == c.regions["grads"][0]
        assert opt[1]["count"] == c._b.P * c.config.size == c.regions["grads"][1] * c.config.size
    assert ov0[0]["banks"] == ov0[1]["banks"]
    assert ov0[0]["wait"] == 10 and ov0[0]["why"] == "bank" and ov0[0]["hidden"] == [8, 9]
    assert ov1[0]["wait"] == 12 and ov1[0]["why"] == "unit" and ov1[0]["hidden"] == [8, 9, 10, 11]
    assert not set(ov1[0]["banks"]) & set(ov1[1]["banks"])
    # the last layer's block starts its bank, which holds no other buffer
    last = c1.grad_blocks()[-1][0]
    assert last[0] % D == 0 and ov1[0]["a"] == last[0]
    bank = last[0] // D
    for name, start in c1.place.items():
        lines = c1._b.bufs[name].lines
        if name != "grads":
            assert not start // D <= bank <= (start + lines - 1) // D, name


def test_split_grads_same_results_on_one_core():
    """split_grads moves addresses only: one core's step gives the same bits."""
    from sim.model.core import CoreModel
    rng, W, b = _params(3)
    desc = MLP(layers=LAYERS, batch=8, optimizer=Adam(lr=0.01))
    out = []
    for split in (False, True):
        c = compile_mlp(desc, CoreConfig.preset("tiny"), split_grads=split)
        core = CoreModel(CoreConfig.preset("tiny"))
        core.apply(c.init_actions(W, b))
        x, y = np.random.default_rng(2).random((8, 16)).astype(np.float32), np.arange(8) % 4
        res = core.apply(c.step_actions(x, y, 1) + c.read_actions())
        out.append((c.decode_loss(res), {k: res[k] for k in ("params", "grads", "m", "v")}))
    assert np.array_equal(out[0][0], out[1][0])
    assert all(np.array_equal(out[0][1][k], out[1][1][k]) for k in out[0][1])


def test_per_layer_errors():
    cfg = _cfg(2)
    # a LOOP accumulates the gradients: no per-layer ALLREDUCE inside it
    c = compile_mlp(MLP(layers=LAYERS, batch=8, micro_batches=2, one_pass=False), cfg)
    with pytest.raises(ValueError, match="micro_batches = 1"):
        c.dataparallel_program(per_layer=True)
    c.dataparallel_program()                      # the single ALLREDUCE after ENDLOOP is fine
    with pytest.raises(ValueError, match="micro_batches = 1"):
        DataParallel(MLP(layers=LAYERS, batch=16, micro_batches=2), CoreConfig.preset("tiny"),
                     2, per_layer=True)
    # BFP layer blocks need not be whole groups (tiny digits: layer 1 is 195 lines = 780
    # words): the program passes the check
    dig = compile_mlp(DIGITS, _cfg(4))
    assert len(dig.dataparallel_program(comp=1, per_layer=True)) == \
        len(dig.dataparallel_program(comp=0, per_layer=True))
    assert len(compile_mlp(DIGITS, _cfg(4, "default")).dataparallel_program(
        comp=1, per_layer=True)) == 15
    # top-k per layer: each block's residual at its own offset, one message buffer
    c2 = compile_mlp(MLP(layers=LAYERS, batch=8, one_pass=False), _cfg(2), split_grads=True)
    tk = c2.topk_regions(per_layer=True)
    a = c2.regions["grads"][0]
    ars = [f for op, f in map(decode, c2.dataparallel_program(comp=2, per_layer=True))
           if op == Op.ALLREDUCE]
    assert len(ars) == 2 and sorted(f["b"] - f["a"] for f in ars) == [tk["b"] - a] * 2
    assert {(f["g"], f["glines"]) for f in ars} == {(tk["g"], tk["glines"])}
    S, coll = _cfg(2).size, _cfg(2).collective
    assert tk["glines"] == max(-(-2 * coll.topk.message_words(f["lines"] * S) // S)
                               for f in ars)
    # program memory: 16 words hold the single ALLREDUCE's program but not one per layer
    small = _cfg(2, prog_depth=16)
    ck = compile_mlp(MLP(layers=LAYERS, batch=8, one_pass=False, checkpoint={1}), small)
    assert len(ck.dataparallel_program()) == 16
    with pytest.raises(ValueError, match="prog_depth = 16"):
        ck.dataparallel_program(per_layer=True)
    # split_grads needs a bank of its own: 4 banks with Adam (params, m, v, 2 x grads) fail
    four = _cfg(2, banks=4, bank_depth=4096)
    with pytest.raises(CompileError, match="split_grads"):
        compile_mlp(MLP(layers=LAYERS, batch=8, one_pass=False), four, split_grads=True)
    desc = MLP(layers=LAYERS, batch=16)
    four1 = dataclasses.replace(four, ranks=1)
    assert not DataParallel(desc, four1, 2, per_layer=True).split_grads     # falls back
    with pytest.raises(CompileError):
        DataParallel(desc, four1, 2, per_layer=True, split_grads=True)
    assert DataParallel(desc, CoreConfig.preset("tiny"), 2, per_layer=True,
                        split_grads=False).split_grads is False
