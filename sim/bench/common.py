"""Run a cocotb benchmark test on a block and collect the JSON it writes."""
from __future__ import annotations

import json
from pathlib import Path

from sim.tb.runner import BUILD, ROOT, run_cocotb

DOCS_BENCH = ROOT / "docs" / "bench"


def run_bench(block: str, preset: str, module: str, testcase: str, *, extra_env=None) -> dict:
    """Run ``module.testcase`` (a cocotb test that writes ``$TESSERA_BENCH_OUT``); return its JSON.

    Raises if the cocotb test fails (its assertions check the results it measures).
    """
    from cocotb_tools.runner import get_results

    out = BUILD / "bench" / f"{block}-{preset}-{testcase}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    xml = run_cocotb(block, preset, module, name=f"bench-{block}-{preset}-{testcase}",
                     testcase=testcase,
                     extra_env={"TESSERA_BENCH_OUT": str(out), **(extra_env or {})})
    total, failed = get_results(Path(xml))
    if total == 0 or failed:
        raise RuntimeError(f"benchmark {module}.{testcase} on {block}-{preset}: "
                           f"{failed} of {total} cocotb tests failed")
    return json.loads(out.read_text())


def write_json(name: str, data: dict) -> Path:
    DOCS_BENCH.mkdir(parents=True, exist_ok=True)
    path = DOCS_BENCH / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def write_markdown(name: str, text: str) -> Path:
    DOCS_BENCH.mkdir(parents=True, exist_ok=True)
    path = DOCS_BENCH / f"{name}.md"
    path.write_text(text.rstrip() + "\n")
    return path


def publish(name: str, data: dict, markdown: str) -> None:
    """Write ``docs/bench/<name>.json`` (``data``) and ``.md`` (``markdown``), print the
    table and where they went."""
    j, md = write_json(name, data), write_markdown(name, markdown)
    print(markdown)
    print(f"wrote {j} and {md}")
