"""The ISA's encoding: assembler/disassembler round trip, field checks, the generated page."""
import random
from pathlib import Path

import pytest

from hdl.core.isa import (ARG_LAYOUTS, INSTR_BITS, Op, assemble, assemble_program, decode,
                          disassemble, disassemble_program, encode)
from hdl.core.isadoc import render

ROOT = Path(__file__).resolve().parents[1]


def random_fields(rng, op):
    out = {}
    for name, f in ARG_LAYOUTS[op]:
        width = f.shape if isinstance(f.shape, int) else f.shape.width
        out[name] = rng.getrandbits(width)
    return out


@pytest.mark.parametrize("op", Op.ALL)
def test_every_instruction_round_trips(op):
    rng = random.Random(op)
    for _ in range(200):
        fields = random_fields(rng, op)
        word = encode(op, **fields)
        assert 0 <= word < 1 << INSTR_BITS
        assert decode(word) == (op, fields)
        text = disassemble(word)
        assert assemble(text) == word, text


def test_program_round_trip_and_unknown_words():
    words = [encode(Op.LOOP, count=3, stride=8), encode(Op.FENCE), encode(Op.ENDLOOP), 13,
             encode(Op.HALT)]
    text = disassemble_program(words)
    assert ".word" in text.splitlines()[3]
    assert assemble_program(text + "\n# comment\n") == words


@pytest.mark.parametrize("call, message", [
    (lambda: encode(Op.MATMUL, M=1 << 12), "does not fit"),
    (lambda: encode(Op.MATMUL, nope=1), "no field 'nope'"),
    (lambda: encode(Op.VEC, rows=1.5), "must be an int"),
    (lambda: encode(99), "op must be one of"),
    (lambda: assemble("FROB a=1"), "unknown mnemonic"),
    (lambda: assemble("VEC rows"), "expected name=value"),
    (lambda: assemble("VEC rows=x"), "bad value"),
])
def test_bad_encodings_raise_clear_errors(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_docs_isa_is_generated_from_the_layouts():
    assert (ROOT / "docs" / "isa.md").read_text() == render(), \
        "docs/isa.md is stale: run `make docs`"
