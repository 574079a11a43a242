"""The mutation tool itself (sim/verify/mutants.py, sim/verify/mutation.py): sites, skipped
contexts, stable ids, mutant sources, test selection."""
import ast
import textwrap
from pathlib import Path

import pytest

from sim.verify.mutants import EXCLUDED_FILES, all_mutants, file_mutants
from sim.verify.mutation import (ROOT, LineMap, drifted_equivalents, load_equivalents, main,
                                  select)

SOURCE = textwrap.dedent('''\
    """Docstring 7 with a number."""
    WIDTH = 8


    class Block:
        def __repr__(self):
            return f"Block({1 + 2})"

        def elaborate(self, m, a, b, c):
            if a < 0:
                raise ValueError(f"a must be >= 0, got {a - 1}")
            assert b == 1
            m.d.comb += c.eq(a + b)
            with m.If(a == b):
                m.d.sync += c.eq(0)
            with m.Elif(a >= (b << 2)):
                m.d.sync += c.eq(a ^ b)
            return a | b
''')


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "hdl").mkdir()
    (tmp_path / "hdl" / "blk.py").write_text(SOURCE)
    return tmp_path


def test_sites_and_replacements(tree):
    ms = file_mutants(tree, "hdl/blk.py")
    got = sorted((m.line, m.operator, m.original, m.mutated) for m in ms)
    assert got == sorted([
        (2, "CONST", "8", "7"),
        (13, "EQ0", "a + b", "0"), (13, "BINOP", "+", "-"),
        (14, "COND", "a == b", "not (a == b)"), (14, "CMP", "==", "!="),
        (15, "CONST", "0", "1"),
        (16, "COND", "a >= (b << 2)", "not (a >= (b << 2))"), (16, "CMP", ">=", ">"),
        (16, "BINOP", "<<", ">>"), (16, "CONST", "2", "1"),
        (17, "EQ0", "a ^ b", "0"), (17, "BINOP", "^", "|"),
        (18, "BINOP", "|", "&"),
    ])
    src = (tree / "hdl" / "blk.py").read_bytes()
    for m in ms:
        ast.parse(m.apply(src))           # every mutant is valid Python
        assert m.apply(src) != src
    by = {(m.line, m.operator): m for m in ms}
    assert b"c.eq(((a) - (b)))" in by[13, "BINOP"].apply(src)
    assert b"m.If(((a == b) == 0))" in by[14, "COND"].apply(src)
    assert b"m.Elif(((a) > (b << 2)))" in by[16, "CMP"].apply(src)
    assert by[2, "CONST"].module_level and not by[13, "BINOP"].module_level


def test_skipped_contexts(tree):
    lines = {m.line for m in file_mutants(tree, "hdl/blk.py")}
    # docstring, __repr__, the validation guard and its message, the assert, the augmented
    # assignment operator itself
    assert not lines & {1, 6, 7, 10, 11, 12}


def test_ids_stable_when_lines_move(tree):
    before = {m.id: m.describe() for m in file_mutants(tree, "hdl/blk.py")}
    (tree / "hdl" / "blk.py").write_text("# a new comment\n\n" + SOURCE)
    after = {m.id: m.describe() for m in file_mutants(tree, "hdl/blk.py")}
    assert before.keys() == after.keys()
    assert len(before) == len(file_mutants(tree, "hdl/blk.py"))   # ids are unique


def test_real_tree_mutants_compile_and_exclusions():
    ms = all_mutants(ROOT)
    assert len(ms) > 1000
    assert not {m.path for m in ms} & set(EXCLUDED_FILES)
    assert len({m.id for m in ms}) == len(ms)
    sources = {}
    for m in ms[::37]:
        src = sources.setdefault(m.path, (ROOT / m.path).read_bytes())
        compile(m.apply(src), m.path, "exec")


def test_sample_is_deterministic():
    ms = all_mutants(ROOT)
    a = [m.id for m in select(ms, 20, 3)]
    assert a == [m.id for m in select(ms, 20, 3)]
    assert a != [m.id for m in select(ms, 20, 4)]
    assert len(select(ms, None, 3)) == len(ms)


def test_test_selection(tree):
    ms = {(m.line, m.operator): m for m in file_mutants(tree, "hdl/blk.py")}
    tmap = LineMap({"tests": {
        "tests/test_a.py::t1": {"outcome": "passed", "seconds": 2.0,
                                "lines": {"hdl/blk.py": [13, 14]}},
        "tests/test_a.py::t2": {"outcome": "passed", "seconds": 1.0,
                                "lines": {"hdl/blk.py": [13]}},
        "tests/test_a.py::t3": {"outcome": "passed", "seconds": 0.5,
                                "lines": {"hdl/other.py": [1]}},
        "tests/test_b.py::t4": {"outcome": "failed", "seconds": 0.1,
                                "lines": {"hdl/blk.py": [13, 16]}},
        "tests/test_c.py::p[0]": {"outcome": "passed", "seconds": 0.2,
                                  "lines": {"hdl/blk.py": [17]}},
        "tests/test_c.py::p[1]": {"outcome": "passed", "seconds": 0.3,
                                  "lines": {"hdl/blk.py": [17]}},
        "tests/test_c.py::q": {"outcome": "passed", "seconds": 5.0,
                               "lines": {"hdl/blk.py": [17]}},
    }})
    # one parametrization of each test function before the others
    assert tmap.tests_for(ms[17, "EQ0"]) == [
        "tests/test_c.py::p[0]", "tests/test_c.py::q", "tests/test_c.py::p[1]"]
    assert tmap.tests_for(ms[13, "BINOP"]) == ["tests/test_a.py::t2", "tests/test_a.py::t1"]
    assert tmap.tests_for(ms[16, "CMP"]) == []          # only a failing test executes it
    # module level: every test executing the file
    assert tmap.tests_for(ms[2, "CONST"]) == [
        "tests/test_c.py::p[0]", "tests/test_a.py::t2", "tests/test_a.py::t1",
        "tests/test_c.py::q", "tests/test_c.py::p[1]"]
    # specific: fewest hdl/ files first (every parametrization), then quickest
    tmap.n_files["tests/test_c.py::q"] = 3
    assert tmap.tests_for(ms[17, "EQ0"], specific=True) == [
        "tests/test_c.py::p[0]", "tests/test_c.py::p[1]", "tests/test_c.py::q"]
    assert tmap.budgeted(["tests/test_a.py::t2", "tests/test_a.py::t1"], 2.5) == [
        "tests/test_a.py::t2"]
    assert tmap.budgeted(["tests/test_a.py::t1"], 0.1) == ["tests/test_a.py::t1"]
    assert tmap.files_of(["tests/test_a.py::t1"]) == [
        "tests/test_a.py::t3", "tests/test_a.py::t2", "tests/test_a.py::t1"]
    assert "tests/test_c.py::p[1]" in tmap.files_of(["tests/test_c.py::q"])


@pytest.mark.parametrize("argv", [["--sample", "0"], ["--jobs", "0"]])
def test_cli_rejects_bad_counts(argv):
    with pytest.raises(SystemExit):
        main(argv)


def test_equivalent_table_names_its_sites():
    """Every entry of sim/verify/mutation_equivalent.toml still names the code it was written
    for (an id counts identical sites in order: a new one earlier in the function moves it)."""
    table = load_equivalents()
    assert table
    assert drifted_equivalents(table, all_mutants(ROOT)) == {}


def test_drifted_equivalent_is_found(tree, tmp_path):
    """A new identical constant earlier in the function shifts the ids of the later ones: the
    entry written for line 15's ``c.eq(0)`` now names another site, and is reported."""
    ms = {(m.line, m.operator): m for m in file_mutants(tree, "hdl/blk.py")}
    m = ms[15, "CONST"]
    src = (tree / "hdl" / "blk.py").read_bytes()
    table = {m.id: {"reason": "r", "code": m.code(src)}}
    assert m.code(src) == "m.d.sync += c.eq(0)"
    assert drifted_equivalents(table, file_mutants(tree, "hdl/blk.py"), tree) == {}
    (tree / "hdl" / "blk.py").write_text(SOURCE.replace(
        "        m.d.comb += c.eq(a + b)\n",
        "        m.d.comb += c.eq(a + b)\n        m.d.sync += b.eq(0)\n"))
    after = file_mutants(tree, "hdl/blk.py")
    assert m.id in {x.id for x in after}            # the id still exists ...
    drift = drifted_equivalents(table, after, tree)
    assert list(drift) == [m.id] and "b.eq(0)" in drift[m.id]   # ... for the new site
    (tree / "hdl" / "blk.py").write_text("X = 1\n")
    assert "no such mutant" in drifted_equivalents(table, file_mutants(tree, "hdl/blk.py"),
                                                   tree)[m.id]
    bad = tmp_path / "eq.toml"
    bad.write_text('["abc"]\nreason = "r"\n')
    with pytest.raises(ValueError, match="'code'"):
        load_equivalents(bad)
