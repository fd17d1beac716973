"""Outputs are all written or none, are checked before any work, follow symbolic links, and
disappear with their temporaries when the run fails or is stopped by SIGTERM or SIGINT."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import onnx
import pytest
from bad_inputs import snapshot
from cli_runner import run

from popart_unwind.errors import OutputError
from popart_unwind.report import atomic

PLAN = ("plan", "model/linear.onnx", "--tiles", "8", "--baseline", "none", "--quiet")


def test_a_failing_second_output_leaves_the_first_untouched(world, monkeypatch):
    def broken(*args, **kwargs):
        raise OutputError("annotation failed")

    monkeypatch.setattr("popart_unwind.report.onnx_annotate.annotated_bytes", broken)
    before = snapshot(world)
    status, _, err = run(*PLAN, "--out", "existing.json", "--onnx-out", "out/a.onnx",
                         "--report", "out/report")
    assert (status, err) == (2, "popart-unwind: error: annotation failed\n")
    assert snapshot(world) == before  # the earlier plan is still there, nothing new


def test_a_full_disk_names_the_output_not_its_temporary(world, monkeypatch):
    def full(path, mode="r", *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "open", full, raising=False)
    before = snapshot(world)
    status, _, err = run(*PLAN, "--out", "out/plan.json")
    assert (status, err) == (2, "popart-unwind: error: cannot write --out out/plan.json: "
                                "No space left on device\n")
    assert snapshot(world) == before


def test_unwritable_outputs_are_found_before_planning(world, monkeypatch):
    def planning(*args, **kwargs):
        raise AssertionError("planned although the output cannot be written")

    monkeypatch.setattr("popart_unwind.report.session.plan_session", planning)
    status, _, err = run(*PLAN, "--out", "/proc/self/plan.json")
    assert status == 2 and "/proc/self" in err


def test_no_output_replaces_external_data_or_a_factory_module(world):
    from conftest import linear_layer_model

    folder = world / "external"
    folder.mkdir()
    onnx.save(linear_layer_model(), str(folder / "model.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    (world / "mymodels.py").write_text("def make():\n    raise SystemExit('not run')\n")
    before = snapshot(world)
    for argv, word in (
            (("plan", "external/model.onnx", "--out", "external/weights.bin"),
             "external data of the input model"),
            (("plan", "external/model.onnx", "--onnx-out", "external/weights.bin"),
             "external data of the input model"),
            (("plan", "mymodels:make", "--out", "mymodels.py"),
             "the source of the model's module")):
        status, out, err = run(*argv, "--tiles", "8")
        assert (status, out) == (2, "") and err.count("\n") == 1 and word in err, err
    assert snapshot(world) == before


def test_outputs_follow_symbolic_links_to_files(world):
    os.symlink("existing.json", world / "plan-link.json")
    assert run(*PLAN, "--out", "plan-link.json")[0] == 0
    assert (world / "plan-link.json").is_symlink()  # the link stays, its target is new
    assert json.loads((world / "existing.json").read_text())["version"] == 1
    assert not (world / "existing-hard.json").read_text().startswith("{")  # a hard link
    # is a second name of the old file, which is replaced, not written into


def test_an_empty_folder_becomes_the_report(world):
    assert run(*PLAN, "--report", "out")[0] == 0
    assert (world / "out" / "index.html").is_file()
    assert not [p for p in world.iterdir() if p.name.startswith(".")]


def test_unknown_ops_are_planned_as_barriers_when_allowed(world):
    from bad_inputs import BAD_MODEL_FILES

    model = BAD_MODEL_FILES["custom-domain"][0](world)
    status, _, err = run("plan", str(model), "--tiles", "8", "--quiet", "--allow-unknown-ops",
                         "--out", "out/plan.json")
    assert status == 0
    assert err.count("\n") == 1 and err.startswith("popart-unwind: warning: ")
    assert "com.example::Foo (node 'relu')" in err
    plan = json.loads((world / "out" / "plan.json").read_text())
    assert plan["ops_without_rule"] == {"com.example::Foo": 1}


def test_signal_handlers_are_restored_after_a_run(world):
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    assert run(*PLAN, "--out", "out/plan.json")[0] == 0
    assert run(*PLAN, "--out", "/dev/null")[0] == 2
    assert {s: signal.getsignal(s) for s in previous} == previous


# -- signals, in a process of their own --------------------------------------------------------
DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import {module} as target

    ready = Path(sys.argv[1])
    real = target.{function}

    def slow(*args, **kwargs):
        ready.write_text("ready")
        time.sleep(60)
        return real(*args, **kwargs)

    target.{function} = slow
    from popart_unwind.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def started(driver: Path, ready: Path, world: Path, step: str,
            *outputs: str) -> subprocess.Popen:
    """The driver planning PLAN with ``outputs``, once it says it has reached ``step``."""
    process = subprocess.Popen(
        [sys.executable, str(driver), str(ready), *PLAN, *outputs],
        cwd=world, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"the run never reached {step}"
        time.sleep(0.05)
    return process


@pytest.mark.parametrize("module,function,signum,status", [
    ("popart_unwind.report.session", "plan_session", signal.SIGTERM, 143),
    ("popart_unwind.report.html", "write_report", signal.SIGTERM, 143),
    ("popart_unwind.report.session", "plan_session", signal.SIGINT, 130),
], ids=["sigterm-while-planning", "sigterm-while-reporting", "sigint-while-planning"])
def test_a_signal_removes_every_temporary(world, tmp_path, module, function, signum, status):
    ready = tmp_path / "ready"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(module=module, function=function))
    before = snapshot(world)
    process = started(driver, ready, world, "the slow step", "--out", "existing.json",
                      "--onnx-out", "out/a.onnx", "--report", "out/report")
    assert any(p.name.startswith(".") for p in (world / "out").iterdir())  # reserved
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert out == ""
    assert process.returncode == status, err
    assert err.splitlines() == [f"popart-unwind: stopped by {signal.Signals(signum).name}; "
                                f"nothing was written"], err
    assert snapshot(world) == before


STUCK_DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, {unwind_tests!r})
    from hard_program import hard_program
    import popart_unwind.report.session as target

    ready = Path(sys.argv[1])

    def stuck(*args, **kwargs):
        solver = hard_program(highs_limit=60.0)
        ready.write_text("ready")
        solver.run()  # compiled code, the GIL released: no Python handler runs meanwhile
        raise AssertionError("the solve was not cut short")

    target.plan_session = stuck
    from popart_unwind.cli import main
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm", "sigint"])
def test_a_signal_ends_a_run_held_in_compiled_code_within_2_s(world, tmp_path, signum,
                                                               status):
    ready = tmp_path / "ready"
    driver = tmp_path / "driver.py"
    unwind_tests = str(Path(__file__).parents[1] / "unwind")
    driver.write_text(STUCK_DRIVER.format(unwind_tests=unwind_tests))
    before = snapshot(world)
    process = started(driver, ready, world, "the solve", "--out", "existing.json",
                      "--report", "out/report")
    time.sleep(0.5)  # into the solve
    sent = time.monotonic()
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 2.0
    assert (process.returncode, out) == (status, ""), err
    assert err.splitlines() == [f"popart-unwind: stopped by {signal.Signals(signum).name}; "
                                f"nothing was written"], err
    assert snapshot(world) == before
