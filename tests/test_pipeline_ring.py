"""Pipeline steps run by the cores' own programs (sim/host/pipeline_ring.py) in the golden
model: the ring of two MultiCoreModel cores, whose SENDRECVs move the activations and
gradients, against the host-mediated pipeline (sim/host/pipeline.py) and one core. The RTL
ring runs the same programs in tests/test_training_ring.py."""
import dataclasses

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import Op, decode, encode
from sim.host.compiler import MLP, compile_mlp
from sim.host.optim import Adam, Momentum
from sim.host.pipeline import Pipeline
from sim.host.pipeline_ring import RingPipeline
from sim.model.core import CoreModel

CFG = dataclasses.replace(CoreConfig.preset("tiny"), ranks=2)


def _params(desc, seed):
    rng = np.random.default_rng(seed)
    Ws = [(rng.standard_normal((a, b)) * 0.3).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    return Ws, bs


def _same(a, b):
    return all(np.array_equal(np.asarray(u, np.float32).view(np.uint32),
                              np.asarray(v, np.float32).view(np.uint32)) for u, v in zip(a, b))


@pytest.mark.parametrize("layers,m,opt,schedule", [
    ((64, 64, 10), 4, Adam(lr=3e-3), "gpipe"),
    ((64, 64, 10), 4, Adam(lr=3e-3), "1f1b"),
    ((64, 32, 32, 10), 2, Momentum(lr=0.05, momentum=0.9), "gpipe"),
    ((64, 32, 32, 10), 3, Momentum(lr=0.05, momentum=0.9), "1f1b")])
def test_ring_pipeline_equals_host_pipeline_and_one_core(layers, m, opt, schedule):
    """Three steps: losses, parameters, gradients and optimizer state of the ring (each
    core's one program per step) equal the host-mediated pipeline's and one core's running
    the same micro-batches, bit for bit; the ring moved as many words as the host copied."""
    desc = MLP(layers=layers, batch=48 if m == 3 else 32, micro_batches=m, optimizer=opt)
    ring = RingPipeline(desc, CFG, schedule=schedule)
    host = Pipeline(desc, CFG, 2, schedule=schedule)
    one_desc = dataclasses.replace(desc, one_pass=False)
    one = compile_mlp(one_desc, dataclasses.replace(CFG, ranks=1))
    core = CoreModel(one.config)
    Ws, bs = _params(desc, 3)
    ring.init(Ws, bs)
    host.init(Ws, bs)
    core.apply(one.init_actions(Ws, bs))
    rng = np.random.default_rng(4)
    B = desc.batch
    for t in (1, 2, 3):
        x = rng.standard_normal((B, layers[0])).astype(np.float32)
        y = rng.integers(0, layers[-1], B)
        a, b = ring.ring_step(x, y, t), host.step(x, y, t)
        res = core.apply(one.step_actions(x, y, t) + one.read_actions())
        c = one.decode_step(res)
        assert _same([a["losses"]], [b["losses"]]) and _same([a["losses"]], [c["losses"]]), t
        assert a["run"] == [(0, 0), (0, 0)] and not a["skipped"]
    got, ref = ring.read(), host.read()
    one_p = one.decode_params(res)
    for key in got:
        assert _same(got[key]["W"], ref[key]["W"]) and _same(got[key]["b"], ref[key]["b"]), key
    assert _same(got["params"]["W"], one_p[0]) and _same(got["params"]["b"], one_p[1])
    assert ring.link_words == host.link_words > 0


def test_ring_programs_order_their_transfers():
    """GPipe on the ring: stage 0 sends a_0 .. a_{m-1} then receives g_0 .. g_{m-1}; stage 1
    receives a_0 .. then sends g_0 ..; every transfer's length matches its partner's, each
    program ends in OPT, HALT."""
    desc = MLP(layers=(64, 64, 10), batch=32, micro_batches=4, optimizer=Adam())
    ring = RingPipeline(desc, CFG)
    srs = []
    for s in range(2):
        ops = [decode(w) for w in ring.ring_programs[s]]
        assert [op for op, _ in ops[-2:]] == [Op.OPT, Op.HALT]
        srs.append([f for op, f in ops if op == Op.SENDRECV])
    assert [bool(f["lines"]) for f in srs[0]] == [True] * 4 + [False] * 4
    assert [bool(f["rlines"]) for f in srs[1]] == [True] * 4 + [False] * 4
    for f, g in zip(srs[0], srs[1]):
        assert f["lines"] == g["rlines"] and f["rlines"] == g["lines"]
    assert all(f["timeout"] == 1 << 20 for f in srs[0] + srs[1])


def test_1f1b_fuses_exchanges_and_keeps_fewer_stashes():
    """1F1B on the ring: after the warm-up forward, stage 0 sends a_{i+1} and receives g_i in
    one SENDRECV (into its gradient inbox, copied into the output buffer after the stash is
    restored), stage 1 sends g_i and receives a_{i+1} in one; the plain order (a send, then
    a receive) would deadlock, which the model shows. Stage 0 keeps 2 stash slots, stage 1
    one, where GPipe keeps m each."""
    desc = MLP(layers=(64, 64, 10), batch=32, micro_batches=4, optimizer=Adam())
    ring = RingPipeline(desc, CFG, schedule="1f1b")
    assert [len(v) for v in ring.stash_slots] == [2, 1]
    assert [len(v) for v in RingPipeline(desc, CFG).stash_slots] == [4, 4]
    kinds = []
    for s in range(2):
        srs = [f for op, f in map(decode, ring.ring_programs[s]) if op == Op.SENDRECV]
        kinds.append([("s" if f["lines"] else "") + ("r" if f["rlines"] else "") for f in srs])
    assert kinds == [["s", "sr", "sr", "sr", "r"], ["r", "sr", "sr", "sr", "s"]]
    # unfused (send first, then receive, on both stages): stage 0 sends a_1 while stage 1
    # sends g_0, each waiting for the other's receive
    for prog in ring.ring_programs:
        i = next(k for k, w in enumerate(prog) if decode(w)[0] == Op.SENDRECV and
                 decode(w)[1]["rlines"] and decode(w)[1]["lines"])
        f = decode(prog[i])[1]
        prog[i:i + 1] = [encode(Op.SENDRECV, a=f["a"], lines=f["lines"], timeout=f["timeout"]),
                         encode(Op.SENDRECV, b=f["b"], rlines=f["rlines"],
                                timeout=f["timeout"])]
    Ws, bs = _params(desc, 1)
    ring.init(Ws, bs)
    with pytest.raises(ValueError, match="no core of the ring can go on"):
        ring.ring_step(np.zeros((32, 64), np.float32), np.zeros(32, np.int64), 1)


def test_swapped_programs_deadlock_in_the_model():
    """If stage 1 sent its gradients before receiving the activations, both cores would wait
    for each other: the model reports it (the hardware would end in ERR_LINK)."""
    desc = MLP(layers=(16, 16, 4), batch=8, micro_batches=2, optimizer=Adam())
    ring = RingPipeline(desc, CFG)
    prog = ring.ring_programs[1]
    srs = [i for i, w in enumerate(prog) if decode(w)[0] == Op.SENDRECV]
    prog[srs[0]], prog[srs[-1]] = prog[srs[-1]], prog[srs[0]]
    Ws, bs = _params(desc, 1)
    ring.init(Ws, bs)
    with pytest.raises(ValueError, match="no core of the ring can go on"):
        ring.ring_step(np.zeros((8, 16), np.float32), np.zeros(8, np.int64), 1)


def test_errors():
    desc = MLP(layers=(16, 16, 16, 4), batch=8, micro_batches=2, optimizer=Adam())
    with pytest.raises(ValueError, match="stages must be 2"):
        RingPipeline(desc, dataclasses.replace(CFG, ranks=3), 3)
    with pytest.raises(ValueError, match="config.ranks must be 2"):
        RingPipeline(desc, dataclasses.replace(CFG, ranks=3))
    with pytest.raises(ValueError, match="schedule"):
        RingPipeline(desc, CFG, schedule="interleaved")
    with pytest.raises(ValueError, match="timeout"):
        RingPipeline(desc, CFG, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        RingPipeline(desc, CFG, timeout=1 << 24)
    # 128-row micro-batches: each stash slot alone takes 4,096 of the 16,384 lines
    with pytest.raises(ValueError, match="stage 0: the inbox, stash and loss slots of 2 "
                                         "micro-batches do not fit"):
        RingPipeline(MLP(layers=(64, 64, 10), batch=256, micro_batches=2, optimizer=Adam()),
                     CFG)
    with pytest.raises(ValueError, match="prog_depth"):
        RingPipeline(desc, dataclasses.replace(CFG, prog_depth=16))
    ring = RingPipeline(desc, CFG)
    with pytest.raises(TypeError, match="ring_step"):
        ring.step(np.zeros((8, 16), np.float32), np.zeros(8, np.int64), 1)
    with pytest.raises(ValueError, match="shapes"):
        ring.step_actions(np.zeros((4, 16), np.float32), np.zeros(4, np.int64), 1)
