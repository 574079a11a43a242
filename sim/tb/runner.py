"""Launch cocotb 2.x tests under Verilator from pytest (``cocotb_tools.runner``).

* Each (block, preset[, waves]) variant is generated and built **once**, under a
  :class:`filelock.FileLock`, in ``build/sim/<block>-<preset>/``; a hash of the Verilog decides
  whether a rebuild is needed, so ``pytest -n 2`` workers share builds safely.
* Every test runs in its own ``build/sim/runs/<test name>/`` directory.
* Waveforms only when asked: ``WAVES=1`` builds a separate ``-waves`` variant with tracing.
* Coverage only when asked: ``TESSERA_COVERAGE=1`` builds a separate ``-cov`` variant with Verilator
  line and toggle coverage (:data:`COVERAGE_ARGS`); its runs go to ``build/sim/runs-cov/`` and
  each writes ``coverage-<block>-<preset>.dat`` there, merged and reported per block by
  :mod:`sim.verify.coverage` (``make coverage``). Normal builds and runs are not touched.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from filelock import FileLock

from sim.verilated.toolchain import (COCOTB_MAKE_VARS, ensure_verilator_on_path,
                                     generate_cached, hdl_digest, verilator_pch_workaround)

ROOT = Path(__file__).resolve().parents[2]   # sim/tb/runner.py -> the repository
BUILD = ROOT / "build" / "sim"
VERILATOR_ARGS = [
    # Amaranth emits width-extending assignments Verilator warns about; warnings stay visible
    # in the build log but do not stop the build. `make lint` runs -Wall with listed waivers.
    "-Wno-fatal", "-Wno-WIDTH",
    "-O3", "--x-assign", "fast", "--x-initial", "fast",
    # split the C++ into files make can compile in parallel (the training core's model is one
    # 15 MB translation unit otherwise: 4 min to compile, 1 min split with -j2 and -O0 for
    # the run-once initialisation code)
    "-j", "2",
]

#: Blocks whose generated functions are split at about 500 statements
#: (``--output-split-cfuncs``): GCC's time grows faster than linearly with a function's size,
#: and the training core's scheduled logic is a few functions of 10,000 lines. Measured on the
#: idle machine, the tiny core's C++ build: 33 and 37 s instead of 48 and 46 s (150 or 50
#: statements: more code, 64 and 90 s; 1000: 38 s). Smaller blocks gain nothing: the tiny
#: optimizer engine took 63 and 54 s against 45 and 53 s, FP32 sqrt 10 s against 7 s (many
#: more files, each with the precompiled header).
SPLIT_CFUNCS_BLOCKS = ("training_core", "training_ring", "systolic_array")

#: Blocks whose cocotb tests simulate for seconds while their model takes a minute to compile:
#: their C++ is built with -O0 (``OPT_FAST``/``OPT_GLOBAL``) instead of
#: :data:`~sim.verilated.toolchain.COCOTB_MAKE_VARS`' -O1. Measured one after the other on the
#: idle machine (build, then one test): the S = 8 systolic array 64.1 s + 6.8 s at -O1,
#: 41.6 s + 8.1 s at -O0, 36.1 s + 9.3 s at -O0 with its functions split (hence its place in
#: :data:`SPLIT_CFUNCS_BLOCKS`).
O0_BLOCKS = ("systolic_array",)
O0_MAKE_VARS = ("OPT_FAST=-O0", "OPT_GLOBAL=-O0")

#: Extra Verilator flags of a coverage build (``TESSERA_COVERAGE=1``).
COVERAGE_ARGS = ["--coverage-line", "--coverage-toggle"]
#: Where coverage runs write their ``coverage-<block>-<preset>.dat`` (one directory per test).
COVERAGE_RUNS = BUILD / "runs-cov"

__all__ = ["ROOT", "BUILD", "COVERAGE_ARGS", "COVERAGE_RUNS", "waves_requested",
           "coverage_requested", "ensure_verilator_on_path", "build_block", "run_cocotb"]


def waves_requested() -> bool:
    return os.environ.get("WAVES", "0") not in ("", "0")


def coverage_requested() -> bool:
    # not ``COVERAGE``: cocotb reads that one as a request for Python coverage of the testbench
    return os.environ.get("TESSERA_COVERAGE", "0") not in ("", "0")


def _runner():
    from cocotb_tools.runner import get_runner
    ensure_verilator_on_path()
    verilator_pch_workaround()
    return get_runner("verilator")


#: Blocks whose testbenches use only top-level ports (built without --public-flat-rw).
PORTS_ONLY_BLOCKS = ("training_core", "collective_ring", "training_ring", "matmul_engine",
                     "systolic_array")


def _build_args(block: str, coverage: bool) -> list[str]:
    return (VERILATOR_ARGS
            + (["--output-split-cfuncs", "500"] if block in SPLIT_CFUNCS_BLOCKS else [])
            + (COVERAGE_ARGS if coverage else []))


def _make_vars(block: str) -> tuple[str, ...]:
    """The ``make`` variables of a block's model build (later definitions win)."""
    return COCOTB_MAKE_VARS + (O0_MAKE_VARS if block in O0_BLOCKS else ())


def _source_digest(block: str, preset: str, coverage: bool) -> str:
    """A hash of everything the generated Verilog and its build depend on."""
    return hdl_digest(block, preset, _build_args(block, coverage), block in PORTS_ONLY_BLOCKS,
                      _make_vars(block))


def build_block(block: str, preset: str, *, waves: bool = False,
                coverage: bool = False) -> Path:
    """Generate and Verilator-build one variant once; return its build directory.

    Generation is skipped when no source of :mod:`hdl` changed since the last build (the
    training core takes most of a minute to convert); otherwise the Verilog is generated and
    the model rebuilt only if the Verilog itself changed."""
    tag = f"{block}-{preset}" + ("-waves" if waves else "") + ("-cov" if coverage else "")
    args = _build_args(block, coverage)
    build_dir = BUILD / tag
    BUILD.mkdir(parents=True, exist_ok=True)
    with FileLock(str(BUILD / f"{tag}.lock")):
        source = build_dir / f"tessera_{block}.v"
        stamp = build_dir / "verilog.sha256"
        src_stamp = build_dir / "source.sha256"
        src_digest = _source_digest(block, preset, coverage)
        if (src_stamp.exists() and src_stamp.read_text() == src_digest and stamp.exists()
                and source.exists()):
            return build_dir
        tmp = BUILD / f"{tag}.candidate.v"
        generate_cached(block, preset, tmp)
        # the build flags are part of what was built
        flags = repr((args, block in PORTS_ONLY_BLOCKS, _make_vars(block))).encode()
        digest = hashlib.sha256(tmp.read_bytes() + flags).hexdigest()
        if not (stamp.exists() and stamp.read_text() == digest and source.exists()):
            if build_dir.exists():
                shutil.rmtree(build_dir)
            build_dir.mkdir(parents=True)
            shutil.move(tmp, source)
            shutil.move(tmp.with_suffix(".json"), source.with_suffix(".json"))
            extra = []
            config_lines = []
            if block in PORTS_ONLY_BLOCKS:
                # cocotb's runner always passes --public-flat-rw (every signal visible to VPI:
                # slow to compile and about 6x slower to simulate, docs/toolchain.md); these
                # testbenches touch only the top's ports, so only those stay public
                config_lines.append(f'public_flat_rw -module "tessera_{block}" -var "*"')
                extra = ["--no-public-flat-rw"]
            # a module instantiated several times (the ring's cores) is Verilated and compiled
            # once as a hierarchical block, a library the top instantiates N times. (Verilator
            # 5 schedules a no_inline module's logic per instance: the three-core ring's C++
            # was 57 MB, three times one core's.) Coverage and waves builds keep no_inline
            # (one Verilated model), so their reports and traces name every signal by its
            # full path.
            shared = json.loads(source.with_suffix(".json").read_text()).get("shared_modules", [])
            if shared and not (coverage or waves):
                config_lines += [f'hier_block -module "{name}"' for name in shared]
                extra.append("--hierarchical")
            else:
                config_lines += [f'no_inline -module "{name}"' for name in shared]
            if config_lines:
                vlt = build_dir / "verilator_config.vlt"
                vlt.write_text("`verilator_config\n" + "".join(f"{line}\n"
                                                              for line in config_lines))
                extra.append(str(vlt))
            runner = _runner()              # sets MAKEFLAGS to COCOTB_MAKE_VARS
            saved = os.environ["MAKEFLAGS"]
            if block in O0_BLOCKS:
                os.environ["MAKEFLAGS"] = saved + " " + " ".join(O0_MAKE_VARS)
            try:
                runner.build(
                    sources=[source], hdl_toplevel=f"tessera_{block}", build_dir=build_dir,
                    build_args=args + extra, waves=waves, always=True,
                    log_file=build_dir / "build.log",
                )
            finally:
                os.environ["MAKEFLAGS"] = saved
            stamp.write_text(digest)
        else:
            tmp.unlink()
            tmp.with_suffix(".json").unlink()
        src_stamp.write_text(src_digest)
    return build_dir


def run_cocotb(block: str, preset: str, test_module: str, *, name: str,
               testcase: str | None = None, seed: int = 1, extra_env: dict | None = None) -> Path:
    """Run ``test_module``'s cocotb tests (or one ``testcase``) on ``block`` at ``preset``.

    Fails the calling pytest test if any cocotb test fails. ``extra_env`` is passed to the
    simulation; ``TESSERA_BLOCK`` and ``TESSERA_PRESET`` are always set so the testbench can
    build the matching config and golden model.
    """
    waves = waves_requested()
    coverage = coverage_requested()
    build_dir = build_block(block, preset, waves=waves, coverage=coverage)
    test_dir = (COVERAGE_RUNS if coverage else BUILD / "runs") / name
    test_dir.mkdir(parents=True, exist_ok=True)
    plusargs = []
    if coverage:
        # the file names which block and preset it measured (sim.verify.coverage reads them)
        cov_file = test_dir / f"coverage-{block}-{preset}.dat"
        cov_file.unlink(missing_ok=True)
        plusargs = [f"+verilator+coverage+file+{cov_file.name}"]
    env = {"TESSERA_BLOCK": block, "TESSERA_PRESET": preset, **(extra_env or {})}
    return _runner().test(
        hdl_toplevel=f"tessera_{block}", hdl_toplevel_lang="verilog",
        test_module=test_module, testcase=testcase,
        build_dir=build_dir, test_dir=test_dir, waves=waves, seed=seed, extra_env=env,
        plusargs=plusargs, log_file=test_dir / "sim.log",
    )
