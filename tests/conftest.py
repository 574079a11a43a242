"""pytest configuration: cocotb tier marked ``cocotb``, tests of the Verilated core's C++ loop
``verilator``; fixed seeds everywhere; the longest tests first."""
import pytest

#: Node ids of the longest tests (each over about a minute with its Verilator build or
#: Verilog generation, measured on a fresh clone on the 2-core machine, 2026-11-28), longest
#: first: those of ``make test``, then those of ``make test-long``. Both run them first and
#: hand out tests one at a time (``--maxschedchunk 1``), so the two workers share the long
#: ones instead of one of them finishing alone at the end. Every other test keeps pytest's
#: order after them.
LONG_FIRST = (
    "tests/test_training_ring_cocotb.py::test_training_ring_dataparallel_backpressure",
    "tests/test_train_verilated.py::test_short_run_is_bit_exact_and_writes_its_outputs",
    "tests/test_core_cocotb.py::test_training_core[s4_adam_mixed_widths]",
    "tests/test_fuzz_engines_cocotb.py::test_engine_fuzz[optim_engine-3-250]",
    "tests/test_array_cocotb.py::test_systolic_array_s8_cocotb[random_tiles_all_modes-env0]",
    "tests/test_training_ring.py::test_allreduce_program_bit_exact_on_every_core[2]",
    "tests/test_grad_cocotb.py::test_grad_unit_cocotb[elementwise_random]",
    "tests/test_fuzz_engines_cocotb.py::test_engine_fuzz[matmul_engine-3-250]",
    "tests/test_collective_cocotb.py::test_collective_ring_cocotb[tiny-n4]",
    # make test-long
    "tests/test_training_ring_cocotb.py::test_training_ring_fpga_build_dataparallel",
    "tests/test_training_ring.py::test_sendrecv_then_stopped_links_give_err_link",
    "tests/test_core_cocotb.py::test_training_core[s8_adam_micro2]",
    "tests/test_matmul_engine_cocotb.py::test_matmul_engine_default_s8",
)


_RANK = {nodeid: i for i, nodeid in enumerate(LONG_FIRST)}


def _rank(item) -> int:
    return _RANK.get(item.nodeid, len(LONG_FIRST))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cocotb" in item.nodeid:
            item.add_marker(pytest.mark.cocotb)
        if "verilated" in item.nodeid:
            item.add_marker(pytest.mark.verilator)
    items.sort(key=_rank)           # stable: the rest keep their order
