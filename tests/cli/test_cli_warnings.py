"""Warnings raised while the command runs: a failed run prints its one error line and
nothing else; those raised while a factory's model loads are summed up in one note line
(tests/cli/test_cli_library_output.py has the rest of what a model's code says)."""

from __future__ import annotations

import io
import textwrap

import pytest

from popart_unwind.cli import main

FACTORY = """
import warnings
import torch

def make():
    warnings.warn("a notice about the library itself", FutureWarning)
    warnings.warn("a notice about the library itself", DeprecationWarning)
    warnings.warn("weights were initialised at random", UserWarning)
    warnings.warn("weights were initialised at random", UserWarning)  # said once
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4), (torch.randn(2, {batch}),)
"""


def run_factory(tmp_path, monkeypatch, name: str, batch: int,
                quiet: str = "--quiet") -> tuple[int, str, str]:
    pytest.importorskip("torch")
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORY.format(batch=batch)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    status = main(["plan", f"{name}:make", "--tiles", "8", quiet, "--baseline", "linear",
                   "--out", str(tmp_path / "plan.json")], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_a_run_that_succeeds_sums_up_the_model_s_warnings_in_one_line(tmp_path,
                                                                       monkeypatch):
    """Warnings while the model loads are the model's code's and libraries': one note
    line (notices of deprecation not counted), each with --verbose, none with --quiet."""
    status, out, err = run_factory(tmp_path, monkeypatch, "cli_warning_ok", batch=8)
    assert (status, out, err) == (0, "", "")
    status, out, err = run_factory(tmp_path, monkeypatch, "cli_warning_ok2", batch=8,
                                   quiet="--verbose")
    assert status == 0
    assert [line for line in err.splitlines() if "UserWarning" in line] == [
        "popart-unwind: [UserWarning from cli_warning_ok2] weights were initialised at "
        "random"] * 2
    status, out, err = run_factory(tmp_path, monkeypatch, "cli_warning_ok3", batch=8,
                                   quiet="--baseline=linear")
    assert status == 0
    assert err == ("popart-unwind: note: while the model loaded, its code and libraries "
                   "raised 2 warnings (UserWarning from cli_warning_ok3 ×2); --verbose "
                   "shows them\n")


def test_a_failed_run_prints_only_its_error(tmp_path, monkeypatch):
    status, out, err = run_factory(tmp_path, monkeypatch, "cli_warning_bad", batch=5)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("popart-unwind: error: ")
    assert not (tmp_path / "plan.json").exists()
