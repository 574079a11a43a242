"""Fast tier: the collective engine's ring all-reduce and point-to-point SENDRECV in Amaranth's
simulator (hdl/multi/collective.py in the ring top hdl/multi/ring.py), bit-exact with
sim/model/collective.py, for N = 2, 3 and 4."""
import functools

import numpy as np
import pytest

from hdl.bfp.converter import Rounding
from hdl.config import BFPConfig
from hdl.fp32.config import FP32Config
from hdl.multi.collective import CollectiveEngine
from hdl.multi.config import (CollComp, CollectiveConfig, CollOp, CollStatus, LinkConfig,
                              RingConfig)
from hdl.lib.memport import WordToLine
from hdl.multi.ring import CollectiveRing, WordMemory
from sim.model.collective import CollectiveModel, bfp_allreduce_bound
from sim.model.fp32 import f32_to_bits
from sim.tb.amaranth_tb import ReusableSim
from sim.tb.collective_tb import check_ring, command, disjoint_regions, run_ring

DEPTH = 24
FP32 = FP32Config.preset("tiny")
#: groups of 4 (the converters of the default, groups of 16, make each test 4-6 s slower)
BFP = BFPConfig.preset("tiny")


def _ring(N, width=32, latency=2, fifo_depth=4, fp32=FP32, reverse=False,
          mem_latency=1, cmd_reg=False, rx_reg=False) -> ReusableSim:
    """The simulation of the ring of this configuration, for :func:`run_ring` and
    :func:`check_ring` (its ring: ``.dut``): one per configuration (:func:`_ring_sim`).
    ``latency`` is the links', ``mem_latency`` the engines' memory ports'."""
    cfg = RingConfig(collective=CollectiveConfig(ranks=N, depth=DEPTH, bfp=BFP, reverse=reverse,
                                                 mem_latency=mem_latency, cmd_reg=cmd_reg,
                                                 rx_reg=rx_reg),
                     link=LinkConfig(width=width, latency=latency, fifo_depth=fifo_depth))
    return _ring_sim(cfg, fp32)


@functools.cache
def _ring_sim(cfg, fp32) -> ReusableSim:
    """One ring per configuration: the tests of a configuration share its elaborated
    simulation, every run started from the initial state (``run_ring`` loads the memories)."""
    return ReusableSim(CollectiveRing(config=cfg, fp32_config=fp32), testbenches=1,
                       processes=1)


def _images(seed, N):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, DEPTH)) * 2.0 ** rng.integers(-6, 7, (N, DEPTH))
    return [f32_to_bits(v.astype(np.float32)) for v in x]


_check = check_ring


#: (base, length, seg): divisible, not divisible, length < N (empty segments), one word,
#: uneven seg larger than needed, the whole memory
def _cases(N):
    return [(0, 4 * N, 4), (3, 4 * N + 1, 5), (2, N - 1, 1), (DEPTH - 1, 1, 1),
            (1, 2 * N, 3), (0, DEPTH, -(-DEPTH // N))]


@pytest.mark.parametrize("N,fp32", [(2, "default"), (4, "tiny")])
def test_allreduce_bit_exact(N, fp32):
    """Every case in sequence on one ring; the default FP32 preset's 7-cycle adder (N = 2)
    and the tiny preset's 1-cycle adder (N = 4)."""
    cmds = [command(base=b, length=n, seg=s, timeout=200) for b, n, s in _cases(N)]
    _check(_ring(N, fp32=FP32Config.preset(fp32)), _images(10 + N, N), cmds)


@pytest.mark.parametrize("N,width", [(2, 8), (4, 16)])
def test_allreduce_random_backpressure_on_every_link(N, width):
    """Every gate of every link stalls at random half the time; nothing is lost or
    duplicated (bit-exact memories, exact flit counts, no FIFO overflow)."""
    cmds = [command(base=1, length=3 * N + 2, seg=4, timeout=200),
            command(base=0, length=N - 1, seg=1, timeout=200)]
    run = _check(_ring(N, width=width, latency=3, fifo_depth=3), _images(20 + N, N), cmds,
                 stall_prob=0.5, seed=N)
    assert run.stalled_cycles > run.cycles // 2


def test_random_commands_three_ranks():
    """N = 3 (not a power of two: the rank arithmetic wraps by compare, not by mask), links
    of latency 0 with a one-entry FIFO and 16-bit flits, 8 random commands (some invalid)
    under random stalls."""
    rng = np.random.default_rng(33)
    cmds = []
    for _ in range(8):
        length = int(rng.integers(0, DEPTH + 2))
        base = int(rng.integers(0, DEPTH - min(length, DEPTH - 1)))
        seg = int(rng.integers(0, -(-length // 3) + 3))      # around the smallest legal
        cmds.append(command(base=base, length=length, seg=seg, timeout=300))
    run = _check(_ring(3, width=16, latency=0, fifo_depth=1), _images(33, 3), cmds,
                 stall_prob=0.3, seed=33)
    statuses = {g[0]["status"] for g in run.responses}
    assert CollStatus.OK in statuses and statuses - {CollStatus.OK}, statuses


def test_allreduce_special_values():
    N = 4
    specials = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                         0x7F800001, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF],
                        dtype=np.uint32)
    rng = np.random.default_rng(5)
    images = [rng.choice(specials, DEPTH) for _ in range(N)]
    images[0][:4] = images[1][:4] = images[2][:4] = images[3][:4] = 0x80000000   # -0 sums
    images[0][4], images[1][4], images[2][4], images[3][4] = 0x7F800000, 0xFF800000, 0, 0
    _check(_ring(N), images, [command(base=0, length=DEPTH, seg=6, timeout=200)])


@pytest.mark.parametrize("cmd_reg", [False, True])
def test_bad_commands_change_nothing(cmd_reg):
    """Each invalid command answered at once with its status, nothing written (also with the
    checks in register stages, ``cmd_reg``); then a valid one runs."""
    N = 2
    cmds = [command(base=0, length=4, seg=2, timeout=50, op=2),
            command(base=0, length=0, seg=2, timeout=50),
            command(base=DEPTH - 3, length=4, seg=2, timeout=50),
            command(base=0, length=5, seg=2, timeout=50),
            command(base=0, length=4, seg=0, timeout=50),
            command(base=0, length=4, seg=2, timeout=0),
            command(base=0, length=5, seg=3, timeout=50)]          # valid: runs after all
    run = _check(_ring(N, cmd_reg=cmd_reg), _images(3, N), cmds)
    assert [g[0]["status"] for g in run.responses] == [
        CollStatus.BAD_OP, CollStatus.BAD_LEN, CollStatus.BAD_LEN, CollStatus.BAD_SEG,
        CollStatus.BAD_SEG, CollStatus.BAD_TIMEOUT, CollStatus.OK]
    assert all(g[0]["cycles"] == 0 for g in run.responses[:-1])


@pytest.mark.parametrize("mem_latency,regs", [(2, False),
                                              pytest.param(3, True, marks=pytest.mark.long),
                                              (4, True)])
def test_registered_memory_port(mem_latency, regs):
    """The engines' memory ports as registered scratchpad clients (``mem_latency`` 2, 3 and 4,
    the training core's FPGA build, with its command and receive registers): plain, BFP and
    SENDRECV commands under random stalls on every link; every memory bit-exact with the
    model, and every word reaching each step's add and each transmit FIFO at the latency's
    cycle (a word taken a cycle early or late breaks the sums)."""
    N = 3
    rng = np.random.default_rng(90 + mem_latency)
    cmds = [command(base=1, length=3 * N + 2, seg=4, timeout=300),
            command(base=0, length=2 * BFP.group_size * N, seg=2 * BFP.group_size,
                    timeout=300, comp=CollComp.BFP, width=4),
            _sendrecv(N, _random_regions(rng, [5, 7, 3])),
            command(base=0, length=DEPTH, seg=-(-DEPTH // N), timeout=300)]
    run = _check(_ring(N, width=16, latency=2, fifo_depth=3, mem_latency=mem_latency,
                       cmd_reg=regs, rx_reg=regs),
                 _images(90 + mem_latency, N), cmds, stall_prob=0.3, seed=mem_latency)
    assert all(g["status"] == CollStatus.OK for resp in run.responses for g in resp)


def test_command_registers_take_three_cycles():
    """``cmd_reg``: the same commands (a valid one, and an invalid one answered at once),
    the same words and statuses, and each command's response exactly three cycles later (the
    register, then the checks' two stages; the engine's ``cycles`` count from its start, so
    they are the same)."""
    N = 2
    cmds = [command(base=0, length=4 * N, seg=4, timeout=200),
            command(base=0, length=0, seg=1, timeout=200)]
    runs = [run_ring(_ring(N, cmd_reg=reg), _images(96, N), cmds) for reg in (False, True)]
    for r in range(N):
        np.testing.assert_array_equal(runs[0].memories[r], runs[1].memories[r])
    assert runs[0].responses == runs[1].responses
    t0, t1 = (run.latency for run in runs)
    assert [[b - a for a, b in zip(x, y)] for x, y in zip(t0, t1)] == [[3] * N] * 2, (t0, t1)


def test_registered_memory_port_is_slower_by_its_latency():
    """The same all-reduce with the memory port's latency 1 and 3, links never stalled: the
    words are the same, and the registered port adds cycles (each step waits for its reads)
    without changing the status."""
    N = 2
    cmd = command(base=0, length=4 * N, seg=4, timeout=200)
    runs = [run_ring(_ring(N, mem_latency=ml), _images(95, N), [cmd]) for ml in (1, 3)]
    for r in range(N):
        np.testing.assert_array_equal(runs[0].memories[r], runs[1].memories[r])
    c1, c3 = (run.responses[0][0]["cycles"] for run in runs)
    assert c1 < c3 <= c1 + 4 * (2 * N - 1), (c1, c3)


@pytest.mark.parametrize("N,stop,mem_latency", [(2, ("rx", 1), 1), (4, ("tx", 2), 1),
                                                (3, ("rx", 2), 3), (2, ("tx", 1), 4)])
def test_stopped_link_reports_timeout(N, stop, mem_latency):
    """A link that stops delivering: every engine answers TIMEOUT (none hangs), after at
    least ``timeout`` cycles, and then accepts the next command (also with the memory port's
    reads in flight when the run is aborted: ``mem_latency`` 3)."""
    timeout = 40
    cmds = [command(base=0, length=4 * N, seg=4, timeout=timeout),
            command(base=0, length=0, seg=1, timeout=timeout)]
    regs = mem_latency > 1              # the FPGA build's engine: its timing registers too
    run = run_ring(_ring(N, mem_latency=mem_latency, cmd_reg=regs, rx_reg=regs), _images(4, N),
                   cmds, stop=[stop], deadline=2000)
    first, second = run.responses
    assert [g["status"] for g in first] == [CollStatus.TIMEOUT] * N, first
    assert all(g["cycles"] >= timeout for g in first)
    assert all(g["step"] < 2 * (N - 1) for g in first)
    assert [g["status"] for g in second] == [CollStatus.BAD_LEN] * N
    assert run.overflow == 0


def test_link_stopping_before_the_local_step_reports_timeout():
    """BFP, N = 2: rank 0's transmit gate stops for good at a later cycle in each run (every
    4th cycle of the command, until the first such run below). Every run answers (no hang),
    every answer is OK or TIMEOUT, and once the stop comes after rank 0 handed its last words
    to its codec but before the codec sent them, rank 0 times out at the local step (step
    N - 1, state FLUSH: the loop may not close over unsent flits) and rank 1, whose words
    never came, in the reduce-scatter's last step."""
    N, G, timeout = 2, BFP.group_size, 40
    cmd = command(base=0, length=2 * G * N, seg=2 * G, timeout=timeout, comp=CollComp.BFP,
                  width=4)
    ref = run_ring(_ring(N, width=8), _images(7, N), [cmd])
    assert [g["status"] for g in ref.responses[0]] == [CollStatus.OK] * N
    seen = []
    for at in range(DEPTH, DEPTH + ref.responses[0][0]["cycles"], 4):
        run = run_ring(_ring(N, width=8), _images(7, N), [cmd], stop=[("tx", 0, at)],
                       deadline=2000)
        got = run.responses[0]
        seen.append([(g["status"], g["step"]) for g in got])
        assert {g["status"] for g in got} <= {CollStatus.OK, CollStatus.TIMEOUT}, (at, got)
        if got[0]["status"] == CollStatus.TIMEOUT and got[0]["step"] == N - 1:
            assert got[0]["cycles"] >= timeout
            assert (got[1]["status"], got[1]["step"]) == (CollStatus.TIMEOUT, N - 2)
            break
    else:
        raise AssertionError(f"no run timed out at the local step: {seen}")


def _region_equal(run, base, length):
    N = len(run.memories)
    return all(np.array_equal(run.memories[0][base:base + length],
                              run.memories[r][base:base + length]) for r in range(N))


@pytest.mark.parametrize("N,flit", [(2, 8), (4, 32)])
def test_allreduce_bfp_compressed(N, flit):
    """BFP link compression (groups of 4) at every width (N = 2; 2 and 8 at N = 4), under
    random stalls: bit-exact with
    the model (quantize + dequantize on every hop), the same result on every rank (the local
    step), and the flits of the formula."""
    G = BFP.group_size
    widths = BFP.widths if N == 2 else (2, 8)
    cmds = [command(base=0, length=G * N, seg=G, timeout=300, comp=CollComp.BFP, width=w)
            for w in widths]
    # segments of two groups, the last one empty; then one group (segments past it empty)
    cmds.append(command(base=0, length=2 * G * (N - 1), seg=2 * G, timeout=300,
                        comp=CollComp.BFP, width=6))
    cmds.append(command(base=G, length=G, seg=G, timeout=300, comp=CollComp.BFP, width=8))
    run = _check(_ring(N, width=flit, latency=1, fifo_depth=4), _images(40 + N, N), cmds,
                 stall_prob=0.3, seed=N)
    assert all(g["status"] == CollStatus.OK for resp in run.responses for g in resp)
    assert _region_equal(run, 0, 2 * G * (N - 1))


@pytest.mark.parametrize("N,flit,lockstep", [(2, 8, True), (3, 16, False)])
def test_allreduce_bfp_every_rounding_mode(N, flit, lockstep):
    """BFP links with the converters' three rounding modes under random stalls (N = 3: each
    rank takes its next command as soon as it answered): bit-exact with the model, whose
    per-rank LFSRs step for every group a rank sends or loops back, in every mode, from one
    command to the next (a nearest-even command first, a plain one between); every rank ends
    with the same words (the all-gather relays the owner's one quantization). The stochastic
    commands do round otherwise than nearest-even would (the same commands with rounding 0
    give other words)."""
    G = BFP.group_size
    L = G * N
    sr, tr = Rounding.STOCHASTIC.value, Rounding.TRUNCATE.value
    cmds = [command(base=0, length=L, seg=G, timeout=300, comp=CollComp.BFP, width=4),
            command(base=0, length=5, seg=3, timeout=300),                        # FP32
            command(base=L, length=L, seg=G, timeout=300, comp=CollComp.BFP, width=4,
                    rounding=sr),
            command(base=2 * L if 3 * L <= DEPTH else 0, length=L - 1, seg=G, timeout=300,
                    comp=CollComp.BFP, width=2, rounding=sr),                    # ragged
            command(base=0, length=L, seg=G, timeout=300, comp=CollComp.BFP, width=6,
                    rounding=tr)]
    images = _images(80 + N, N)
    run = _check(_ring(N, width=flit, latency=1, fifo_depth=4), images, cmds,
                 stall_prob=0.3, seed=N, lockstep=lockstep)
    assert all(g["status"] == CollStatus.OK for resp in run.responses for g in resp)
    assert _region_equal(run, 0, 2 * L)
    assert 3 * L > DEPTH or _region_equal(run, 2 * L, L - 1)
    nearest = CollectiveModel(CollectiveConfig(ranks=N, depth=DEPTH, bfp=BFP))
    for r in range(N):
        nearest.mem[r][:] = images[r]
    for c in cmds:
        nearest.execute({**c, "rounding": 0})
    assert not np.array_equal(nearest.mem[0][L:2 * L], run.memories[0][L:2 * L])


def test_ranks_drift_apart_and_modes_change():
    """Each rank takes its next command as soon as it answered (not in lockstep), and the
    commands alternate plain and BFP at different widths: a rank's last groups of one command
    still in its codec, or the next command's flits arriving early, must not mix modes."""
    N, G = 2, BFP.group_size
    cmds = []
    for k, (comp, w) in enumerate([(CollComp.BFP, 8), (CollComp.NONE, 0), (CollComp.BFP, 2),
                                   (CollComp.BFP, 6), (CollComp.NONE, 0), (CollComp.BFP, 4)]):
        cmds.append(command(base=k, length=2 * G * N - (comp == CollComp.NONE),
                            seg=2 * G, timeout=300, comp=comp, width=w))
    _check(_ring(N, width=8, latency=2, fifo_depth=3), _images(60, N), cmds, stall_prob=0.3,
           seed=60, lockstep=False)


def test_bfp_nonfinite_groups_cross_as_nan_groups_and_are_flagged():
    """A NaN in rank 0's group 0 and a -Inf in rank 1's group 1: both groups arrive as
    canonical NaNs on both ranks (a NaN group, docs/multicore.md); each rank flags what it
    sent (every word and flag checked against the model by ``_check``)."""
    N, G = 2, BFP.group_size
    images = _images(50, N)
    images[0][1] = 0x7FC00000            # NaN in group 0 of rank 0
    images[1][G + 2] = 0xFF800000        # -Inf in group 1 of rank 1
    run = _check(_ring(N), images, [command(base=0, length=2 * G, seg=G, timeout=300,
                                            comp=CollComp.BFP, width=4)])
    assert [g["flags"] for g in run.responses[0]] != [0, 0]
    assert _region_equal(run, 0, 2 * G)
    for r in range(N):
        assert np.all(run.memories[r][:2 * G] == 0x7FC00000)


def test_bfp_bad_commands():
    N, G = 2, BFP.group_size
    bfp = dict(timeout=100, comp=CollComp.BFP)
    cmds = [command(base=0, length=2 * G, seg=G, width=3, **bfp),           # odd width
            command(base=0, length=2 * G, seg=G, width=10, **bfp),          # too wide
            command(base=0, length=2 * G, seg=G, width=0, **bfp),
            command(base=0, length=0, seg=G, width=4, **bfp),               # empty
            command(base=0, length=2 * G, seg=G - 1, width=4, **bfp),       # seg * N < length
            command(base=0, length=2 * G, seg=G, width=4, rounding=3, **bfp),  # no mode 3
            command(base=0, length=2 * G, seg=G, width=3, timeout=100),     # no BFP: width free
            command(base=0, length=2 * G, seg=G, rounding=3, timeout=100)]  # and rounding
    run = _check(_ring(N), _images(6, N), cmds)
    assert [g[0]["status"] for g in run.responses] == [
        CollStatus.BAD_COMP, CollStatus.BAD_COMP, CollStatus.BAD_COMP, CollStatus.BAD_LEN,
        CollStatus.BAD_SEG, CollStatus.BAD_COMP, CollStatus.OK, CollStatus.OK]


@pytest.mark.parametrize("N", [2, 3])
def test_bfp_ragged_lengths_and_segments(N):
    """BFP with a length and segments that are not whole groups (docs/multicore.md): each
    segment crosses the link padded with +0 to whole groups and the padding is dropped on
    receive. Bit-exact with the model under random stalls (every word, status and the flits
    of the formula: ceil(n / G) groups per segment), the same result on every rank, the
    words just past the vector untouched on every rank, and the results without the NaN
    within :func:`~sim.model.collective.bfp_allreduce_bound` of the exact sum."""
    G = BFP.group_size
    # (base, length, seg): ragged segments (N = 2: 5 and 4 words; N = 3: three of 3); a
    # vector short of two groups (4 and 3; 3, 3 and 1); one segment of G + 1, the rest empty
    regions = [(0, 2 * G + 1, -(-(2 * G + 1) // N)), (10, 2 * G - 1, -(-(2 * G - 1) // N)),
               (18, G + 1, G + 1)]
    cmds = [command(base=b, length=n, seg=sg, timeout=300, comp=CollComp.BFP, width=w)
            for (b, n, sg), w in zip(regions, (4, 8, 2))]
    images = _images(80 + N, N)
    images[1][12] = 0x7FC00000             # a NaN group whose padding is dropped
    run = _check(_ring(N, width=8, latency=1, fifo_depth=3), images, cmds, stall_prob=0.3,
                 seed=N)
    assert all(g["status"] == CollStatus.OK for resp in run.responses for g in resp)
    for (b, n, sg), w in zip(regions, (4, 8, 2)):
        assert _region_equal(run, b, n)
        for r in range(N):
            assert run.memories[r][b + n] == images[r][b + n], (r, b + n)
        if b <= 12 < b + n:
            continue                       # the NaN's region
        # the RTL's result is within the documented bound of the exact sum
        ins = [img[b:b + n] for img in images]
        exact = np.sum([v.view(np.float32).astype(np.float64) for v in ins], axis=0)
        err = np.abs(run.memories[0][b:b + n].view(np.float32).astype(np.float64) - exact)
        assert np.all(err <= bfp_allreduce_bound(ins, sg, (BFP, w))), (b, n)


def test_engine_rejects_wrong_configs():
    with pytest.raises(TypeError, match="config must be a CollectiveConfig"):
        CollectiveEngine(config=LinkConfig())
    with pytest.raises(TypeError, match="fp32_config must be an FP32Config"):
        CollectiveEngine(fp32_config=CollectiveConfig())
    with pytest.raises(TypeError, match="config must be a RingConfig"):
        CollectiveRing(config=CollectiveConfig())
    with pytest.raises(ValueError, match="WordMemory.depth"):
        WordMemory(depth=1)
    with pytest.raises(ValueError, match="WordMemory.latency"):
        WordMemory(depth=4, latency=5)
    with pytest.raises(ValueError, match="WordToLine.latency"):
        WordToLine(word_bits=8, line_bits=4, words=4, latency=0)
    with pytest.raises(ValueError, match="WordToLine.latency"):
        WordToLine(word_bits=8, line_bits=4, words=4, latency=4)
    assert CollOp.ALL == (CollOp.ALLREDUCE, CollOp.SENDRECV)


# ---- SENDRECV (point-to-point) ---------------------------------------------------------------

#: FP32 bit patterns a copy must keep: NaN payloads (quiet, signalling, negative), -0, ±Inf,
#: subnormals, the largest finite values
SPECIALS = np.array([0x7F800001, 0x7FC12345, 0xFFFFFFFF, 0xFF800001, 0x7FC00000, 0x80000000,
                     0x00000000, 0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF],
                    dtype=np.uint32)


def _bit_images(seed, N):
    """Random 32-bit patterns, about 40 % of them from SPECIALS."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(N):
        words = rng.integers(0, 1 << 32, DEPTH, dtype=np.uint64).astype(np.uint32)
        out.append(np.where(rng.random(DEPTH) < 0.4, rng.choice(SPECIALS, DEPTH), words))
    return out


def _sendrecv(N, regions, timeout=200):
    """Per-rank SENDRECV: ``regions[r] = (base, length, rbase, rlength)``."""
    b, n, rb, rn = (list(x) for x in zip(*regions))
    assert len(b) == N
    return command(op=CollOp.SENDRECV, base=b, length=n, rbase=rb, rlength=rn, timeout=timeout)


def _random_regions(rng, lengths):
    """Rank ``r`` sends ``lengths[r]`` words to rank ``r + 1``: random disjoint send and
    receive regions on every rank."""
    N = len(lengths)
    return disjoint_regions(rng, DEPTH, lengths, [lengths[(r - 1) % N] for r in range(N)])


def _assert_copied(run, images, regions):
    """Independent of the model, for a run of this one SENDRECV: rank ``r + 1``'s receive
    region holds rank ``r``'s sent words, every other word is as loaded."""
    N = len(images)
    for r in range(N):
        b, n, _, _ = regions[r]
        nxt = (r + 1) % N
        _, _, rb, rn = regions[nxt]
        assert n == rn
        np.testing.assert_array_equal(run.memories[nxt][rb:rb + rn], images[r][b:b + n],
                                      err_msg=f"rank {r} -> {nxt}")
        keep = np.ones(DEPTH, bool)
        keep[regions[r][2]:regions[r][2] + regions[r][3]] = False
        np.testing.assert_array_equal(run.memories[r][keep], images[r][keep],
                                      err_msg=f"rank {r} outside its receive region")


@pytest.mark.parametrize("N", [2, 3])
def test_sendrecv_bit_copy_random_backpressure(N):
    """Random bit patterns (NaN payloads, -0, infinities, subnormals: a bit copy) sent around
    the ring, every gate of every link stalling at random 40 % of the cycles: three commands,
    different lengths per rank and random disjoint regions (the last one a pipeline's forward
    pass: rank 0 only sends, rank N - 1 only receives); every word of every rank against the
    model, and the first command (alone) against the loaded words directly."""
    rng = np.random.default_rng(70 + N)
    images = _bit_images(70 + N, N)
    first = _random_regions(rng, [7, 5, 9][:N])
    cmds = [_sendrecv(N, first),
            _sendrecv(N, _random_regions(rng, [11, 1, 4][:N])),
            _sendrecv(N, _random_regions(rng, [6] * (N - 1) + [0]))]
    dut = _ring(N, width=8, latency=2, fifo_depth=3)
    run = _check(dut, images, cmds, stall_prob=0.4, seed=N)
    assert run.stalled_cycles > run.cycles // 2
    assert all(g["status"] == CollStatus.OK for resp in run.responses for g in resp)
    _assert_copied(run_ring(_ring(N), images, cmds[:1]), images, first)


def test_sendrecv_exchange_both_directions():
    """N = 2, one command each: rank 0 sends X and receives Y while rank 1 sends Y and
    receives X, different lengths per direction (10 and 12 words), each more than the codecs
    and the link of one direction hold (3 words here: sending all first and receiving after
    would deadlock); then 12 and 9 words with the ranks drifting apart (not in lockstep),
    under random stalls."""
    N = 2
    images = _bit_images(80, N)
    there = [(0, 10, 12, 12), (12, 12, 0, 10)]
    back = [(10, 12, 0, 9), (1, 9, 12, 12)]
    cmds = [_sendrecv(N, there), _sendrecv(N, back)]
    _check(_ring(N, width=8, latency=3, fifo_depth=2), images, cmds, stall_prob=0.3, seed=80,
           lockstep=False)
    _assert_copied(run_ring(_ring(N, width=8, latency=3, fifo_depth=2), images, cmds[:1]),
                   images, there)


def test_sendrecv_one_way_and_allreduce_around_it():
    """N = 2: a BFP all-reduce, then send-only on one rank paired with receive-only on the
    next (both ways), a plain all-reduce, a two-way SENDRECV, another BFP all-reduce at
    another width: the mode goes BFP -> NONE -> BFP through the CODEC state and every
    command's words land as the model says (flit counts per link too)."""
    N, G = 2, BFP.group_size
    allreduce_bfp = dict(base=0, length=2 * G, seg=G, timeout=300, comp=CollComp.BFP)
    cmds = [command(width=4, **allreduce_bfp),
            _sendrecv(N, [(3, 5, 0, 0), (0, 0, 10, 5)]),             # 0 -> 1 only
            _sendrecv(N, [(0, 0, 20, 4), (8, 4, 0, 0)]),             # 1 -> 0 only
            command(base=1, length=2 * N + 3, seg=4, timeout=300),
            _sendrecv(N, [(16, 3, 0, 6), (0, 6, 21, 3)]),
            command(width=8, **allreduce_bfp)]
    run = _check(_ring(N, width=8, latency=2, fifo_depth=4), _images(90, N), cmds,
                 stall_prob=0.3, seed=90)
    assert all(g["status"] == CollStatus.OK for resp in run.responses for g in resp)
    assert _region_equal(run, 0, 2 * G)


@pytest.mark.parametrize("cmd_reg", [False, True])
def test_sendrecv_bad_commands(cmd_reg):
    """Every rank gets the same command. BAD_COMP (BFP at a valid and an invalid width),
    BAD_LEN (both lengths 0; either region past the memory; overlapping regions, either
    order and one inside the other), BAD_TIMEOUT, BAD_OP for ops 2 and 3: each answered at
    once (cycles 0), nothing written; then regions that touch without overlapping (either
    order), one ending exactly at the memory's end and ``seg = 0`` (never BAD_SEG) run. Also
    with the checks in register stages (``cmd_reg``)."""
    N = 2
    sr = dict(op=CollOp.SENDRECV, timeout=100)
    bad = [(command(base=0, length=4, rbase=8, rlength=4, comp=CollComp.BFP, width=4, **sr),
            CollStatus.BAD_COMP),
           (command(base=0, length=4, rbase=8, rlength=4, comp=CollComp.BFP, width=3, **sr),
            CollStatus.BAD_COMP),
           (command(base=0, length=0, rbase=8, rlength=0, **sr), CollStatus.BAD_LEN),
           (command(base=DEPTH - 3, length=4, rbase=0, rlength=4, **sr), CollStatus.BAD_LEN),
           (command(base=0, length=4, rbase=DEPTH - 3, rlength=4, **sr), CollStatus.BAD_LEN),
           (command(base=4, length=6, rbase=9, rlength=6, **sr), CollStatus.BAD_LEN),
           (command(base=9, length=6, rbase=4, rlength=6, **sr), CollStatus.BAD_LEN),
           (command(base=4, length=10, rbase=6, rlength=2, **sr), CollStatus.BAD_LEN),
           (command(base=0, length=4, rbase=8, rlength=4, op=CollOp.SENDRECV, timeout=0),
            CollStatus.BAD_TIMEOUT),
           (command(base=0, length=4, rbase=8, rlength=4, op=2, timeout=100),
            CollStatus.BAD_OP),
           # no reverse links: either direction bit is BAD_DIR, after BAD_COMP, before BAD_LEN
           (command(base=0, length=4, rbase=8, rlength=4, sdir=1, **sr), CollStatus.BAD_DIR),
           (command(base=0, length=4, rbase=8, rlength=4, rdir=1, **sr), CollStatus.BAD_DIR),
           (command(base=0, length=0, rbase=8, rlength=0, sdir=1, rdir=1, **sr),
            CollStatus.BAD_DIR),
           (command(base=0, length=4, rbase=8, rlength=4, comp=CollComp.BFP, width=4, sdir=1,
                    **sr), CollStatus.BAD_COMP),
           (command(base=0, length=4, rbase=8, rlength=4, op=3, timeout=100),
            CollStatus.BAD_OP)]
    good = [command(base=0, length=4, rbase=4, rlength=4, seg=0, **sr),      # [0,4) [4,8)
            command(base=8, length=3, rbase=5, rlength=3, **sr),             # [8,11) [5,8)
            command(base=DEPTH - 4, length=4, rbase=0, rlength=4, width=3, **sr)]
    images = _bit_images(100, N)
    run = _check(_ring(N, cmd_reg=cmd_reg), images, [c for c, _ in bad] + good)
    statuses = [g[0]["status"] for g in run.responses]
    assert statuses == [s for _, s in bad] + [CollStatus.OK] * len(good), statuses
    assert all(g["cycles"] == 0 for resp in run.responses[:len(bad)] for g in resp)
    only_bad = run_ring(_ring(N, cmd_reg=cmd_reg), images, [c for c, _ in bad])
    for r in range(N):
        np.testing.assert_array_equal(only_bad.memories[r], images[r])


def test_sendrecv_receive_without_sender_times_out():
    """N = 2: rank 0 sends 4 words to rank 1 and waits for 3 from rank 1, which sends none:
    rank 1 answers OK, rank 0 TIMEOUT (step 0) within a deadline, after at least ``timeout``
    cycles without progress, having written nothing; then both run an all-reduce, bit-exact
    (nothing was left on the links)."""
    N, timeout = 2, 40
    images = _images(110, N)
    lonely = [(0, 4, 8, 3), (0, 0, 12, 4)]
    cmds = [_sendrecv(N, lonely, timeout=timeout),
            command(base=0, length=4 * N + 1, seg=5, timeout=200)]
    sim = _ring(N)
    run = run_ring(sim, images, cmds, deadline=1000)
    first, second = run.responses
    assert [g["status"] for g in first] == [CollStatus.TIMEOUT, CollStatus.OK], first
    assert first[0]["step"] == 0
    assert timeout <= first[0]["cycles"] < timeout + 60, first
    assert [g["status"] for g in second] == [CollStatus.OK] * N, second
    # what ran: rank 0's words reached rank 1, rank 0 received (and wrote) nothing
    model = CollectiveModel(sim.dut.config.collective)
    for r in range(N):
        model.mem[r][:] = images[r]
    assert model.execute(_sendrecv(N, [(0, 4, 8, 0), (0, 0, 12, 4)])) == [CollStatus.OK] * N
    assert model.allreduce(**cmds[1]) == CollStatus.OK
    for r in range(N):
        np.testing.assert_array_equal(run.memories[r], model.mem[r], err_msg=f"rank {r}")
    assert run.overflow == 0


# ---- SENDRECV over the reverse links (CollectiveConfig.reverse) -----------------------------

def _sendrecv_dir(N, regions, sdir, rdir, timeout=200):
    """Per-rank SENDRECV with directions: ``sdir[r]`` / ``rdir[r]`` = 1 sends to rank
    ``r - 1`` / receives from rank ``r + 1``."""
    cmd = _sendrecv(N, regions, timeout)
    return [dict(c, sdir=s, rdir=d) for c, s, d in zip(cmd, sdir, rdir)]


def test_sendrecv_reverse_links_pipeline_patterns():
    """N = 3 with reverse links, every gate of both rings stalling 35 % of the cycles, 8-bit
    flits: (1) every rank sends back to ``r - 1`` and receives from ``r + 1`` (the reverse
    ring all round); (2) a three-stage pipeline's forward step (0 -> 1 -> 2, rank 2 sends
    nothing), (3) its backward step (2 -> 1 -> 0 on the reverse links, rank 0 receives
    only), (4) a 1F1B exchange fused into one command each on ranks 0 and 1 (0 sends forward
    and receives back, 1 sends back and receives forward, more words each way than a link
    holds) while rank 2 has nothing to do (``BAD_LEN``, changing nothing). The ranks drift
    apart (not in lockstep). Every word of every rank, every status and the flits of every
    forward and reverse link against the model; the first command alone against the
    loaded words (rank ``r - 1`` holds what rank ``r`` sent)."""
    N = 3
    images = _bit_images(120, N)
    back = [(0, 5, 8, 7), (9, 7, 0, 3), (2, 3, 12, 5)]      # rank r sends to r - 1
    fwd = [(0, 6, 0, 0), (1, 9, 12, 6), (0, 0, 3, 9)]       # 0 -> 1 -> 2
    bwd = [(0, 0, 10, 4), (2, 4, 20, 3), (17, 3, 0, 0)]     # 2 -> 1 -> 0, reverse links
    fused = [(0, 11, 12, 10), (12, 10, 0, 11), (0, 0, 0, 0)]
    cmds = [_sendrecv_dir(N, back, [1] * N, [1] * N),
            _sendrecv_dir(N, fwd, [0] * N, [0] * N),
            _sendrecv_dir(N, bwd, [1] * N, [1] * N),
            _sendrecv_dir(N, fused, [0, 1, 0], [1, 0, 0])]
    dut = _ring(N, width=8, latency=2, fifo_depth=2, reverse=True)
    run = _check(dut, images, cmds, stall_prob=0.35, seed=120, lockstep=False)
    statuses = [[g["status"] for g in resp] for resp in run.responses]
    assert statuses[:3] == [[CollStatus.OK] * N] * 3, statuses
    assert statuses[3] == [CollStatus.OK, CollStatus.OK, CollStatus.BAD_LEN], statuses
    assert run.flits_rev == [5 * 4 + 0, 7 * 4 + 4 * 4 + 10 * 4, 3 * 4 + 3 * 4], run.flits_rev
    first = run_ring(_ring(N, reverse=True), images, cmds[:1])
    for r in range(N):
        b, n, _, _ = back[r]
        prv = (r - 1) % N
        _, _, rb, rn = back[prv]
        np.testing.assert_array_equal(first.memories[prv][rb:rb + rn], images[r][b:b + n],
                                      err_msg=f"rank {r} -> {prv}")


def test_sendrecv_stopped_reverse_link_times_out():
    """N = 2 with reverse links: rank 1 sends 6 words back to rank 0, whose reverse receive
    gate is stopped: rank 0 answers TIMEOUT after ``timeout`` cycles without progress,
    having written nothing; rank 1 too times out once the link's credits and FIFO are full
    (8-bit flits, a FIFO of 2)."""
    N, timeout = 2, 40
    images = _bit_images(130, N)
    cmd = _sendrecv_dir(N, [(0, 0, 4, 6), (8, 6, 0, 0)], [0, 1], [1, 0], timeout=timeout)
    run = run_ring(_ring(N, width=8, fifo_depth=2, reverse=True), images, [cmd],
                   stop=[("rx_rev", 0)], deadline=1000)
    assert [g["status"] for g in run.responses[0]] == [CollStatus.TIMEOUT] * N, run.responses
    np.testing.assert_array_equal(run.memories[0], images[0])
    assert run.overflow == 0
