"""The program's entry point (``cli.command``): ``main``'s status as the exit status, what
the run made frozen first so that the interpreter's collections at exit skip it; ``main``
itself leaves the collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from popart_unwind import cli
from popart_unwind.version import __version__

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("status", [0, 2])
def test_the_command_exits_with_mains_status_having_frozen_the_heap(monkeypatch, status):
    monkeypatch.setattr(cli, "main", lambda: status)
    assert gc.get_freeze_count() == 0
    try:
        with pytest.raises(SystemExit) as ended:
            cli.command()
        assert ended.value.code == status
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_main_leaves_the_collector_alone(capsys):
    assert cli.main(["--version"]) == 0
    assert gc.get_freeze_count() == 0
    assert __version__ in capsys.readouterr().out


def test_the_installed_program_and_python_m_run_the_command():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"popart-unwind": "popart_unwind.cli:command"}
    result = subprocess.run([sys.executable, "-m", "popart_unwind.cli", "--version"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    assert __version__ in result.stdout
