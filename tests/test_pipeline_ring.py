"""Pipeline steps run by the cores' own programs (sim/host/pipeline_ring.py) in the golden
model: the ring of MultiCoreModel cores (two, or three and four with reverse links), whose
SENDRECVs move the activations and gradients, against the host-mediated pipeline
(sim/host/pipeline.py) and one core. The RTL ring runs the same programs in
tests/test_training_ring.py."""
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


def _rev(p):
    """The tiny core on a ring of ``p`` with reverse links."""
    return dataclasses.replace(CoreConfig.preset("tiny"), ranks=p, reverse_links=True)


def _params(desc, seed):
    rng = np.random.default_rng(seed)
    Ws = [(rng.standard_normal((a, b)) * 0.3).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    return Ws, bs


def _same(a, b):
    return all(np.array_equal(np.asarray(u, np.float32).view(np.uint32),
                              np.asarray(v, np.float32).view(np.uint32)) for u, v in zip(a, b))


def _equal_to_host_and_one_core(desc, cfg, ring, host, *, steps, seeds):
    """Run ``steps`` on the ring, the host-mediated pipeline and one core (parameters from
    seed ``seeds[0]``, batches from ``seeds[1]``): every step's losses, then the parameters,
    gradients and optimizer state, equal bit for bit; every stage's run ``OK``."""
    one = compile_mlp(dataclasses.replace(desc, one_pass=False),
                      dataclasses.replace(cfg, ranks=1, reverse_links=False))
    core = CoreModel(one.config)
    Ws, bs = _params(desc, seeds[0])
    ring.init(Ws, bs)
    host.init(Ws, bs)
    core.apply(one.init_actions(Ws, bs))
    rng = np.random.default_rng(seeds[1])
    B, layers = desc.batch, desc.layers
    for t in steps:
        x = rng.standard_normal((B, layers[0])).astype(np.float32)
        y = rng.integers(0, layers[-1], B)
        a, b = ring.ring_step(x, y, t), host.step(x, y, t)
        res = core.apply(one.step_actions(x, y, t) + one.read_actions())
        c = one.decode_step(res)
        assert _same([a["losses"]], [b["losses"]]) and _same([a["losses"]], [c["losses"]]), t
        assert a["run"] == [(0, 0)] * ring.p and not a["skipped"]
    got, ref = ring.read(), host.read()
    one_p = one.decode_params(res)
    for key in got:
        assert _same(got[key]["W"], ref[key]["W"]) and _same(got[key]["b"], ref[key]["b"]), key
    assert _same(got["params"]["W"], one_p[0]) and _same(got["params"]["b"], one_p[1])


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
    _equal_to_host_and_one_core(desc, CFG, ring, host, steps=(1, 2, 3), seeds=(3, 4))
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


# ---- p stages on a ring with reverse links ---------------------------------------------------

@pytest.mark.parametrize("p,layers,m,bounds,schedule", [
    (3, (16, 12, 8, 12), 4, None, "gpipe"),
    (3, (16, 12, 8, 12), 4, None, "1f1b"),
    (4, (8, 12, 8, 8, 6), 3, None, "gpipe"),
    (4, (8, 12, 8, 8, 6, 4), 5, (0, 2, 3, 4, 5), "1f1b")])
def test_p_stage_ring_equals_host_pipeline_and_one_core(p, layers, m, bounds, schedule):
    """p = 3, 4 stages on a ring of p cores with reverse links (one with a stage of two
    layers, one with layer widths that are not multiples of S, so padding lanes cross the
    links): two steps, losses, parameters, gradients and optimizer state equal the
    host-mediated pipeline's and one core's, bit for bit; the activations went forward on
    links 0 .. p-2, the gradients back on reverse links 1 .. p-1, as many words as the host
    copied."""
    desc = MLP(layers=layers, batch=4 * m, micro_batches=m, optimizer=Adam(lr=1e-2))
    cfg = _rev(p)
    ring = RingPipeline(desc, cfg, bounds=bounds, schedule=schedule)
    host = Pipeline(desc, cfg, p, bounds=bounds, schedule=schedule)
    _equal_to_host_and_one_core(desc, cfg, ring, host, steps=(1, 2), seeds=(5, 6))
    B = desc.batch
    # per step and direction, B rows of the width at each stage boundary: whole lines on the
    # links (padding lanes included), the elements in the host's copies
    widths = [layers[k] for k in ring.bounds[1:-1]]
    lines = [2 * B * -(-w // CFG.size) * CFG.size for w in widths]
    assert ring.multi.sendrecv_words == lines + [0]
    assert ring.multi.sendrecv_words_rev == [0] + lines
    assert ring.link_words == 2 * sum(lines)
    assert host.link_words == 2 * 2 * B * sum(widths)


def _skeleton(prog):
    """A step program's SENDRECVs alone, then HALT: the transfers without the passes."""
    return [w for w in prog if decode(w)[0] == Op.SENDRECV] + [encode(Op.HALT)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_p_stage_programs_are_deadlock_free(schedule):
    """Every p = 2, 3, 4 and m = 1 .. 5 (warm-ups clipped by m included): the stages'
    SENDRECVs alone run to their HALTs in the ring model (which reports any deadlock or
    length mismatch), every transfer's direction and partner as the module says, and the
    words per link are m times a micro-batch's activation (forward) or input gradient
    (reverse)."""
    for p in (2, 3, 4):
        for m in range(1, 6):
            desc = MLP(layers=(8,) * p + (4,), batch=4 * m, micro_batches=m, optimizer=Adam())
            ring = RingPipeline(desc, _rev(p), schedule=schedule)
            for s, prog in enumerate(ring.ring_programs):
                io = ring.io[s]
                for f in (f for op, f in map(decode, prog) if op == Op.SENDRECV):
                    # activations forward from the output (not on the last stage), input
                    # gradients back from dx (not on stage 0); received alike
                    if f["lines"]:
                        assert (s < p - 1 and f["a"] == io["output"][0]) if f["sdir"] == 0 \
                            else (s > 0 and f["a"] == io["dx"][0]), (p, m, s, f)
                    if f["rlines"]:
                        assert (s > 0 and f["b"] == io["input"][0]) if f["rdir"] == 0 else \
                            (s < p - 1 and f["b"] in (io["output"][0], ring.grad_inbox[s])), \
                            (p, m, s, f)
                ring.multi.cores[s].load_program(_skeleton(prog))
            assert ring.multi.run() == [(0, 0)] * p, (p, m)
            words = m * 4 * 8                      # 4 rows x 8 columns per micro-batch
            assert ring.multi.sendrecv_words == [words] * (p - 1) + [0], (p, m)
            assert ring.multi.sendrecv_words_rev == [0] + [words] * (p - 1), (p, m)


def test_p_stage_1f1b_fuses_neighbour_exchanges():
    """1F1B, p = 3, m = 4: stage s runs min(p - 1 - s, m) warm-up forwards; every F followed
    by a B exchanges with the next stage in one SENDRECV (send forward, receive back:
    sdir 0, rdir 1), every B followed by an F with the previous one (send back, receive
    forward: sdir 1, rdir 0); stash slots min(p - s, m). Unfusing the middle stage's first
    exchange with the head on both stages (send first, then receive) deadlocks the model."""
    desc = MLP(layers=(8, 8, 8, 4), batch=16, micro_batches=4, optimizer=Adam())
    ring = RingPipeline(desc, _rev(3), schedule="1f1b")
    assert [len(v) for v in ring.stash_slots] == [3, 2, 1]
    assert [g is not None for g in ring.grad_inbox] == [True, True, False]
    kinds = []
    for s in range(3):
        srs = [f for op, f in map(decode, ring.ring_programs[s]) if op == Op.SENDRECV]
        kinds.append(" ".join((f"s{f['sdir']}" if f["lines"] else "")
                              + (f"r{f['rdir']}" if f["rlines"] else "") for f in srs))
    assert kinds == ["s0 s0 s0r1 s0r1 r1 r1",                      # F0 F1 F2 B0 F3 B1 B2 B3
                     "r0 s0 r0 s0r1 s1r0 s0r1 s1r0 s0r1 s1 r1 s1",  # F0 F1 B0 F2 B1 F3 B2 B3
                     "r0 s1r0 s1r0 s1r0 s1"]                        # F0 B0 F1 B1 .. B3
    # the first exchange of stages 1 and 2, unfused on both (send, then receive): each send
    # waits for the other core's receive (one side alone unfused still meets the other's
    # fused command part by part)
    for s in (1, 2):
        prog = ring.ring_programs[s]
        i = next(k for k, w in enumerate(prog) if decode(w)[0] == Op.SENDRECV and
                 decode(w)[1]["lines"] and decode(w)[1]["rlines"])
        f = decode(prog[i])[1]
        prog[i:i + 1] = [encode(Op.SENDRECV, a=f["a"], lines=f["lines"], sdir=f["sdir"],
                                timeout=f["timeout"]),
                         encode(Op.SENDRECV, b=f["b"], rlines=f["rlines"], rdir=f["rdir"],
                                timeout=f["timeout"])]
    for s in range(3):
        ring.multi.cores[s].load_program(_skeleton(ring.ring_programs[s]))
    with pytest.raises(ValueError, match="no core of the ring can go on.*rank 1 waits at a "
                                         "SENDRECV \\(its send part\\), sending to rank 2 "
                                         "\\(sdir = 0\\), rank 2 waits at a SENDRECV "
                                         "\\(its send part\\), sending to rank 1 "
                                         "\\(sdir = 1\\)"):
        ring.multi.run()


def test_p_stage_errors():
    """More than two stages need reverse links; stages must equal config.ranks."""
    desc = MLP(layers=(8, 8, 8, 4), batch=8, micro_batches=2, optimizer=Adam())
    no_rev = dataclasses.replace(_rev(3), reverse_links=False)
    with pytest.raises(ValueError, match="3 stages on the ring needs reverse links "
                                         "\\(config.reverse_links"):
        RingPipeline(desc, no_rev)
    with pytest.raises(ValueError, match="needs reverse links"):
        RingPipeline(desc, no_rev, 3, schedule="1f1b")
    with pytest.raises(ValueError, match="stages \\(2\\) must equal config.ranks \\(3\\)"):
        RingPipeline(desc, _rev(3), 2)
    with pytest.raises(ValueError, match="stages \\(3\\) must equal config.ranks \\(2\\)"):
        RingPipeline(desc, CFG, 3)
    assert RingPipeline(desc, _rev(3)).p == 3
