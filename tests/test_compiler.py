"""MLP compiler (sim/host/compiler.py), the golden training step (sim/model/train.py) and
`tessera compile`: plans pass the ISA's program check and an independent dataflow replay,
bad descriptions fail with clear errors, checkpointing saves memory where it can, and compiled
steps run on the core's golden model."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD
from hdl.cli import main
from hdl.core.config import CoreConfig
from hdl.core.isa import (LOOP_FIELDS, Acc, Op, Status, assemble_program, check_program_for,
                          decode, operand_ranges)
from sim.host.compiler import KINDS, MLP, CompileError, Compiled, compile_mlp
from sim.host.optim import SGD, Adam, AdamW, Clip, LossScale, Momentum

F32 = np.float32
S8 = CoreConfig()                                   # S = 8, 8 banks x 1024
S4 = CoreConfig(size=4, bank_depth=2048)            # S = 4, 8 banks x 2048
TINY = CoreConfig.preset("tiny")                    # S = 4, 8 banks x 2048, 64 classes
SMALL4 = CoreConfig(size=4, bank_depth=512)         # S = 4, 8 banks x 512
OPTIMIZERS = [SGD(0.05), Momentum(0.05, 0.9), Adam(1e-2), AdamW(1e-2, weight_decay=0.1)]
NETS = {1: (24, 10), 2: (24, 16, 10), 3: (24, 16, 12, 10), 4: (24, 16, 16, 12, 10)}


def check(comp: Compiled):
    return check_program_for(comp.program, comp.config)


# ---- independent replay of the plan's dataflow ----------------------------------------------
def _tensor_at(comp, line, pc, j):
    """The plan tensor starting at ``line`` that is live at ``pc`` (micro-batch ``j``)."""
    hits = []
    for t in comp.plan.values():
        start = t.line + (j * t.stride if t.count > 1 else 0)
        if start == line and (t.live is None or t.live[0] <= pc <= t.live[1]):
            hits.append(t)
    if not hits:
        return None
    # region sub-tensors: the one that is not an 'unused' alias; activations: the live one
    hits.sort(key=lambda t: (t.name.endswith(".unused"), t.live is None))
    return hits[0]


def replay(comp: Compiled):
    """Walk the program (loop unrolled) tracking which tensor each line holds; every operand a
    instruction reads must still hold the tensor the plan says it holds (nobody clobbered it),
    and every in-loop flagged operand must move by the record stride."""
    c, S = comp.config, comp.config.size
    owner = np.full(c.lines, "", dtype=object)
    for t in comp.plan.values():                       # host writes: persistent regions
        if t.live is None:
            for j in range(t.count):
                s = t.line + j * t.stride
                owner[s:s + t.lines] = t.name
    words = comp.program
    pc, it, loop = 0, 0, None
    executed = 0
    while True:
        op, f = decode(words[pc])
        if op == Op.HALT:
            break
        if op == Op.LOOP:
            loop = (pc, f["count"], f["stride"])
            it = 0
            pc += 1
            continue
        if op == Op.ENDLOOP:
            it += 1
            if it < loop[1]:
                pc = loop[0] + 1
                continue
            loop, it = None, 0
            pc += 1
            continue
        offset = it * loop[2] if loop else 0
        ranges = operand_ranges(op, f, S, offset=offset)
        if op == Op.OPT:      # whole regions: every line must hold a tensor of that region
            for r in ranges:
                t = _tensor_at(comp, r.start, pc, it)
                assert t is not None and t.live is None or t.name.endswith(".unused")
                if t.live is None:
                    region = {u.name for u in comp.plan.values() if u.buffer == t.buffer}
                    assert set(owner[r.start:r.start + r.lines]) <= region, r.port
                    end = max(u.line + u.lines for u in comp.plan.values()
                              if u.buffer == t.buffer)
                    assert r.start + r.lines == end
            executed += 1
            pc += 1
            continue
        names = {}
        for r in ranges:
            t = _tensor_at(comp, r.start, pc, it)
            assert t is not None, f"pc {pc}: operand {r.port} at line {r.start} is no tensor"
            assert r.lines <= t.lines, f"pc {pc}: operand {r.port} longer than {t.name}"
            names[r.port] = t
            first_iter = it == 0
            reads = "r" in r.kind
            if op == Op.MATMUL and f["acc"] == Acc.AFTER_FIRST and first_iter and r.kind == "rw" \
                    and not (f["mode"] == FWD):
                reads = False                          # overwrite in iteration 0
            if op == Op.MATMUL and r.kind == "rw" and f["acc"] == Acc.OFF:
                reads = False
            if op == Op.REDUCE and r.port == "d" and (f["acc"] == Acc.OFF or first_iter):
                reads = False
            if reads and not t.name.endswith(".unused"):
                held = set(owner[r.start:r.start + r.lines])
                assert held == {t.name}, f"pc {pc} it {it}: {r.port} expects {t.name}, " \
                                         f"lines hold {held}"
        for r in ranges:
            if "w" in r.kind and not names[r.port].name.endswith(".unused"):
                owner[r.start:r.start + r.lines] = names[r.port].name
        executed += 1
        pc += 1
    return executed


def plan_invariants(comp: Compiled):
    D = comp.config.bank_depth
    tensors = list(comp.plan.values())
    for t in tensors:
        assert t.kind in KINDS
        assert t.bank == t.line // D
        assert t.line + (t.count - 1) * t.stride + t.lines <= comp.config.lines
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            if a.buffer == b.buffer:
                continue
            both = (a.live is None or b.live is None
                    or not (a.live[1] < b.live[0] or b.live[1] < a.live[0]))
            if a.name.endswith(".unused") or b.name.endswith(".unused"):
                both = a.live is None or b.live is None
            if both:
                ea = a.line + (a.count - 1) * a.stride + a.lines
                eb = b.line + (b.count - 1) * b.stride + b.lines
                assert ea <= b.line or eb <= a.line, f"{a.name} and {b.name} overlap"


# ---- descriptions ---------------------------------------------------------------------------
def test_default_description():
    d = MLP()
    assert d.layers == (64, 64, 10) and d.batch == 32 and isinstance(d.optimizer, Adam)
    assert d.micro_batches == 1 and d.checkpoint == frozenset() and d.loss_scale is None
    assert MLP(layers=[8, 4, 2], checkpoint=[1]).layers == (8, 4, 2)
    assert MLP(layers=(8, 4, 4, 2), checkpoint="none").checkpoint == frozenset()
    assert hash(MLP()) == hash(MLP())
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.batch = 4


@pytest.mark.parametrize("kw, exc, match", [
    ({"layers": (64,)}, ValueError, r"MLP\.layers needs at least 2"),
    ({"layers": "64,10"}, TypeError, r"MLP\.layers must be a tuple"),
    ({"layers": (64, 10.0)}, TypeError, r"MLP\.layers\[1\] must be an int"),
    ({"layers": (64, 0, 10)}, ValueError, r"MLP\.layers\[1\] must be >= 1"),
    ({"layers": (64, 1)}, ValueError, r"classes\) must be >= 2"),
    ({"batch": 0}, ValueError, r"MLP\.batch must be >= 1"),
    ({"batch": 32.0}, TypeError, r"MLP\.batch must be an int"),
    ({"batch": 30, "micro_batches": 4}, ValueError, r"MLP\.batch \(30\).*micro_batches \(4\)"),
    ({"micro_batches": 0}, ValueError, r"MLP\.micro_batches must be >= 1"),
    ({"optimizer": "adam"}, TypeError, r"MLP\.optimizer must be"),
    ({"loss_scale": 16}, TypeError, r"MLP\.loss_scale must be"),
    ({"clip": 1.0}, TypeError, r"MLP\.clip must be"),
    ({"checkpoint": (2,)}, ValueError, r"MLP\.checkpoint.*\[2\].*1\.\.1"),
    ({"checkpoint": (0,)}, ValueError, r"MLP\.checkpoint.*\[0\]"),
    ({"checkpoint": ("1",)}, TypeError, r"MLP\.checkpoint entries must be ints"),
    ({"layers": (8, 4), "checkpoint": (1,)}, ValueError, r"no hidden activation"),
    ({"schedule": "fast"}, ValueError, r"MLP\.schedule must be one of"),
])
def test_bad_descriptions(kw, exc, match):
    with pytest.raises(exc, match=match):
        MLP(**kw)


@pytest.mark.parametrize("desc, config, match", [
    (MLP(layers=(2000, 10)), S8, r"layer size 2000 \(layers\[0\]\).*1023 = 2\*\*dim_bits - 1"),
    (MLP(layers=(16, 10), batch=2048), S8, r"micro-batch rows 2048.*1023"),
    (MLP(layers=(8,) * 9 + (4,), optimizer=SGD(0.1)), S8,
     r"9 layers do not fit the precision table: CoreConfig\.layers = 8"),
    (MLP(layers=(64, 64, 64, 64, 10)), S8,
     r"needs at least 8304 lines .* scratchpad has 8192 lines \(8 banks x 1024\)"),
    (MLP(layers=(64, 64, 10)), SMALL4, r"needs at least \d+ lines .*scratchpad has 4096 lines"),
    (MLP(layers=(16, 100)), TINY, r"100 classes exceed .*CoreConfig\.max_classes = 64"),
    (MLP(layers=(512, 300, 10), optimizer=SGD(0.1)), CoreConfig(bank_depth=8192),
     r"\d+ parameter words .* exceed the largest OPT region \(65536 words"),
    (MLP(layers=(8, 8, 8, 8, 8, 4), optimizer=SGD(0.1), checkpoint=(1, 2, 3, 4)),
     dataclasses.replace(S8, prog_depth=16), r"program of \d+ instructions .*prog_depth = 16"),
    (MLP(layers=(16, 16, 4), micro_batches=2, batch=8), CoreConfig(banks=4, bank_depth=4096),
     r"tensor 'z' \(activations, \d+ lines\) does not fit.*banks excluded by the port rules.*"
     r"4 banks and micro-batches"),
])
def test_compile_errors_are_clear(desc, config, match):
    with pytest.raises(CompileError, match=match):
        compile_mlp(desc, config)
    assert issubclass(CompileError, ValueError)


def test_compile_type_errors():
    with pytest.raises(TypeError, match="desc must be an MLP"):
        compile_mlp((64, 10), S8)
    with pytest.raises(TypeError, match="config must be a CoreConfig"):
        compile_mlp(MLP(), "default")


# ---- plans ----------------------------------------------------------------------------------
def test_default_program_is_the_listed_step():
    comp = compile_mlp()
    ops = [decode(w) for w in comp.program]
    names = [(op, f.get("mode"), f.get("vop"), f.get("layer")) for op, f in ops]
    assert [n[0] for n in names] == [Op.MATMUL, Op.VEC, Op.MATMUL, Op.VEC, Op.SOFTMAX_XENT,
                                     Op.MATMUL, Op.REDUCE, Op.MATMUL, Op.VEC,
                                     Op.MATMUL, Op.REDUCE, Op.OPT, Op.HALT]
    assert [f["mode"] for op, f in ops if op == Op.MATMUL] == [FWD, FWD, BWD_WEIGHT, BWD_DATA,
                                                               BWD_WEIGHT]
    sm = ops[4][1]
    assert np.array(sm["imm"], np.uint32).view(F32) == F32(1 / 32)
    opt = ops[11][1]
    assert opt["count"] == comp.report()["parameter_words_padded"]
    assert opt["w"] == comp.plan["W0"].line and opt["g"] == comp.plan["dW0"].line
    assert opt["m"] == comp.plan["m.W0"].line and opt["v"] == comp.plan["v.W0"].line
    # parameter region: W0, b0, W1, b1 contiguous; gradient / state regions the same layout
    p = comp.plan
    assert p["b0"].line == p["W0"].line + p["W0"].lines
    assert p["W1"].line == p["b0"].line + p["b0"].lines
    for pre in ("d", "m.", "v."):
        for n in ("W0", "b0", "W1", "b1"):
            assert p[pre + n].line - p[pre + "W0"].line == p[n].line - p["W0"].line
    assert len({p["W0"].bank, p["dW0"].bank, p["m.W0"].bank, p["v.W0"].bank}) == 4
    assert check(comp) == (Status.OK, 0)
    assert replay(comp) == 12
    plan_invariants(comp)


@pytest.mark.parametrize("S", [4, 8])
@pytest.mark.parametrize("L", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("ckpt", [False, True])
def test_plans_pass_the_program_check(S, L, k, ckpt):
    config = SMALL4 if S == 4 else S8
    i = (S + 3 * L + 5 * k + 7 * ckpt)
    desc = MLP(layers=NETS[L], batch=16, optimizer=OPTIMIZERS[i % 4], micro_batches=k,
               checkpoint=tuple(range(1, L)) if ckpt else (),
               loss_scale=LossScale(8) if i % 3 == 0 else None,
               clip=Clip(1.0) if i % 2 else None,
               schedule=("listed", "overlap")[(i // 4) % 2])
    comp = compile_mlp(desc, config)
    assert check(comp) == (Status.OK, 0)
    plan_invariants(comp)
    n = replay(comp)
    body = sum(1 for w in comp.program if decode(w)[0] not in (Op.LOOP, Op.ENDLOOP, Op.HALT,
                                                               Op.OPT))
    assert n == body * k + 1
    rep = comp.report()
    assert rep["total"] <= config.words
    assert sum(rep["lines_per_bank"]) * S == rep["total"]
    assert rep["weights"] == rep["gradients"] == rep["parameter_words_padded"]
    assert rep["optimizer_state"] == len(desc.states) * rep["weights"]
    assert rep["activations"] >= rep["activation_peak_live_words"]
    loops = [decode(w) for w in comp.program if decode(w)[0] == Op.LOOP]
    assert len(loops) == (k > 1)
    if k > 1:
        stride = loops[0][1]["stride"]
        assert comp.plan["x"].stride == comp.plan["labels"].stride == stride
        assert comp.plan["loss"].count == k
        # x, labels and loss are flagged; nothing else is
        for w in comp.program:
            op, f = decode(w)
            if op in LOOP_FIELDS:
                for bit, name in enumerate(LOOP_FIELDS[op]):
                    flagged = (f["loop"] >> bit) & 1
                    t = _tensor_at(comp, f[name], 0, 0)
                    is_data = any(f[name] == comp.plan[n].line for n in ("x", "labels", "loss"))
                    assert bool(flagged) == is_data, (op, name, t)


@pytest.mark.parametrize("config", [S8, S4, SMALL4, CoreConfig(banks=16, bank_depth=512),
                                    CoreConfig(banks=4, bank_depth=4096)])
def test_configs(config):
    desc = MLP(layers=(32, 32, 32, 10), batch=16, optimizer=Momentum(0.1, 0.5), checkpoint=(1,))
    comp = compile_mlp(desc, config)
    assert check(comp) == (Status.OK, 0)
    replay(comp)
    plan_invariants(comp)
    if config.banks == 4:        # dz cannot be formed in place with 4 banks (docstring)
        assert comp.report()["inplace_relu_grad"] is False


def test_unused_optimizer_state_costs_nothing():
    sgd = compile_mlp(MLP(optimizer=SGD(0.1)), S8)
    mom = compile_mlp(MLP(optimizer=Momentum(0.1, 0.9)), S8)
    adam = compile_mlp(MLP(), S8)
    assert sgd.report()["optimizer_state"] == 0
    assert mom.report()["optimizer_state"] == adam.report()["weights"]
    assert adam.report()["optimizer_state"] == 2 * adam.report()["weights"]
    assert "m.unused" in sgd.plan and "v.unused" in sgd.plan and "v.unused" in mom.plan
    assert sgd.read_actions()[-1][1] == "grads"


def test_checkpointing_reduces_activation_words_of_a_deeper_mlp():
    big = CoreConfig(bank_depth=2048)
    for opt, config in ((SGD(0.1), S8), (Adam(), big)):
        base = MLP(layers=(64, 64, 64, 64, 10), optimizer=opt)
        words = {ck: compile_mlp(base.replace(checkpoint=ck), config).report()
                 for ck in ((), (1,), (1, 2))}
        assert words[(1,)]["activations"] < words[()]["activations"]
        assert words[(1, 2)]["activations"] < words[(1,)]["activations"]
        assert words[(1, 2)]["activation_peak_live_words"] < \
            words[()]["activation_peak_live_words"]
        for r in words.values():
            assert r["total"] == sum(r["lines_per_bank"]) * 8
    # 64-64-10: the one hidden activation is needed right after the softmax: no saving, and
    # the report says so (same words; the recompute passes are extra work)
    plain, ck = (compile_mlp(MLP(checkpoint=c), S8).report() for c in ((), (1,)))
    assert ck["activations"] == plain["activations"] == 4608
    assert ck["activation_peak_live_words"] == plain["activation_peak_live_words"]
    assert ck["recompute_passes"] == 1 and plain["recompute_passes"] == 0
    assert ck["instructions"] == plain["instructions"] + 2


def test_overlap_schedule_has_disjoint_pairs():
    desc = MLP(layers=(32, 32, 32, 32, 10), optimizer=SGD(0.1), batch=16, schedule="overlap")
    rep = compile_mlp(desc, S8).report()
    assert rep["overlap_pairs"] >= 4 and rep["overlap_pairs_disjoint_banks"] >= 2
    listed = compile_mlp(desc.replace(schedule="listed", micro_batches=2), S8).report()
    # listed order with micro-batches: the last bias gradient || the next micro-batch's FWD
    assert listed["overlap_pairs"] == listed["overlap_pairs_disjoint_banks"] == 1


def test_asm_round_trip_and_json_plan():
    comp = compile_mlp(MLP(micro_batches=2, checkpoint=(1,)), S8)
    assert assemble_program(comp.asm()) == comp.program
    json.dumps({n: t.as_dict() for n, t in comp.plan.items()})
    json.dumps(comp.report())


# ---- host actions -----------------------------------------------------------------------------
def test_precision_table():
    comp = compile_mlp(MLP(layers=(16, 8, 4), batch=4), TINY)
    t = comp.precision_table()
    assert len(t) == 6 and set(t.values()) == {(8, 8, 0)}
    assert set(comp.precision_table(4).values()) == {(4, 4, 0)}
    assert set(comp.precision_table((6, 4, 1)).values()) == {(6, 4, 1)}
    t = comp.precision_table({(1, "BWD_DATA"): 2, (0, 2): (4, 6)})
    assert t[(1, BWD_DATA)] == (2, 2, 0) and t[(0, BWD_WEIGHT)] == (4, 6, 0)
    assert t[(0, FWD)] == (8, 8, 0)
    with pytest.raises(ValueError, match="width_a must be one of"):
        comp.precision_table(5)
    with pytest.raises(ValueError, match="rounding must be"):
        comp.precision_table((8, 8, 3))
    with pytest.raises(ValueError, match="layer must be in 0..1"):
        comp.precision_table({(2, 0): 8})


def test_host_action_validation():
    comp = compile_mlp(MLP(layers=(16, 8, 4), batch=4), TINY)
    W = [np.zeros((16, 8), F32), np.zeros((8, 4), F32)]
    b = [np.zeros(8, F32), np.zeros(4, F32)]
    with pytest.raises(ValueError, match=r"W1 must have shape \(8, 4\)"):
        comp.init_actions([W[0], W[0]], b)
    with pytest.raises(ValueError, match="need 2 weight matrices"):
        comp.init_actions(W[:1], b)
    x = np.zeros((4, 16), F32)
    with pytest.raises(ValueError, match=r"x must have shape \(4, 16\)"):
        comp.step_actions(x[:3], [0, 1, 2], 1)
    with pytest.raises(ValueError, match=r"labels must be in 0\.\.3"):
        comp.step_actions(x, np.array([0, 1, 2, 4]), 1)
    with pytest.raises(ValueError, match="Adam step t must be"):
        comp.step_actions(x, np.array([0, 1, 2, 3]), 0)


# ---- on the golden model ------------------------------------------------------------------------
CoreModel = pytest.importorskip("sim.model.core").CoreModel
train = pytest.importorskip("sim.model.train")


def batch(desc, seed=1, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((desc.batch, desc.layers[0])) * scale).astype(F32)
    y = rng.integers(0, desc.layers[-1], desc.batch)
    return x, y


def same(a, b):
    return all(np.array_equal(np.asarray(u).view(np.uint32), np.asarray(v).view(np.uint32))
               for u, v in zip(a, b))


def test_init_and_read_actions_round_trip():
    desc = MLP(layers=(12, 9, 5), batch=4, optimizer=Momentum(0.1, 0.9))
    comp = compile_mlp(desc, TINY)
    W, b = train.init_params(desc, 3)
    st = train.zeros_opt_state(desc)
    st["m"]["W"][1][:] = 0.5
    model = CoreModel(TINY)
    res = model.apply(comp.init_actions(W, b, st) + comp.read_actions() + [("status",)])
    Wr, br = comp.decode_params(res)
    assert same(Wr, W) and same(br, b)
    g = comp.decode_grads(res)
    assert all(not v.any() for v in g["W"] + g["b"])
    s = comp.decode_opt_state(res)
    assert set(s) == {"m"} and np.all(s["m"]["W"][1] == 0.5)
    assert res["status"]["scale_exp"] == 0


def test_step_matches_reference_and_checkpointing_is_bit_exact():
    from sim.model.reference import reference_step
    desc = MLP(layers=(16, 24, 24, 5), batch=16, optimizer=Adam(1e-2))
    W, b = train.init_params(desc, 0)
    x, y = batch(desc)
    plain = train.train_step(desc, TINY, W, b, None, x, y, 1)
    ref = reference_step(desc.layers, W, b, None, x, y, desc.optimizer, 1)
    assert np.isfinite(plain["loss"]) and abs(plain["loss"] - ref["loss"]) < 0.02
    assert not plain["skipped"]
    for l in range(3):
        r = ref["grads"]["W"][l]
        assert np.abs(plain["grads"]["W"][l] - r).max() <= 0.25 * np.abs(r).max()
    for variant in (desc.replace(checkpoint=(1, 2)), desc.replace(checkpoint=(2,)),
                    desc.replace(schedule="overlap", checkpoint=(1,))):
        other = train.train_step(variant, TINY, W, b, None, x, y, 1)
        assert same(other["weights"], plain["weights"]) and same(other["biases"], plain["biases"])
        assert same(other["losses"][None], plain["losses"][None])
        assert same(other["grads"]["W"], plain["grads"]["W"])
        for k in ("m", "v"):
            assert same(other["opt_state"][k]["W"], plain["opt_state"][k]["W"])
    # different hardware placement (4 banks: dz out of place), same numbers
    four = train.train_step(desc, CoreConfig(size=4, banks=4, bank_depth=2048), W, b, None,
                            x, y, 1)
    assert same(four["weights"], plain["weights"])


def test_stochastic_rounding_recompute_draws_noise():
    desc = MLP(layers=(16, 16, 16, 5), batch=8, optimizer=SGD(0.1))
    W, b = train.init_params(desc, 2)
    x, y = batch(desc, 2)
    prec = (4, 4, 1)
    a = train.train_step(desc, TINY, W, b, None, x, y, 1, precision=prec)
    c = train.train_step(desc.replace(checkpoint=(1, 2)), TINY, W, b, None, x, y, 1,
                         precision=prec)
    assert np.array_equal(a["losses"], c["losses"])          # forward pass: same noise
    assert not same(a["weights"], c["weights"])              # recompute drew extra noise


def test_micro_batches_run_and_match():
    desc = MLP(layers=(16, 24, 5), batch=16, optimizer=SGD(0.1))
    W, b = train.init_params(desc, 4)
    x, y = batch(desc, 4)
    one = train.train_step(desc, TINY, W, b, None, x, y, 1)
    for k in (2, 4):
        out = train.train_step(desc.replace(micro_batches=k), TINY, W, b, None, x, y, 1)
        assert np.all(np.isfinite(out["losses"])) and out["losses"].shape == (16,)
        assert np.array_equal(out["losses"], one["losses"])        # rows are independent
        assert not same(out["weights"], W)
        for g, g1 in zip(out["grads"]["W"], one["grads"]["W"]):
            assert np.abs(g - g1).max() <= 1e-5 + 1e-3 * np.abs(g1).max()


def test_loss_scale_is_exact_and_clipping_reports():
    desc = MLP(layers=(16, 16, 5), batch=8, optimizer=Momentum(0.1, 0.9))
    W, b = train.init_params(desc, 5)
    x, y = batch(desc, 5)
    plain = train.train_step(desc, TINY, W, b, None, x, y, 1)
    scaled = train.train_step(desc.replace(loss_scale=LossScale(10, growth_interval=1)), TINY,
                              W, b, None, x, y, 1)
    assert same(scaled["weights"], plain["weights"])
    assert same(scaled["grads"]["W"], plain["grads"]["W"])
    assert scaled["scale_exp"] == 11 and not scaled["skipped"]     # grew after 1 clean step
    clipped = train.train_step(desc.replace(clip=Clip(1e-4)), TINY, W, b, None, x, y, 1)
    assert clipped["status"]["clipped"] == 1
    assert np.abs(clipped["weights"][0] - W[0]).max() < np.abs(plain["weights"][0] - W[0]).max()
    # a huge input overflows: the step is skipped, the scale halves, nothing changes
    xb = x.copy()
    xb[0, 0] = 3e38
    skip = train.train_step(desc.replace(loss_scale=LossScale(10)), TINY, W, b, None, xb, y, 1)
    assert skip["skipped"] and skip["scale_exp"] == 9 and same(skip["weights"], W)


def test_training_loop_learns_on_one_model():
    desc = MLP(layers=(8, 16, 3), batch=16, optimizer=Adam(3e-2), micro_batches=2)
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((3, 8)).astype(F32) * 2
    W, b = train.init_params(desc, 7)
    out, losses = None, []
    for t in range(1, 9):
        y = rng.integers(0, 3, 16)
        x = (centers[y] + 0.3 * rng.standard_normal((16, 8))).astype(F32)
        if out is None:
            out = train.train_step(desc, TINY, W, b, None, x, y, t)
        else:
            out = train.train_step(desc, TINY, None, None, None, x, y, t, model=out["model"])
        losses.append(out["loss"])
    assert losses[-1] < 0.5 * losses[0]


# ---- CLI -------------------------------------------------------------------------------------
def test_cli_compile_report(capsys, tmp_path):
    rc = main(["compile", "--layers", "64,64,64,64,10", "--optimizer", "sgd", "--checkpoint",
               "1,2", "--report", "--json", str(tmp_path / "p.json"), "--asm",
               str(tmp_path / "p.s")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "checkpoint 1,2" in out and "no checkpoint" in out
    for label in ("weights", "activations", "gradients", "optimizer state", "total"):
        assert label in out
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["report"]["activations"] < doc["report_without_checkpoint"]["activations"]
    assert set(doc["plan"]) >= {"W0", "dW3", "x", "labels", "loss", "h3"}
    assert len(assemble_program((tmp_path / "p.s").read_text())) == len(doc["program"])


def test_cli_compile_options(capsys):
    assert main(["compile", "--config", "tiny", "--bank-depth", "2048", "--micro-batches", "4",
                 "--loss-scale", "--clip", "1.0", "--optimizer", "adamw", "--lr", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "4 x 8" in out and "S=4" in out and "AdamW" in out


@pytest.mark.parametrize("args, match", [
    (["--batch", "30", "--micro-batches", "4"], "MLP.batch"),
    (["--checkpoint", "3"], "MLP.checkpoint"),
    (["--checkpoint", "x"], "--checkpoint must be"),
    (["--layers", "64,a"], "--layers must be"),
    (["--layers", "64,64,64,64,10"], "needs at least"),
    (["--lr", "-1", "--optimizer", "sgd"], "SGD.lr"),
    (["--banks", "5"], "CoreConfig.banks"),
])
def test_cli_compile_errors(capsys, args, match):
    assert main(["compile"] + args) == 2
    err = capsys.readouterr().err
    assert "tessera: error:" in err and match in err
