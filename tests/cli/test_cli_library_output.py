"""What a factory's code and libraries print, log and warn while the model loads is held
back from the command's lines: one note line by default, each line with ``--verbose``,
nothing with ``--quiet``; a failed run prints only its error (and with ``--verbose`` what
was said before it)."""

from __future__ import annotations

import io
import textwrap

import pytest

from popart_unwind.cli import main

FACTORY = """
import logging
import os
import sys
import warnings

import torch

# a library logger that does not propagate and writes to stderr itself (as transformers')
_own = logging.getLogger("chattylib")
_own.addHandler(logging.StreamHandler(sys.stderr))
_own.propagate = False
print("importing the model module")

def make():
    print("building the model")
    print("to stderr as well", file=sys.stderr)
    os.write(1, b"a C-level line on descriptor 1\\n")
    os.write(2, b"a C-level line on descriptor 2\\n")
    logging.getLogger("otherlib.sub").warning("a propagated record")
    _own.warning("a record written by its own handler")
    warnings.warn("weights were initialised at random", UserWarning)
    warnings.warn("a notice about the library itself", FutureWarning)
    {fail}
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4), (torch.randn(2, 8),)
"""

SAID = ["importing the model module", "building the model", "to stderr as well",
        "a C-level line on descriptor 1", "a C-level line on descriptor 2",
        "a propagated record", "a record written by its own handler",
        "weights were initialised at random", "a notice about the library itself"]


def plan(tmp_path, monkeypatch, capfd, name: str, *flags: str,
         fail: bool = False) -> tuple[int, str, str]:
    """Run the command in this process; what it wrote to its streams and to the
    descriptors (the oracle for what reached the terminal)."""
    pytest.importorskip("torch")
    body = FACTORY.replace("{fail}", "raise ValueError('no such size')" if fail else "pass")
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    capfd.readouterr()
    out, err = io.StringIO(), io.StringIO()
    status = main(["plan", f"{name}:make", "--tiles", "8", "--baseline", "linear", *flags],
                  stdout=out, stderr=err)
    fd_out, fd_err = capfd.readouterr()
    return status, out.getvalue() + fd_out, err.getvalue() + fd_err


def test_by_default_one_note_line_sums_up_what_was_said(tmp_path, monkeypatch, capfd):
    status, out, err = plan(tmp_path, monkeypatch, capfd, "lib_out_default")
    assert status == 0
    for line in SAID:
        assert line not in out and line not in err
    notes = [line for line in err.splitlines() if line.startswith("popart-unwind: note:")]
    # the notice of the library's own future is left out of the count
    assert notes == [
        "popart-unwind: note: while the model loaded, its code and libraries raised 1 "
        "warning (UserWarning from lib_out_default), printed 6 lines (stdout ×3, "
        "stderr ×3) and logged 1 record (otherlib); --verbose shows them"]
    assert "objective" in out  # the summary table is still there


def test_quiet_says_nothing(tmp_path, monkeypatch, capfd):
    status, out, err = plan(tmp_path, monkeypatch, capfd, "lib_out_quiet", "--quiet")
    assert (status, out, err) == (0, "", "")


def test_verbose_shows_every_line(tmp_path, monkeypatch, capfd):
    status, out, err = plan(tmp_path, monkeypatch, capfd, "lib_out_verbose", "--verbose")
    assert status == 0
    for line in SAID:
        assert line not in out  # never among the summary
        assert sum(line in said for said in err.splitlines()) == 1, line
    assert "popart-unwind: [stdout] building the model" in err.splitlines()
    assert "popart-unwind: [otherlib WARNING] a propagated record" in err.splitlines()


def test_a_failed_load_prints_only_its_error(tmp_path, monkeypatch, capfd):
    status, out, err = plan(tmp_path, monkeypatch, capfd, "lib_out_fail", fail=True)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("popart-unwind: error: ")
    status, out, err = plan(tmp_path, monkeypatch, capfd, "lib_out_fail2", "--verbose",
                            fail=True)
    assert status == 2 and out == ""
    assert err.splitlines()[-1].startswith("popart-unwind: error: ")
    assert "popart-unwind: [stdout] building the model" in err.splitlines()


def test_quiet_and_verbose_together_are_a_usage_error():
    assert main(["plan", "x.onnx", "--quiet", "--verbose"], stdout=io.StringIO(),
                stderr=io.StringIO()) == 2
