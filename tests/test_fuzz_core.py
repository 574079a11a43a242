"""Fuzzing the training core's host protocol in the Amaranth simulator (docs/testing.md,
"Fuzzing"): a seeded random stream of raw host commands -- writes and reads in and out of
range, malformed programs loaded with PROG and run with START, precision entries, optimizer
registers, register reads, unknown opcodes -- then every named program mutation once; each
command answered as :class:`sim.tb.fuzz.HostModel` (over the core's golden model) predicts,
every wait with a cycle deadline, and the whole scratchpad equal to the model's at the end.
The cocotb tier runs longer streams on the generated Verilog (tests/test_fuzz_core_cocotb.py)."""
import dataclasses
import random

import pytest

from hdl.core.config import CoreConfig
from hdl.core.core import TrainingCore
from hdl.core.host import HostStatus
from hdl.core.isa import Status, check_program_for
from sim.model.core import CoreModel
from sim.tb.amaranth_tb import StreamTransport, run_sim
from sim.tb.directed import MODES, ROUNDS, directed_commands, intent, out_regions
from sim.tb.fuzz import (MUTATIONS, HostModel, edge_commands, fuzz_core, program_commands,
                         random_program)

#: a small core: 4 banks of 16 lines of S = 4 words, 16 program words, 2 layers
CFG = CoreConfig(size=4, banks=4, bank_depth=16, prog_depth=16, layers=2, max_classes=8)


def test_random_host_commands_and_malformed_programs():
    """One simulation (the core's elaboration dominates a short one): 150 random commands,
    then the named edge cases of :func:`sim.tb.fuzz.edge_commands` and each mutation of
    :data:`sim.tb.fuzz.MUTATIONS` once."""
    dut = TrainingCore(config=CFG)
    out = {}

    async def tb(ctx):
        cmds = edge_commands(CFG) + program_commands(random.Random(7), CFG)
        out.update(await fuzz_core(CFG, StreamTransport(ctx, dut.cmd, dut.rsp), seed=1,
                                   n=150, cmds=cmds))

    run_sim(dut, tb)
    # the stream reached every kind of response (so the comparison could fail on each)
    st = out["statuses"]
    for key in [("host", s) for s in (0, 8, 9, 10)] + [("START", Status.OK)]:
        assert st.get(key, 0) >= 1, (key, st)
    assert sum(n for (kind, s), n in st.items() if kind == "START" and s != Status.OK) >= 8, st


def test_program_mutations_reach_their_statuses():
    """Model-level (no simulation): each named mutation gives the status it is meant to
    give, so the RTL test above covers every program status; and the golden model's check
    is the sequencer's (including the softmax row limit ``max_classes``)."""
    rng = random.Random(3)
    seen = {}
    for _ in range(40):
        for mut in MUTATIONS:
            prog = random_program(rng, CFG, mut)
            model = CoreModel(CFG)
            model.load_program(prog)
            st = model.check()
            assert st == check_program_for(prog, CFG), (mut, prog)
            seen.setdefault(mut, set()).add(st[0])
    assert seen[None] == {Status.OK}
    assert Status.OK in seen["long_loop"], seen["long_loop"]
    want = {"bad_opcode": Status.ERR_OPCODE, "no_halt": Status.ERR_NO_HALT,
            "endloop_alone": Status.ERR_LOOP, "nested_loop": Status.ERR_LOOP,
            "halt_in_loop": Status.ERR_LOOP, "wide_softmax": Status.ERR_SHAPE,
            "same_bank": Status.ERR_BANK, "loop_zero": Status.ERR_SHAPE}
    for mut, status in want.items():
        assert status in seen[mut], (mut, seen[mut])
    # every status of the program check (ERR_LINK is a run-time status of a multi-core run)
    assert set().union(*seen.values()) == set(Status.ALL) - {Status.ERR_LINK}, seen


def test_edge_commands_expected_statuses():
    """The reference's answers to the named edge cases are the documented ones (docs/isa.md,
    hdl/core/host.py), so the RTL comparison above checks the documentation, not only the
    model."""
    ok, addr, val, op = (HostStatus.OK, HostStatus.BAD_ADDR, HostStatus.BAD_VALUE,
                         HostStatus.BAD_OP)
    model = HostModel(CFG)
    got = [model.command(*c)[0] for c in edge_commands(CFG)]
    assert got == [ok, addr, addr, ok, addr, addr,                        # WRITE READ PROG
                   ok, addr, val, val, val, val, val,                     # PREC
                   ok, addr, val, ok, val, val, ok,                       # SETREG
                   ok, addr,                                              # REG
                   addr, ok, ok, addr,                                    # REG statistics
                   ok, addr, addr,                                        # THRESH
                   op, op, op]                                            # ops 8, 8, 15


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_directed_stream_reaches_its_targets(preset):
    """Model-level (no simulation): the directed stream the cocotb tier runs for coverage
    (tests/test_coverage_cocotb.py) does what it is written for on the S = 4 and the S = 8
    core (whose banks hold fewer output regions than rounds: out_regions): every
    program ends OK and no host command is refused; every (layer, mode) pair gets a
    statistic; every one of the 48 statistic slots is raised by some ADAPT below the top
    width, finds its width already at the top in another, and is kept under its threshold
    in a third; the vector unit writes NaNs, infinities, subnormals and zeros."""
    cfg = CoreConfig.preset(preset)
    assert out_regions(cfg) == {"tiny": ROUNDS, "default": 4}[preset]
    got = intent(cfg)
    assert set(got["statuses"]) == {("host", HostStatus.OK), ("START", Status.OK)}, \
        got["statuses"]
    pairs = {(layer, mode) for layer in range(cfg.layers) for mode in MODES}
    slots = {(layer, mode, op) for layer, mode in pairs for op in (0, 1)}
    assert got["pairs_run"] == pairs
    assert got["raised"] == slots
    assert got["raise_at_top"] == slots
    assert got["kept"] and got["kept"] <= slots
    assert all(v > 0 for v in got["special_results"].values()), got["special_results"]


@pytest.mark.parametrize("change, error", [
    ({"banks": 4}, "config.banks"), ({"bank_depth": 1024}, "config.bank_depth"),
    ({"max_classes": 16}, "config.max_classes")])
def test_directed_stream_rejects_small_configs(change, error):
    cfg = dataclasses.replace(CoreConfig.preset("tiny"), **change)
    with pytest.raises(ValueError, match=error):
        directed_commands(cfg)
    with pytest.raises(TypeError, match="config"):
        directed_commands("tiny")
