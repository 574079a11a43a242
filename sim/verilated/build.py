"""Build the training core as a Verilated C++ model with a C++ cycle loop (``harness.cpp``):

* ``libtessera_core.so`` -- loaded by :class:`sim.verilated.core.VerilatedCore` (ctypes);
* ``tessera_core_bare`` -- the same loop as a program with no Python (the speed reference).

Unlike the cocotb tier (``sim/tb/runner.py``), no signal is made public to VPI: the harness
touches only the top's ports. The build lives in ``build/verilated/<preset>/`` and is redone
only when a source of :mod:`hdl`, the harness or the flags change (a hash, as the cocotb
runner's). Converting the S = 8 core to Verilog takes about a minute; the C++ build a few.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from filelock import FileLock

from sim.verilated.toolchain import ROOT, ensure_verilator_on_path, generate_cached, hdl_digest

__all__ = ["BUILD", "build_core", "BuildError"]

BUILD = ROOT / "build" / "verilated"
HARNESS = Path(__file__).with_name("harness.cpp")
BLOCK = "training_core"
TOP = f"tessera_{BLOCK}"
#: Verilator flags (no --public*: only ports are touched); -j 2 splits the 15 MB model into
#: files compiled in parallel.
VERILATOR_FLAGS = ["-Wno-fatal", "-Wno-WIDTH", "-O3", "--x-assign", "fast", "--x-initial",
                   "fast", "-j", "2", "--prefix", "Vcore", "-CFLAGS", "-fPIC"]
#: C++ optimisation of the model's per-cycle code (OPT_FAST) and the C++ loop: the training
#: run, the demo and the benchmarks. The test suite builds at ``-O1`` (``TEST_CXX_OPT``): it
#: checks words and cycle counts, not speed, and the tiny core's C++ compiles in less than
#: half the time (one 1.8 MB file of it: 31 s at -O2, 14 s at -O1).
CXX_OPT = "-O2"
TEST_CXX_OPT = "-O1"
CXX_OPTS = ("-O0", "-O1", "-O2", "-O3")


class BuildError(RuntimeError):
    """The Verilog generation or the C++ build failed (the log's path is in the message)."""


def _run(cmd, log: Path, cwd=None, env=None):
    with open(log, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    if r.returncode:
        raise BuildError(f"{cmd[0]} failed (exit {r.returncode}); see {log}")


def build_core(preset: str = "default", *, log=print, cxx_opt: str = CXX_OPT) -> Path:
    """Generate, Verilate and compile the training core at ``preset`` once; return the build
    directory (holding ``libtessera_core.so`` and ``tessera_core_bare``).

    ``cxx_opt`` (one of :data:`CXX_OPTS`): the C++ optimisation; a build other than
    :data:`CXX_OPT` lives in ``build/verilated/<preset><cxx_opt>/``."""
    if cxx_opt not in CXX_OPTS:
        raise ValueError(f"cxx_opt must be one of {CXX_OPTS}, not {cxx_opt!r}")
    from hdl.core.config import CoreConfig
    from hdl.core.host import host_cmd_layout, host_rsp_layout

    config = CoreConfig.preset(preset)          # raises ValueError naming a bad preset
    cmd_bits = host_cmd_layout(config).size
    rsp_bits = host_rsp_layout(config).size
    if cmd_bits <= 64 or rsp_bits <= 64:
        raise BuildError(f"the harness expects host payloads wider than 64 bits, not "
                         f"{cmd_bits}/{rsp_bits} (preset {preset!r})")
    cmd_words, rsp_words = -(-cmd_bits // 32), -(-rsp_bits // 32)
    tag = preset if cxx_opt == CXX_OPT else f"{preset}{cxx_opt}"
    out = BUILD / tag
    BUILD.mkdir(parents=True, exist_ok=True)
    flags = VERILATOR_FLAGS + [cxx_opt, cmd_words, rsp_words]
    digest = hdl_digest(BLOCK, preset, flags, HARNESS.read_bytes())   # everything built
    lib, bare = out / "libtessera_core.so", out / "tessera_core_bare"
    obj = out / "obj"
    blog = out / "build.log"
    with FileLock(str(BUILD / f"{tag}.lock")):
        stamp, obj_stamp = out / "build.sha256", obj / "model.sha256"
        if stamp.exists() and stamp.read_text() == digest and lib.exists() and bare.exists():
            return out
        ensure_verilator_on_path()
        verilog = out / f"{TOP}.v"
        src_stamp = out / "source.sha256"
        src_digest = hdl_digest(BLOCK, preset)
        if not (src_stamp.exists() and src_stamp.read_text() == src_digest
                and verilog.exists()):
            # an hdl/ source changed: regenerate; rebuild the model only if the Verilog did
            log(f"[build] generating {TOP} ({preset}) Verilog ...")
            out.mkdir(parents=True, exist_ok=True)
            generate_cached(BLOCK, preset, verilog)
            src_stamp.write_text(src_digest)
        model_digest = hashlib.sha256(verilog.read_bytes()
                                      + repr((VERILATOR_FLAGS, cxx_opt)).encode()).hexdigest()
        if not (obj_stamp.exists() and obj_stamp.read_text() == model_digest):
            if obj.exists():
                shutil.rmtree(obj)
            log(f"[build] verilating and compiling the model (a few minutes; log: {blog}) ...")
            _run(["verilator", "--cc", str(verilog), "--top-module", TOP, "--Mdir", str(obj),
                  *VERILATOR_FLAGS], blog)
            make_vars = [f"OPT_FAST={cxx_opt}", "OPT_SLOW=-O0", f"OPT_GLOBAL={cxx_opt}",
                         "CFG_CXXFLAGS_PCH_I=-include"]
            env = {k: v for k, v in os.environ.items() if k != "MAKEFLAGS"}
            _run(["make", "-j2", "-C", str(obj), "-f", "Vcore.mk", *make_vars,
                  "libVcore.a", "libverilated.a"], blog, env=env)
            obj_stamp.write_text(model_digest)
        log(f"[build] linking the C++ loop ({HARNESS.name}) ...")
        root = subprocess.run(["verilator", "--getenv", "VERILATOR_ROOT"], capture_output=True,
                              text=True, check=True).stdout.strip()
        inc = [f"-I{obj}", f"-I{root}/include", f"-I{root}/include/vltstd"]
        defs = [f"-DCMD_WORDS={cmd_words}", f"-DRSP_WORDS={rsp_words}"]
        libs = [str(obj / "libVcore.a"), str(obj / "libverilated.a"), "-pthread", "-latomic"]
        cxx = os.environ.get("CXX", "g++")
        _run([cxx, "-std=c++17", cxx_opt, "-fPIC", "-shared", "-DTESSERA_LIB", *defs, *inc,
              str(HARNESS), *libs, "-o", str(lib)], blog)
        _run([cxx, "-std=c++17", cxx_opt, "-DTESSERA_BARE", *defs, *inc, str(HARNESS), *libs,
              "-o", str(bare)], blog)
        (out / "build.json").write_text(json.dumps(
            {"preset": preset, "top": TOP, "cmd_words": cmd_words, "rsp_words": rsp_words,
             "verilator_flags": VERILATOR_FLAGS, "cxx_opt": cxx_opt}, indent=2) + "\n")
        stamp.write_text(digest)
        log(f"[build] done: {out}")
    return out
