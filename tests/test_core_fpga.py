"""The training core's FPGA build (docs/core.md "FPGA"): ``CoreConfig.fpga()``, the
``training_core_fpga`` rows of ``make synth`` (no synthesis here), the default MLP on the FPGA
build in the golden model (the same bits as on the preset), and a core of the FPGA build's
shape in the Amaranth simulator (including its rejection of REDUCE SUMSQ)."""
import dataclasses

import numpy as np
import pytest

from amaranth.sim import Simulator

from boards.synth import TARGETS, VARIANTS, build_block
from hdl.core.config import CoreConfig, fpga_core_kwargs
from hdl.core.core import STATE_LAYOUT, TrainingCore
from hdl.core.isa import Op, Rop, Status, Vop, decode, encode
from hdl.optim.config import OptimConfig
from hdl.registry import blocks
from sim.host.compiler import MLP, compile_mlp
from sim.host.driver import CoreDriver
from sim.host.optim import Adam
from sim.model.core import CoreModel
from sim.tb import cycles as doc
from sim.tb.amaranth_tb import StreamTransport, add_deadline, fp32_unit_counts


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_fpga_config_is_the_preset_with_one_vector_lane_and_four_banks(preset):
    """One vector lane, no REDUCE SUMSQ, four banks of half the preset's lines (32,768 words:
    ``CoreConfig.FPGA_WORDS``), the decoder's two register stages, the vector unit's read
    registers, registered scratchpad requests and bank read data, and shared units (and the
    optimizer's shared with it), the matmul engine's and the collective engine's registers,
    the softmax's serial log. A config already within the cap keeps its lines."""
    cfg = CoreConfig.preset(preset)
    fpga = cfg.fpga()
    assert fpga == dataclasses.replace(cfg, vector_lanes=1, vector_sumsq=False, banks=4,
                                       bank_depth=CoreConfig.FPGA_WORDS // cfg.size // 4,
                                       decode_stages=2, vector_read_reg=True,
                                       spad_reg=True, spad_out_reg=True,
                                       matmul_regs=True, coll_regs=True, acc_lanes=2,
                                       vector_shared_units=True, optim_shared_units=True,
                                       optim_one_port=True, serial_log=True)
    assert (cfg.instr_cycles, fpga.instr_cycles) == (3, 7)
    assert fpga.vec_lanes == 1 and fpga.size == cfg.size and 2 * fpga.lines == cfg.lines
    assert fpga.fpga() == fpga
    small = CoreConfig(banks=4, bank_depth=64)
    assert small.fpga().banks == 4 and small.fpga().bank_depth == 64
    mid = CoreConfig(size=4, banks=8, bank_depth=512)          # 16,384 words: kept
    assert (mid.fpga().banks, mid.fpga().bank_depth) == (4, 1024)
    core = build_block("training_core_fpga", preset)
    core._MustUse__silence = True       # built only for its config (never elaborated)
    assert isinstance(core, TrainingCore) and core.config == fpga
    assert core.optim_config.ii == CoreConfig.FPGA_OPTIM_II == 4


def test_optimizer_units_shared_with_the_vector_unit():
    """``optim_shared_units`` in the FPGA build: the core has one FP32 adder, multiplier and
    divider fewer than with the optimizer's own (counted in the elaborated core), and a core
    that asks for it with an unshared optimizer (``ii = 1``) is refused naming the parameter."""
    cfg = CoreConfig(size=4, banks=8, bank_depth=64, prog_depth=64, layers=4).fpga()
    shared = fp32_unit_counts(TrainingCore(config=cfg, **fpga_core_kwargs()))
    own = fp32_unit_counts(TrainingCore(
        config=dataclasses.replace(cfg, optim_shared_units=False), **fpga_core_kwargs()))
    assert {k: own[k] - shared[k] for k in own} == {"FP32Add": 1, "FP32Mul": 1, "FP32Div": 1}
    with pytest.raises(ValueError, match=r"TrainingCore.optim_config.ii must be > 1"):
        TrainingCore(config=cfg)
    # the optimizer's one scratchpad client (optim_one_port) needs ii >= 4
    with pytest.raises(ValueError, match=r"TrainingCore.optim_config.ii must be >= 4"):
        TrainingCore(config=cfg, optim_config=OptimConfig(ii=2))


def test_fpga_rows_are_synth_targets_and_not_registered_blocks():
    assert {("training_core_fpga", p) for p in ("tiny", "default")} <= set(TARGETS)
    assert not set(VARIANTS) & set(blocks())


#: a precision table with a different entry for every (layer, pass) of a 2-layer MLP (the
#: second step of the FPGA-shaped RTL test runs it: the piped sequencer's registered lookup)
MIXED = {(0, 0): (4, 6), (0, 1): (6, 2), (0, 2): (2, 8, 2), (1, 0): (8, 4), (1, 1): (2, 6),
         (1, 2): (6, 4)}


def _step_actions(comp, desc, seed, precision2=None, stats=False, precision1=None):
    rng = np.random.default_rng(seed)
    Ws = [(rng.standard_normal((a, b)) * 0.3).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    acts = comp.init_actions(Ws, bs)
    for t in (1, 2):
        x = rng.standard_normal((desc.batch, desc.layers[0])).astype(np.float32)
        y = rng.integers(0, desc.layers[-1], desc.batch)
        acts += comp.step_actions(x, y, t, precision=precision2 if t == 2 else precision1)
        if stats:        # every FAST statistic after the step (``stats1``, ``stats2``)
            acts.append(("stats", f"stats{t}"))
    return acts + comp.read_actions()


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_fpga_build_trains_the_default_mlp_to_the_same_bits(preset):
    """The default MLP (64-64-10, batch 32, Adam) compiles for the FPGA build (four banks)
    and two golden-model steps give the same parameters, optimizer state and losses, bit for
    bit, as on the preset: only the placement (and so the cycles) differs."""
    desc = MLP(layers=(64, 64, 10), batch=32, optimizer=Adam(lr=3e-3))
    cfg = CoreConfig.preset(preset)
    got = {}
    for name, c in (("preset", cfg), ("fpga", cfg.fpga())):
        comp = compile_mlp(desc, c)
        got[name] = CoreModel(c).apply(_step_actions(comp, desc, 0))
        got[name + "_program"] = comp.program
    assert got["preset_program"] != got["fpga_program"], "the placement did not change"
    for key in ("params", "grads", "m", "v", "loss0"):
        assert np.array_equal(got["preset"][key], got["fpga"][key]), key
    assert got["fpga"]["run"] == [(Status.OK, 0)] * 2


def test_fpga_shaped_core_step_bit_exact_in_rtl():
    """The FPGA build's shape (four banks, one vector lane, no REDUCE SUMSQ, the optimizer's
    FP32 units shared: ``OptimConfig.ii = CoreConfig.FPGA_OPTIM_II``) in the Amaranth
    simulator: two training steps of a small MLP bit-exact with the golden model (parameters,
    gradients, optimizer state, loss, the FAST statistics after each step, the executed
    instructions and array beats), the second
    with a different precision entry for every layer and pass (``MIXED``; the first at 4
    bits), then a
    program with a REDUCE SUMSQ rejected with ERR_FIELD by both, and the whole scratchpad
    equal to the model's at the end."""
    cfg = CoreConfig(size=4, banks=8, bank_depth=64, prog_depth=64, layers=4).fpga()
    assert (cfg.banks, cfg.bank_depth, cfg.vec_lanes) == (4, 128, 1)
    desc = MLP(layers=(4, 6, 3), batch=4, optimizer=Adam(lr=1e-2))
    comp = compile_mlp(desc, cfg)
    # then a program whose REDUCE SUMSQ this build lacks (vector_sumsq off): ERR_FIELD at its
    # pc, nothing executed, memory unchanged (compared with the model's below)
    sumsq = [encode(Op.VEC, vop=Vop.ZERO, rows=1, cols=4, d=5),
             encode(Op.REDUCE, rop=Rop.SUMSQ, rows=2, cols=4, a=0, d=cfg.bank_depth),
             encode(Op.HALT)]
    # step 1 at 4 bits everywhere: its statistics are counted, saved, and loaded into step 2's
    # passes (then at MIXED widths)
    four = {k: (4, 4) for k in MIXED}
    actions = (_step_actions(comp, desc, 1, precision2=MIXED, stats=True, precision1=four)
               + [("counters",)]
               + [("program", sumsq), ("run",), ("status",)])
    model = CoreModel(cfg)
    want = model.apply(actions)
    dut = TrainingCore(config=cfg, **fpga_core_kwargs())
    got = {}

    async def tb(ctx):
        drv = CoreDriver(cfg, StreamTransport(ctx, dut.cmd, dut.rsp), run_deadline=60_000)
        got.update(await drv.apply(actions))
        got["mem"] = await drv.read_lines(0, cfg.lines)
        got["state"] = STATE_LAYOUT.from_bits((await drv.read_regs())["state"])

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    assert not cfg.vector_sumsq
    assert got["run"] == want["run"] == [(Status.OK, 0)] * 2 + [(Status.ERR_FIELD, 1)]
    for key in ("params", "grads", "m", "v", "loss0"):
        assert np.array_equal(got[key], want[key]), key
    # the FAST statistics: each pass's converters loaded (from the quantizers' own registers
    # in this build, ``cmd_reg``) with its (layer, mode)'s and saved back, as in the model
    for key in ("stats1", "stats2"):
        assert got[key] == want[key], key
        assert sum(s.seen for s in got[key].values()) >= 8, key
    # the hardware's counters are the last run's, the model's count since reset: the two
    # steps run the same program
    assert got["counters"]["instructions"] == len(model.trace)
    assert 2 * got["counters"]["array_beats"] == want["counters"]["beats"]
    # the decoder's two stages and the word register: 7 cycles per instruction in the check
    static = [decode(w)[0] for w in comp.program].index(Op.HALT) + 1
    assert got["counters"]["check_cycles"] == doc.core_check_cycles(static, 2) == 7 * static
    assert np.array_equal(got["mem"], model.mem)
    # no two clients on one bank port, and no line of a bank read and written in one cycle
    # (this build's banks are OutRegRAMs: on an ECP5 such a read would be undefined)
    assert got["state"].conflict == 0


@pytest.mark.long
def test_bench_core_fpga_point_and_table():
    """``make bench-core-fpga``'s measurement (``sim.bench.core_fpga.step_point``) on a small
    MLP at S = 4: both builds bit-exact with the golden model (checked inside), the FPGA build's
    program check 7 cycles per instruction against 3, the same array beats, and the table's
    ratio from the two counts."""
    from sim.bench.core_fpga import step_point, to_markdown
    desc = MLP(layers=(4, 6, 3), batch=4, optimizer=Adam(lr=1e-2))
    cfg = CoreConfig(size=4, banks=8, bank_depth=64, prog_depth=64, layers=4)
    rows = [step_point(cfg, 8, desc, fpga=False), step_point(cfg.fpga(), 8, desc, fpga=True)]
    pre, fpga = rows
    assert (pre["build"], fpga["build"]) == ("preset", "fpga")
    assert 3 * fpga["check_cycles"] == 7 * pre["check_cycles"] > 0
    assert fpga["array_beats"] == pre["array_beats"] > 0
    assert fpga["run_cycles"] > pre["run_cycles"]
    table = to_markdown(rows, desc)
    assert f"| {pre['run_cycles']} | {fpga['run_cycles']} | " \
           f"{fpga['run_cycles'] / pre['run_cycles']:.2f} |" in table
