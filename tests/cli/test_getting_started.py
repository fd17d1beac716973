"""docs/getting-started.md's code runs as shown: its factory file, written out whole, plans
(forward and training), and its ONNX export plans once its dynamic axis is sized."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_runner import run

DOC = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def block_with(text: str) -> str:
    (found,) = [block for block in python_blocks() if text in block]
    return found


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("torch")
    (tmp_path / "mymodel.py").write_text(block_with("def make():"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("training", [False, True])
def test_the_factory_shown_plans(folder, training):
    flags = ["--training"] if training else []
    status, out, err = run("plan", "mymodel:make", "--tiles", "64", *flags,
                           "--out", str(folder / "plan.json"))
    assert status == 0, err
    assert out.startswith("Against PopART's heuristic, ours ")
    assert "up.weight" in (folder / "plan.json").read_text()


def test_the_export_shown_plans_with_its_dimension_sized(folder):
    exec(compile(block_with("torch.onnx.export"), "export.py", "exec"), {})
    model = folder / "tiny_mlp.onnx"
    assert model.is_file()
    status, _, err = run("plan", str(model), "--tiles", "64", "--quiet")
    assert status == 2 and "--dim batch=N" in err  # as the page shows
    for sized in (["--dim", "batch=32"], ["--input-shape", "x=32,256"]):
        status, out, err = run("plan", str(model), "--tiles", "64", *sized)
        assert status == 0, err
        assert out.startswith("Against PopART's heuristic, ours ")
