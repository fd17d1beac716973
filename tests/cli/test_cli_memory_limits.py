"""Models too large for the machine's memory: refused before planning with the estimate, or,
where memory runs out during the work, one line and nothing written; never a traceback."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run
from test_cli_errors import assert_refused, outputs

from popart_unwind.errors import ResourceError
from popart_unwind.ir import Ir
from popart_unwind.report import forked, planning_memory
from popart_unwind.report.planning_memory import (
    BASE_BYTES,
    BYTES_PER_PLANNED_ELEMENT,
    available_bytes,
    check_planning_memory,
    estimated_bytes,
    planned_elements,
)


def test_the_estimate_counts_every_planned_element(model_path):
    ir = Ir.from_onnx(str(model_path))
    elements = 4 * 8 + 16 * 8 + 16  # x, w, b of the linear layer
    assert planned_elements(ir) == elements
    assert estimated_bytes(ir) == BASE_BYTES + BYTES_PER_PLANNED_ELEMENT * elements
    check_planning_memory(ir, available=estimated_bytes(ir))  # just enough
    with pytest.raises(ResourceError, match=f"{elements:,} planned elements"):
        check_planning_memory(ir, available=estimated_bytes(ir) - 1)


def test_a_model_needing_more_than_is_available_is_refused(model_path, out_dir, monkeypatch):
    monkeypatch.setattr(planning_memory, "available_bytes", lambda: 2**20)
    status, out, err = run("plan", str(model_path), *outputs(out_dir))
    assert_refused(status, out, err, out_dir, "needs at least 157.3 MB", "1.0 MB are available")


def test_running_out_of_memory_is_one_line_and_writes_nothing(model_path, out_dir,
                                                             monkeypatch):
    from popart_unwind.report import session

    def exhausted(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(session, "plan_session", exhausted)
    status, out, err = run("plan", str(model_path), *outputs(out_dir))
    assert_refused(status, out, err, out_dir, "ran out of memory")


def test_available_memory_is_read_from_meminfo_and_the_control_group(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  100 kB\nMemAvailable:   2048 kB\n")
    group = tmp_path / "group"
    group.mkdir()
    assert available_bytes(meminfo, group) == 2048 * 1024  # no control group files
    (group / "memory.max").write_text("max\n")
    (group / "memory.current").write_text("5\n")
    assert available_bytes(meminfo, group) == 2048 * 1024  # no limit
    (group / "memory.max").write_text("1000000\n")
    (group / "memory.current").write_text("400000\n")
    assert available_bytes(meminfo, group) == 600000  # the limit leaves less
    assert available_bytes(tmp_path / "none", tmp_path / "none") is None


FREED_ARRAYS = """
import ctypes, sys
import numpy as np
from popart_unwind.report.planning_memory import return_freed_memory
# what glibc does after freeing a large mapping: arrays up to its size come from the heap,
# and its trim threshold, twice that, keeps freed heap memory that reaches the heap's top
# (without it, whether the pins below find room lower down, leaving the arrays at the top
# to be trimmed, depends on what the imports left in the heap)
ctypes.CDLL(None).mallopt(-3, 64 * 2**20)
ctypes.CDLL(None).mallopt(-1, 128 * 2**20)
if sys.argv[1] == "set":
    return_freed_memory()
def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
before = rss()
arrays, pins = [], []
for index in range(8):  # 6 MiB each, each pinned by 32 KiB after it
    arrays.append(np.ones(3 * 2**18 + index))
    pins.append(np.ones(2**12))
del arrays
print(rss() - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not Path("/proc/self/status").exists(),
                    reason="glibc's mallopt and Linux's /proc")
def test_freed_arrays_go_back_to_the_system():
    def kept_kib(mode: str) -> int:
        # -P: the installed package, not the checkout's sources
        done = subprocess.run([sys.executable, "-P", "-c", FREED_ARRAYS, mode],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())

    assert kept_kib("raised") > 32 * 1024  # the heap keeps most of the 48 MiB
    assert kept_kib("set") < 4 * 1024


WORKER_HEAP = """
import resource
import numpy as np
from popart_unwind.report import forked
from popart_unwind.report.planning_memory import return_freed_memory
return_freed_memory()  # as the command does for a large model
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rounds():
    first = np.ones(2**20)  # 8 MiB: over the command's mmap threshold
    del first
    before = faults()
    for _ in range(20):
        again = np.ones(2**20)
        del again
    return faults() - before
print(rounds(), forked.run_forked([rounds], 1)[0][0])
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not forked.available(),
                    reason="glibc's mallopt and fork")
def test_a_forked_worker_reuses_the_memory_it_frees():
    """The command gives large freed arrays back to the system; a forked worker, which
    ends after its job, keeps them for its next arrays instead of faulting fresh pages in
    each time (``keep_freed_memory``)."""
    done = subprocess.run([sys.executable, "-P", "-c", WORKER_HEAP],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    parent, worker = (int(word) for word in done.stdout.split())
    assert parent > 20 * 256  # each round's 8 MiB a fresh mapping
    assert worker < 256


def test_freed_arrays_are_given_back_only_for_a_large_model(model_path, out_dir, monkeypatch):
    calls = []
    monkeypatch.setattr(planning_memory, "return_freed_memory", lambda: calls.append(1))
    ir = Ir.from_onnx(str(model_path))
    elements = planned_elements(ir)
    monkeypatch.setattr(planning_memory, "GIVE_BACK_FROM_ELEMENTS", elements + 1)
    assert not planning_memory.return_freed_memory_if_large(ir) and calls == []
    status, _, _ = run("plan", str(model_path), *outputs(out_dir))
    assert status == 0 and calls == []  # the command asks, and leaves glibc's threshold
    monkeypatch.setattr(planning_memory, "GIVE_BACK_FROM_ELEMENTS", elements)
    assert planning_memory.return_freed_memory_if_large(ir) and calls == [1]
    status, _, _ = run("plan", str(model_path), *outputs(out_dir), "--force")
    assert status == 0 and calls == [1, 1]
