"""The ``factory`` fixture of the model tests (a plugin of ``tests/conftest.py``: a
second ``conftest`` module would shadow the command-line tests' one)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder, made the current one and importable, holding ``tiny_factories.py``, whose
    ``gpt2()`` gives the tiny GPT-2 training step (``tiny_factories:gpt2`` on the command
    line)."""
    (tmp_path / "tiny_factories.py").write_text(
        "import make_models\n\n\ndef gpt2():\n"
        "    return make_models.tiny_model('gpt2', 'training')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path
