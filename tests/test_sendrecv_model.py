"""SENDRECV in the golden model: the ISA check (hdl/core/isa.py), CoreModel's execution of it
(sim/model/core.py), N cores in a ring meeting at their SENDRECVs (sim/model/multicore.py),
and the directions over the reverse links (sdir / rdir) in the engine model
(sim/model/collective.py) and the ring of cores."""
import dataclasses

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import (Op, Status, Vop, assemble, check_program_for, check_sendrecv, decode,
                          disassemble, encode)
from hdl.multi.config import CollComp, CollectiveConfig, CollOp, CollStatus
from sim.model.collective import (CollectiveModel, ring_sendrecv, sendrecv_flits,
                                  sendrecv_link_flits, validate)
from sim.model.core import CoreModel
from sim.model.multicore import MultiCoreModel

HALT = encode(Op.HALT)
S = 4                       # the tiny preset's lanes
D = 2048                    # its bank depth: line b * D is bank b


def _cfg(ranks, reverse=False):
    return dataclasses.replace(CoreConfig.preset("tiny"), ranks=ranks, reverse_links=reverse)


def _sr(a=0, lines=0, b=0, rlines=0, timeout=100, sdir=0, rdir=0):
    return encode(Op.SENDRECV, a=a, lines=lines, b=b, rlines=rlines, timeout=timeout,
                  sdir=sdir, rdir=rdir)


def _bits(rng, n):
    """Random FP32 bit patterns, NaN payloads, -0 and infinities included (a bit copy)."""
    v = rng.integers(0, 1 << 32, (n, S), dtype=np.uint64).astype(np.uint32)
    v.flat[:4] = [0x7F800001, 0x80000000, 0xFF800000, 0x7FC00123][:min(4, v.size)]
    return v


CHECK_TABLE = [
    (dict(a=0, lines=8, b=8, rlines=8, timeout=1), Status.OK),
    (dict(a=0, lines=8, b=0, rlines=0, timeout=1), Status.OK),
    (dict(a=0, lines=0, b=3, rlines=1, timeout=1), Status.OK),
    (dict(a=0, lines=0, b=3, rlines=0, timeout=1), Status.ERR_SHAPE),
    (dict(a=0, lines=1, b=3, rlines=1, timeout=0), Status.ERR_FIELD),
    (dict(a=0, lines=0, b=0, rlines=0, timeout=0), Status.ERR_FIELD),   # ERR_FIELD first
    (dict(a=0, lines=1, b=3, rlines=1, timeout=(1 << 24) - 1), Status.OK),  # 24-bit timeouts
    (dict(a=0, lines=1, b=3, rlines=1, timeout=1 << 24), Status.ERR_FIELD),
    (dict(a=0, lines=16384, b=16384, rlines=1, timeout=1), Status.ERR_SHAPE),  # 65540 words
]


@pytest.mark.parametrize("fields,status", CHECK_TABLE)
def test_check_sendrecv_table(fields, status):
    coll = _cfg(2).collective
    assert check_sendrecv(fields, S=S, collective=coll) == status
    assert check_sendrecv(fields, S=S, collective=None) == Status.ERR_OPCODE


def test_program_check_rules():
    """Overlap (even exact) is ERR_ADDR, ranges past the scratchpad ERR_ADDR, and a core
    without the engine (ranks = 1) rejects the opcode, all at the SENDRECV's pc."""
    cfg = _cfg(2)
    lines = cfg.lines
    for word, want in [(_sr(a=0, lines=4, b=4, rlines=4), Status.OK),
                       (_sr(a=0, lines=4, b=0, rlines=4), Status.ERR_ADDR),
                       (_sr(a=0, lines=4, b=3, rlines=4), Status.ERR_ADDR),
                       (_sr(a=lines - 1, lines=2), Status.ERR_ADDR),
                       (_sr(b=lines - 1, rlines=2), Status.ERR_ADDR)]:
        prog = [encode(Op.FENCE), word, HALT]
        assert check_program_for(prog, cfg) == (want, 1 if want else 0), disassemble(word)
    assert check_program_for([_sr(a=0, lines=1), HALT], CoreConfig.preset("tiny")) == \
        (Status.ERR_OPCODE, 0)


def test_assemble_round_trip():
    word = encode(Op.SENDRECV, a=0x1803, lines=300, b=0x20, rlines=7, timeout=0xFFFFFF,
                  rdir=1)
    text = disassemble(word)
    assert text == "SENDRECV a=0x1803 lines=300 b=0x20 rlines=7 timeout=16777215 sdir=0 rdir=1"
    assert assemble(text) == word
    assert decode(word) == (Op.SENDRECV, dict(a=0x1803, lines=300, b=0x20, rlines=7,
                                              timeout=0xFFFFFF, sdir=0, rdir=1))


def test_single_core_run_raises_and_executes_nothing():
    core = CoreModel(_cfg(2))
    core.mem[0] = 7
    core.load_program([encode(Op.VEC, vop=Vop.ZERO, rows=1, cols=4, d=0),
                       _sr(a=D, lines=1), HALT])
    with pytest.raises(RuntimeError, match="SENDRECV at pc 1.*MultiCoreModel"):
        core.run()
    assert np.all(core.mem[0] == 7) and core.counters["instructions"] == 0


def test_send_to_next_rank_bit_for_bit():
    """N = 3: every rank sends 5 lines to the next and receives the previous one's 5 lines in
    the same SENDRECV; between, the cores compute (a VEC on other lines); words outside the
    receive ranges keep their values."""
    rng = np.random.default_rng(1)
    multi = MultiCoreModel(_cfg(3))
    before = []
    for r, core in enumerate(multi.cores):
        core.mem[:64] = _bits(rng, 64)
        core.mem[D:D + 16] = _bits(rng, 16)
        before.append(core.mem.copy())
        core.load_program([encode(Op.VEC, vop=Vop.COPY, rows=2, cols=4, a=40, d=50),
                           _sr(a=3 + r, lines=5, b=D + 2, rlines=5),
                           encode(Op.VEC, vop=Vop.COPY, rows=5, cols=4, a=D + 2, d=20), HALT])
    assert multi.run() == [(Status.OK, 0)] * 3
    for r, core in enumerate(multi.cores):
        prev = (r - 1) % 3
        want = before[r].copy()
        want[50:52] = before[r][40:42]
        want[D + 2:D + 7] = before[prev][3 + prev:8 + prev]
        want[20:25] = want[D + 2:D + 7]
        assert np.array_equal(core.mem, want), r
        assert core.counters["sendrecvs"] == 1
    assert multi.sendrecv_words == [20, 20, 20]


def test_two_ranks_exchange_and_one_way_pairs():
    """N = 2: an exchange of different lengths in one SENDRECV each, then a send-only on rank 0
    meeting a receive-only on rank 1, then an ALLREDUCE: each in program order."""
    rng = np.random.default_rng(2)
    multi = MultiCoreModel(_cfg(2))
    img = [_bits(rng, 32) for _ in range(2)]
    for r, core in enumerate(multi.cores):
        core.mem[:32] = img[r]
    multi.cores[0].load_program([_sr(a=0, lines=3, b=D, rlines=6), _sr(a=10, lines=2),
                                 encode(Op.ALLREDUCE, a=2 * D, lines=1, seg=1, timeout=9),
                                 HALT])
    multi.cores[1].load_program([_sr(a=4, lines=6, b=D, rlines=3), _sr(b=D + 8, rlines=2),
                                 encode(Op.ALLREDUCE, a=2 * D, lines=1, seg=1, timeout=9),
                                 HALT])
    assert multi.run() == [(Status.OK, 0)] * 2
    m0, m1 = multi.cores[0].mem, multi.cores[1].mem
    assert np.array_equal(m0[D:D + 6], img[1][4:10])
    assert np.array_equal(m1[D:D + 3], img[0][0:3])
    assert np.array_equal(m1[D + 8:D + 10], img[0][10:12])
    assert np.array_equal(m0[:32], img[0]) and np.array_equal(m1[:32], img[1])
    assert multi.sendrecv_words == [20, 24] and multi.allreduces == 1


def test_mismatch_and_deadlocks_raise():
    multi = MultiCoreModel(_cfg(2))
    multi.cores[0].load_program([_sr(a=0, lines=3), HALT])
    multi.cores[1].load_program([_sr(b=D, rlines=2), HALT])
    with pytest.raises(ValueError, match="rank 0 sends 3 lines but rank 1 receives 2"):
        multi.run()
    # both send first: each send waits for a receive the other core has not reached
    multi.cores[0].load_program([_sr(a=0, lines=1), _sr(b=D, rlines=1), HALT])
    multi.cores[1].load_program([_sr(a=0, lines=1), _sr(b=D, rlines=1), HALT])
    with pytest.raises(ValueError, match="rank 0 waits at a SENDRECV \\(its send part\\).*"
                                         "ERR_LINK"):
        multi.run()
    multi.cores[0].load_program([_sr(a=0, lines=1), HALT])
    multi.cores[1].load_program([encode(Op.ALLREDUCE, a=0, lines=1, seg=1, timeout=9), HALT])
    with pytest.raises(ValueError, match="rank 1 waits at an ALLREDUCE"):
        multi.run()
    multi.cores[1].load_program([HALT])
    with pytest.raises(ValueError, match="rank 1 halted"):
        multi.run()


# ---- directions: sdir = 1 sends to rank r - 1, rdir = 1 receives from rank r + 1 -------------

def _mems(rng, ranks, n=32):
    return [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
            for _ in range(ranks)]


def test_ring_sendrecv_backward_send_on_three_ranks():
    """N = 3, every rank sends back (sdir = 1) and receives from the next (rdir = 1): rank r's
    words land in rank r - 1 (rank 0's in rank 2), over reverse link r; the forward links
    carry nothing."""
    rng = np.random.default_rng(11)
    mems = _mems(rng, 3)
    cmds = [dict(base=0, length=5, rbase=8, rlength=7, sdir=1, rdir=1),
            dict(base=9, length=7, rbase=0, rlength=3, sdir=1, rdir=1),
            dict(base=2, length=3, rbase=12, rlength=5, sdir=1, rdir=1)]
    out = ring_sendrecv(mems, cmds)
    want = [m.copy() for m in mems]
    want[2][12:17] = mems[0][0:5]
    want[0][8:15] = mems[1][9:16]
    want[1][0:3] = mems[2][2:5]
    for r in range(3):
        np.testing.assert_array_equal(out[r], want[r], err_msg=f"rank {r}")
    assert sendrecv_link_flits(8, cmds) == ([0, 0, 0], [20, 28, 12])
    assert sendrecv_link_flits(32, [None] + cmds[1:]) == ([0, 0, 0], [0, 7, 3])
    assert sendrecv_flits(8, [5, 7, 3]) == [20, 28, 12]       # unchanged, per link


def test_mixed_fused_pair_engine_model():
    """N = 3, a 1F1B exchange of two pipeline stages in one command each: rank 0 sends
    forward and receives back (sdir = 0, rdir = 1), rank 1 sends back and receives forward
    (sdir = 1, rdir = 0), rank 2 idles (length = rlength = 0: BAD_LEN, moving nothing).
    Through CollectiveModel.execute with reverse links: statuses, words, and the words per
    forward / reverse link."""
    rng = np.random.default_rng(12)
    model = CollectiveModel(CollectiveConfig(ranks=3, depth=32, reverse=True))
    for m, v in zip(model.mem, _mems(rng, 3)):
        m[:] = v
    before = [m.copy() for m in model.mem]
    sr = dict(op=CollOp.SENDRECV, timeout=50)
    cmds = [dict(base=0, length=6, rbase=10, rlength=4, sdir=0, rdir=1, **sr),
            dict(base=20, length=4, rbase=2, rlength=6, sdir=1, rdir=0, **sr),
            dict(base=0, length=0, rbase=0, rlength=0, **sr)]
    assert model.execute(cmds) == [CollStatus.OK, CollStatus.OK, CollStatus.BAD_LEN]
    want = [m.copy() for m in before]
    want[1][2:8] = before[0][0:6]
    want[0][10:14] = before[1][20:24]
    for r in range(3):
        np.testing.assert_array_equal(model.mem[r], want[r], err_msg=f"rank {r}")
    assert model.sendrecv_words == [6, 0, 0] and model.sendrecv_words_rev == [0, 4, 0]
    # the same exchange with the directions swapped on rank 1 does not pair up: rank 0's
    # forward send meets rank 1's rdir = 1 receive, which listens to rank 2
    bad = [cmds[0], dict(cmds[1], sdir=0, rdir=1), cmds[2]]
    with pytest.raises(ValueError, match=r"rank 0 sends 6 words but rank 1 receives 0 "
                                         r"\(forward link 0"):
        model.execute(bad)


def test_bad_dir_without_reverse_links():
    """A SENDRECV with either direction bit on an engine without reverse links is BAD_DIR:
    after BAD_OP and BAD_COMP, before BAD_LEN and BAD_TIMEOUT; ALLREDUCE ignores the bits;
    with reverse links the same commands are OK. The core's program check makes it
    ERR_FIELD (check_sendrecv)."""
    off = CollectiveConfig(ranks=3, depth=32)
    on = CollectiveConfig(ranks=3, depth=32, reverse=True)
    ok = dict(op=CollOp.SENDRECV, base=0, length=4, rbase=8, rlength=4, timeout=100)
    for bits in (dict(sdir=1), dict(rdir=1), dict(sdir=1, rdir=1)):
        assert validate(off, **ok, **bits) == CollStatus.BAD_DIR, bits
        assert validate(on, **ok, **bits) == CollStatus.OK, bits
        assert validate(off, **{**ok, "length": 0, "rlength": 0, "timeout": 0},
                        **bits) == CollStatus.BAD_DIR, bits               # before BAD_LEN
        assert validate(off, **{**ok, "comp": CollComp.BFP, "width": 4},
                        **bits) == CollStatus.BAD_COMP, bits              # after BAD_COMP
        assert validate(off, **{**ok, "op": 3}, **bits) == CollStatus.BAD_OP, bits
    assert validate(off, **ok) == CollStatus.OK
    assert validate(off, op=CollOp.ALLREDUCE, base=0, length=6, seg=2, timeout=9, sdir=1,
                    rdir=1) == CollStatus.OK
    model = CollectiveModel(off)
    model.mem[0][:] = 5
    assert model.allreduce(**ok, sdir=1) == CollStatus.BAD_DIR
    assert all(not m.any() for m in model.mem[1:]) and model.sendrecv_words_rev == [0] * 3
    f = dict(a=0, lines=1, b=3, rlines=1, timeout=1, sdir=1)
    assert check_sendrecv(f, S=S, collective=_cfg(3).collective) == Status.ERR_FIELD
    assert check_sendrecv(dict(f, sdir=0, rdir=1), S=S,
                          collective=_cfg(3).collective) == Status.ERR_FIELD
    assert check_sendrecv(f, S=S, collective=_cfg(3, reverse=True).collective) == Status.OK


def test_length_mismatch_per_direction_raises():
    """The pairing is per direction: a forward pair and a reverse pair of matching lengths
    pass even when the lengths differ between the directions; a mismatch on a reverse link
    names it, in the engine model and in the ring of cores."""
    rng = np.random.default_rng(13)
    mems = _mems(rng, 3)
    fwd = dict(base=0, length=3, rbase=0, rlength=0)
    good = [dict(fwd, rbase=16, rlength=2, rdir=1),                 # 0 -> 1, 0 <- 1
            dict(base=8, length=2, rbase=20, rlength=3, sdir=1),    # 1 -> 0, 1 <- 0
            None]
    out = ring_sendrecv(mems, good)
    np.testing.assert_array_equal(out[1][20:23], mems[0][0:3])
    np.testing.assert_array_equal(out[0][16:18], mems[1][8:10])
    with pytest.raises(ValueError, match=r"rank 1 sends 2 words but rank 0 receives 4 "
                                         r"\(reverse link 1: sdir = 1, rdir = 1\)"):
        ring_sendrecv(mems, [dict(good[0], rlength=4), good[1], None])
    with pytest.raises(ValueError, match=r"rank 0 sends 3 words but rank 1 receives 0 "
                                         r"\(forward link 0"):
        ring_sendrecv(mems, [good[0], dict(good[1], rdir=1), None])
    with pytest.raises(ValueError, match="sdir must be 0 or 1"):
        ring_sendrecv(mems, [dict(good[0], sdir=2), good[1], None])
    # the ring of cores: rank 2 sends 2 lines back, rank 1 expects 3
    multi = MultiCoreModel(_cfg(3, reverse=True))
    multi.cores[2].load_program([_sr(a=0, lines=2, sdir=1), HALT])
    multi.cores[1].load_program([_sr(b=D, rlines=3, rdir=1), HALT])
    multi.cores[0].load_program([HALT])
    with pytest.raises(ValueError, match=r"rank 2 sends 2 lines but rank 1 receives 3 "
                                         r"\(reverse link 2: sdir = 1, rdir = 1\)"):
        multi.run()


def test_ring_of_cores_directions():
    """N = 3 cores with reverse links run a pipeline's transfers: the forward chain 0 -> 1 ->
    2, the backward chain 2 -> 1 -> 0 over the reverse links, and a fused exchange of ranks
    1 and 2 (1 sends forward and receives back, 2 sends back and receives forward): every
    word lands where the directions say, and sendrecv_words / sendrecv_words_rev count
    each link. On N = 2 a forward send meets the other rank's rdir = 0 receive only: with
    the receive's direction swapped the model reports the deadlock, naming directions."""
    rng = np.random.default_rng(14)
    multi = MultiCoreModel(_cfg(3, reverse=True))
    img = [_bits(rng, 16) for _ in range(3)]
    for r, core in enumerate(multi.cores):
        core.mem[:16] = img[r]
    multi.cores[0].load_program([_sr(a=0, lines=2), _sr(b=D, rlines=3, rdir=1), HALT])
    multi.cores[1].load_program([_sr(b=D, rlines=2), _sr(a=2, lines=2),
                                 _sr(b=D + 4, rlines=4, rdir=1), _sr(a=4, lines=3, sdir=1),
                                 _sr(a=8, lines=1, b=D + 8, rlines=5, rdir=1), HALT])
    multi.cores[2].load_program([_sr(b=D, rlines=2), _sr(a=6, lines=4, sdir=1),
                                 _sr(a=10, lines=5, b=D + 8, rlines=1, sdir=1), HALT])
    assert multi.run() == [(Status.OK, 0)] * 3
    m = [c.mem for c in multi.cores]
    assert np.array_equal(m[1][D:D + 2], img[0][0:2])
    assert np.array_equal(m[2][D:D + 2], img[1][2:4])
    assert np.array_equal(m[1][D + 4:D + 8], img[2][6:10])
    assert np.array_equal(m[0][D:D + 3], img[1][4:7])
    assert np.array_equal(m[2][D + 8:D + 9], img[1][8:9])
    assert np.array_equal(m[1][D + 8:D + 13], img[2][10:15])
    assert multi.sendrecv_words == [8, 12, 0]
    assert multi.sendrecv_words_rev == [0, 12, 36]
    two = MultiCoreModel(_cfg(2, reverse=True))
    two.cores[0].load_program([_sr(a=0, lines=1), HALT])
    two.cores[1].load_program([_sr(b=D, rlines=1, rdir=1), HALT])
    with pytest.raises(ValueError, match=r"rank 0 waits at a SENDRECV \(its send part\), "
                                         r"sending to rank 1 \(sdir = 0\), rank 1 waits at a "
                                         r"SENDRECV \(its receive part\), receiving from "
                                         r"rank 0 \(rdir = 1\)"):
        two.run()
    two.reset()
    two.cores[1].load_program([_sr(b=D, rlines=1), HALT])
    assert two.run() == [(Status.OK, 0)] * 2
    assert two.sendrecv_words == [4, 0] and two.sendrecv_words_rev == [0, 0]
