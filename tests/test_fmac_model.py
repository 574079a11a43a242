"""Golden model of the chunked fMAC (sim/model/fmac.py) against plain integer arithmetic."""
import itertools
import math
import random

import numpy as np
import pytest

from hdl.config import FMACConfig
from hdl.fmac import FMACCore, product_cycles as hw_product_cycles
from sim.model import fmac as g

W = g.WIDTHS


@pytest.mark.parametrize("m_a, m_b", list(itertools.product(W, W)))
def test_chunk_product_exhaustive(m_a, m_b):
    a = np.arange(1 << m_a)
    for x in a:
        for y in range(1 << m_b):
            assert g.chunk_product(int(x), y, m_a, m_b) == int(x) * y


@pytest.mark.parametrize("m", W)
def test_chunks_reassemble(m):
    for mag in range(1 << m):
        cs = g.chunks(mag, m)
        assert len(cs) == m // 2 and all(0 <= c < 4 for c in cs)
        assert sum(c << (2 * k) for k, c in enumerate(cs)) == mag


def test_chunks_worked_example():
    # 0b10_01_11 = 39 at m=6 -> chunks LSB first 3, 1, 2 (the docs' worked example)
    assert g.chunks(0b100111, 6) == [0b11, 0b01, 0b10]


@pytest.mark.parametrize("lanes", [1, 2, 4, 8, 16])
def test_cycles_formula_and_schedule(lanes):
    for m_a, m_b in itertools.product(W, W):
        pairs = (m_a // 2) * (m_b // 2)
        c = g.product_cycles(m_a, m_b, lanes)
        assert c == math.ceil(pairs / lanes)
        assert c == hw_product_cycles(m_a, m_b, lanes) == FMACCore.cycles(m_a, m_b, lanes)
        sched = g.pair_schedule(m_a, m_b, lanes)
        assert len(sched) == c
        flat = [pq for step in sched for pq in step]
        # every chunk pair exactly once, never more than `lanes` per cycle
        assert sorted(flat) == sorted(itertools.product(range(m_a // 2), range(m_b // 2)))
        assert all(1 <= len(step) <= lanes for step in sched)


def test_cycles_scale_with_chunk_pairs():
    # at lanes=1, 8-bit x 8-bit takes 16x the cycles of 2-bit x 2-bit (docs/fmac.md)
    assert g.product_cycles(8, 8, 1) == 16 * g.product_cycles(2, 2, 1)
    assert g.product_cycles(8, 2, 1) == g.product_cycles(2, 8, 1) == 4


def test_signed_product_all_signs():
    rng = random.Random(3)
    for m_a, m_b in itertools.product(W, W):
        for sa, sb in itertools.product((0, 1), repeat=2):
            a, b = rng.randrange(1 << m_a), rng.randrange(1 << m_b)
            for lanes in (1, 2, 4):
                assert g.signed_product(sa, a, sb, b, m_a, m_b, lanes) == (-1) ** (sa ^ sb) * a * b


def test_dot_matches_integer_dot_and_cycles():
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        m_a = rng.choice(W, n)
        m_b = rng.choice(W, n)
        a = np.array([rng.integers(0, 1 << int(x)) for x in m_a])
        b = np.array([rng.integers(0, 1 << int(x)) for x in m_b])
        sa, sb = rng.integers(0, 2, n), rng.integers(0, 2, n)
        val, ovf, cyc = g.dot(sa, a, sb, b, m_a, m_b, lanes=2, acc_bits=32)
        ref = int(np.sum(np.where(sa ^ sb, -1, 1) * a * b))
        assert (val, ovf) == (ref, False)
        assert cyc == sum(math.ceil((x // 2) * (y // 2) / 2) for x, y in zip(m_a, m_b))


def test_dot_saturates_with_sticky_flag():
    bits = FMACConfig.preset("tiny").acc_bits
    lo, hi = g.acc_limits(bits)
    n = hi // (255 * 255) + 2                       # enough max products to pass the limit
    val, ovf, _ = g.dot([0] * n, [255] * n, [0] * n, [255] * n, 8, 8, 1, bits)
    assert (val, ovf) == (hi, True)
    val, ovf, _ = g.dot([1] * n, [255] * n, [0] * n, [255] * n, 8, 8, 1, bits)
    assert (val, ovf) == (lo, True)
    # flag stays set although the sum comes back into range
    val, ovf, _ = g.dot([0] * n + [1], [255] * (n + 1), [0] * (n + 1), [255] * (n + 1), 8, 8,
                        1, bits)
    assert val == hi - 255 * 255 and ovf
    # a new dot product (accumulate=0) clears it
    assert g.saturating_add(hi, True, 7, False, bits) == (7, False)


@pytest.mark.parametrize("bad", [0, 3, 10, 2.0, True])
def test_model_rejects_bad_widths(bad):
    with pytest.raises((ValueError, TypeError), match="m"):
        g.product_cycles(bad, 2, 1)


def test_model_rejects_bad_magnitude():
    with pytest.raises(ValueError, match="mag"):
        g.chunks(16, 4)
