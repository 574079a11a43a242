"""Fast tier: the optimizer's update pipeline with shared FP32 units (``ii > 1``,
:class:`hdl.lib.dataflow.Dataflow`, docs/datapaths.md).

The shared pipeline must give the same words as the one with a unit per operation: both run
side by side in one simulation on the same elements (specials included, every mode and the
``alt`` pass), and the shared one's latencies are measured, not taken from its attributes.
"""
import math

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Fragment, Module

from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.mul import FP32Mul
from hdl.fp32.add import FP32Add
from hdl.fp32.div import FP32Div
from hdl.lib.dataflow import Dataflow, pool_unit
from hdl.optim.engine import OptimEngine
from hdl.optim.config import Mode, OptimConfig
from hdl.optim.datapath import ALT_FIELDS, HYPER_FIELDS, OptimDatapath
from sim.model.fp32 import random_fp32
from sim.tb.amaranth_tb import run_sim

FC, DC = FP32Config(), FP32DivSqrtConfig.preset("tiny")


class _Pair(Elaboratable):
    """The same inputs into ``ref`` (``ii = 1``) and ``dut`` (``ii``); the units of ``dut``'s
    ``units`` ports outside it, each behind :func:`pool_unit` (as the training core's vector
    unit holds them)."""

    def __init__(self, ii, units=()):
        self.ref = OptimDatapath(tag_bits=8, fp32_config=FC, divsqrt_config=DC)
        self.dut = OptimDatapath(tag_bits=8, fp32_config=FC, divsqrt_config=DC, ii=ii,
                                 units=units)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ref, m.submodules.dut = self.ref, self.dut
        make = {"add": lambda: FP32Add(config=FC), "mul": lambda: FP32Mul(config=FC),
                "div": lambda: FP32Div(config=DC)}
        for name in self.dut.signature.members:
            if name.startswith("unit_"):
                pool_unit(m, f"pool_{name}", make[name[5:-1]](), [getattr(self.dut, name)])
        for name in ("mode", "alt") + HYPER_FIELDS + ALT_FIELDS:
            m.d.comb += getattr(self.ref, name).eq(getattr(self.dut, name))
        m.d.comb += [self.ref.i.valid.eq(self.dut.i.valid),
                     self.ref.i.payload.eq(self.dut.i.payload)]
        return m


def _hyper(rng):
    """Hyperparameters as the host sets them (positive normal numbers), as bit patterns."""
    v = {"inv_scale": 2.0 ** -int(rng.integers(0, 8)), "clip": rng.uniform(0.2, 1.0),
         "lr": rng.uniform(1e-4, 0.1), "b1": 0.9, "omb1": 0.1, "b2": 0.999, "omb2": 0.001,
         "rc2": rng.uniform(1, 30), "eps": 1e-8, "wdec": rng.uniform(0.99, 1.0),
         "alt_sqrt": rng.uniform(0, 100), "alt_num": rng.uniform(0.5, 2)}
    return {k: int(np.float32(x).view(np.uint32)) for k, x in v.items()}


@pytest.mark.parametrize("ii, units", [(3, ()), (4, ()), (4, ("add", "mul", "div"))])
def test_shared_units_give_the_same_words(ii, units):
    """Elements every ``ii`` cycles (plus random gaps of whole ``ii``s) in every mode and the
    ``alt`` pass: the shared pipeline's outputs, ``sq`` and ``ratio`` taps equal the unshared
    pipeline's, element by element, at latencies measured here (equal to the attributes);
    also with its first multiplier, its adder and its divider outside it (``units``, the
    training core's FPGA build), at the same latencies."""
    pair = _Pair(ii, units)
    assert pair.dut.latency == OptimDatapath.latency_for(FC, DC, ii)
    dut, ref = pair.dut, pair.ref
    rng = np.random.default_rng(ii)
    got = {"o": [], "sq": [], "ratio": []}
    want = {"o": [], "sq": [], "ratio": []}

    async def tb(ctx):
        t = 0
        enters = []
        # (cycle index of every output and tap sample) is checked against the entry cycles
        for mode, alt in ((Mode.SGD, 0), (Mode.MOMENTUM, 0), (Mode.ADAM, 0), (Mode.ADAM, 1)):
            ctx.set(dut.mode, mode)
            ctx.set(dut.alt, alt)
            for k, v in _hyper(rng).items():
                ctx.set(getattr(dut, k), v)
            await ctx.tick()
            t += 1
            while t % ii:                     # every element enters at t = 0 mod ii
                await ctx.tick()
                t += 1
            n = 24
            words = {f: random_fp32(rng, n) for f in ("w", "m", "v", "g")}
            pending = list(range(n))
            end = t + n * ii * 3 + dut.latency + 2
            while t < end:
                if pending and t % ii == 0 and rng.random() < 0.7:
                    e = pending.pop(0)
                    ctx.set(dut.i.valid, 1)
                    ctx.set(dut.i.payload, {**{f: int(words[f][e]) for f in words},
                                            "tag": e})
                    enters.append(t)
                else:
                    ctx.set(dut.i.valid, 0)
                for pipe, store in ((dut, got), (ref, want)):
                    if ctx.get(pipe.o.valid):
                        p = ctx.get(pipe.o.payload)
                        store["o"].append((t, int(p.w), int(p.m), int(p.v), int(p.tag)))
                for pipe, store in ((dut, got), (ref, want)):
                    for tap, lat in (("sq", pipe.sq_latency), ("ratio", pipe.ratio_latency)):
                        if t - lat in enters[-n:]:
                            store[tap].append(ctx.get(getattr(pipe, tap)))
                await ctx.tick()
                t += 1
            assert not pending
        ctx.set(dut.i.valid, 0)
        # measured latencies: every output leaves exactly `latency` cycles after its entry
        assert [o[0] for o in got["o"]] == [e + dut.latency for e in enters]
        assert [o[0] for o in want["o"]] == [e + ref.latency for e in enters]

    run_sim(pair, tb)
    assert len(got["o"]) == 4 * 24
    assert [o[1:] for o in got["o"]] == [o[1:] for o in want["o"]]
    # the taps are meaningful only in the cycle their element's latency says; with the unit
    # shared, the same wire carries other operations' results in between
    assert got["sq"] == want["sq"] and got["ratio"] == want["ratio"]
    assert len(got["sq"]) == len(want["sq"]) == 4 * 24


@pytest.mark.parametrize("ii", [1, 2, 3, 4, 5, 8])
def test_shared_unit_counts(ii):
    """``ceil(10 / ii)`` multipliers and ``ceil(4 / ii)`` adders in the elaborated pipeline
    (counted among its submodules), as :meth:`OptimDatapath.unit_counts` says."""
    dp = OptimDatapath(tag_bits=8, fp32_config=FC, divsqrt_config=DC, ii=ii)
    frag = Fragment.get(dp, None)
    kinds = [type(sub.origins[0]).__name__ for sub, *_ in frag.subfragments]
    want = {"mul": math.ceil(10 / ii), "add": math.ceil(4 / ii), "div": 1, "sqrt": 1}
    assert OptimDatapath.unit_counts(FC, DC, ii) == want
    assert kinds.count(FP32Mul.__name__) == want["mul"], kinds
    assert kinds.count(FP32Add.__name__) == want["add"], kinds


def _own_register_bits(ii):
    """Flip-flop bits the datapath itself assigns in ``sync`` (its units' are their own)."""
    frag = Fragment.get(OptimDatapath(tag_bits=8, fp32_config=FC, divsqrt_config=DC, ii=ii),
                        None)
    regs = {id(s): len(s) for st in frag.statements.get("sync", []) for s in st._lhs_signals()}
    return sum(regs.values())


def test_delay_registers_shrink_with_ii():
    """With ``ii > 1`` a delay of ``d`` cycles is ``ceil(d / ii)`` registers that take their
    element on its delayed valid bit, not ``d`` (``Dataflow.at``; the words are the
    same: test above). Most of the datapath's own flip-flops are delays, so its register bits
    fall nearly as ``1 / ii``; measured 9,122 (ii = 1), 6,395 (2), 3,557 (4), against 9,867
    and 8,789 with a register per cycle."""
    one = _own_register_bits(1)
    assert _own_register_bits(2) < 0.75 * one
    assert _own_register_bits(4) < 0.45 * one


@pytest.mark.parametrize("ii", [0, -1, 1.5, True, "2"])
def test_invalid_ii(ii):
    """The builders refuse an initiation interval that is not an int >= 1 (``OptimConfig.ii``:
    tests/test_config_errors.py)."""
    with pytest.raises((TypeError, ValueError), match=r"Dataflow\.ii"):
        Dataflow(None, None, fp32_config=FC, divsqrt_config=DC, ii=ii)
    with pytest.raises((TypeError, ValueError), match=r"OptimDatapath\.ii"):
        OptimDatapath(fp32_config=FC, divsqrt_config=DC, ii=ii)



def test_units_outside_the_optimizer():
    """``units=`` of the datapath and the engine: its first shared units of those kinds become
    ``UnitPort`` members and leave its submodules; refused with ``ii = 1`` (an outside unit
    would add a cycle), with more of a kind than it has shared units, or a bad kind, each
    error naming the parameter."""
    dp = OptimDatapath(tag_bits=8, fp32_config=FC, divsqrt_config=DC, ii=4,
                       units=("add", "mul", "div"))
    kinds = [type(sub.origins[0]).__name__ for sub, *_ in Fragment.get(dp, None).subfragments]
    assert (kinds.count("FP32Mul"), kinds.count("FP32Add"), kinds.count("FP32Div")) == (2, 0, 0)
    assert {"unit_add0", "unit_mul0", "unit_div0"} <= set(dp.signature.members)
    eng = OptimEngine(config=OptimConfig(ii=4), fp32_config=FC, divsqrt_config=DC,
                      data_cmds=False, units=("mul",))
    assert "unit_mul0" in eng.signature.members
    eng._MustUse__silence = True
    with pytest.raises(ValueError, match=r"OptimDatapath\.units needs ii > 1"):
        OptimDatapath(fp32_config=FC, divsqrt_config=DC, units=("add",))
    with pytest.raises(ValueError, match=r"OptimEngine\.units needs ii > 1"):
        OptimEngine(fp32_config=FC, divsqrt_config=DC, units=("add",))
    with pytest.raises(ValueError, match=r"OptimDatapath\.units: 2 'add' units, but the "
                                         r"datapath has 1"):
        OptimDatapath(fp32_config=FC, divsqrt_config=DC, ii=4, units=("add", "add"))
    with pytest.raises(ValueError, match=r"OptimEngine\.units: 1 'exp' units, but"):
        OptimEngine(config=OptimConfig(ii=4), fp32_config=FC, divsqrt_config=DC,
                    units=("exp",))
    with pytest.raises(TypeError, match=r"OptimEngine\.units"):
        OptimEngine(config=OptimConfig(ii=4), fp32_config=FC, divsqrt_config=DC, units="mul")
