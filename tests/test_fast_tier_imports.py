"""The fast tier (``-m "not cocotb and not verilator"``) needs no cocotb: every fast-tier test
module imports in a fresh interpreter in which ``import cocotb`` (and ``cocotb_tools``)
fails. Shared helpers live in modules without cocotb (sim/tb/amaranth_tb.py, payload.py,
cycles.py, matmul_cmds.py, ...); the cocotb testbenches import them, not the other way round."""
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: Test modules of the slow tier (cocotb / Verilator): marked by tests/conftest.py from their
#: names, the same rule decides here.
def _fast_modules() -> list[str]:
    return sorted(p.stem for p in TESTS.glob("test_*.py")
                  if "cocotb" not in p.stem and "verilated" not in p.stem)


BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cocotb", "cocotb_tools", "pytest_cocotb"):
            raise ImportError(f"fast tier imported {name}")
        return None
sys.meta_path.insert(0, Block())
for k in [k for k in sys.modules if k.split(".")[0] in ("cocotb", "cocotb_tools")]:
    del sys.modules[k]
"""


def test_fast_tier_modules_import_without_cocotb():
    mods = _fast_modules()
    assert "test_fast_tier_imports" in mods and "test_matmul_engine" in mods, mods
    code = BLOCKER + "\n".join(
        ["import importlib, traceback", "bad = []", f"for m in {mods!r}:", "    try:",
         "        importlib.import_module(m)", "    except ImportError as e:",
         "        bad.append(f'{m}: {e}')", "print('\\n'.join(bad)); sys.exit(1 if bad else 0)"])
    r = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True,
                       timeout=600, env={"PYTHONPATH": f"{ROOT}:{TESTS}",
                                         "AMARANTH_USE_YOSYS": "builtin",
                                         "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, f"fast-tier modules that need cocotb:\n{r.stdout}{r.stderr[-2000:]}"


def test_the_blocker_blocks():
    """The check can fail: a module that imports cocotb is refused."""
    r = subprocess.run([sys.executable, "-c", BLOCKER + "import sim.tb.cocotb_stream"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and "fast tier imported cocotb" in r.stderr, r.stderr[-2000:]
