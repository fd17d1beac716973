"""Warnings the libraries raise while the command runs: a failed run prints its one error line
and nothing else; a run that succeeds prints each warning as one ``popart-unwind: warning:``
line, leaving out the libraries' notices of their own deprecations."""

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


def run_factory(tmp_path, monkeypatch, name: str, batch: int) -> tuple[int, str, str]:
    pytest.importorskip("torch")
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORY.format(batch=batch)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    status = main(["plan", f"{name}:make", "--tiles", "8", "--quiet", "--baseline", "linear",
                   "--out", str(tmp_path / "plan.json")], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_a_run_that_succeeds_says_each_warning_in_one_line(tmp_path, monkeypatch):
    status, out, err = run_factory(tmp_path, monkeypatch, "cli_warning_ok", batch=8)
    assert status == 0 and out == ""
    assert err == ("popart-unwind: warning: weights were initialised at random "
                   "(UserWarning from cli_warning_ok)\n")


def test_a_failed_run_prints_only_its_error(tmp_path, monkeypatch):
    status, out, err = run_factory(tmp_path, monkeypatch, "cli_warning_bad", batch=5)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("popart-unwind: error: ")
    assert not (tmp_path / "plan.json").exists()
