"""SENDRECV in the golden model: the ISA check (hdl/core/isa.py), CoreModel's execution of it
(sim/model/core.py) and N cores in a ring meeting at their SENDRECVs (sim/model/multicore.py)."""
import dataclasses

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import (Op, Status, Vop, assemble, check_program_for, check_sendrecv, decode,
                          disassemble, encode)
from sim.model.core import CoreModel
from sim.model.multicore import MultiCoreModel

HALT = encode(Op.HALT)
S = 4                       # the tiny preset's lanes
D = 2048                    # its bank depth: line b * D is bank b


def _cfg(ranks):
    return dataclasses.replace(CoreConfig.preset("tiny"), ranks=ranks)


def _sr(a=0, lines=0, b=0, rlines=0, timeout=100):
    return encode(Op.SENDRECV, a=a, lines=lines, b=b, rlines=rlines, timeout=timeout)


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
