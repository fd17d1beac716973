"""Every test module may import the shared helpers of ``tests`` (``cli_runner``) and the
model builders of ``tests/models`` by name."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "models")]

#: Fixtures of ``tests/models`` (there, a second ``conftest`` module would shadow the one of
#: ``tests/cli``, which test modules import by name).
pytest_plugins = ["tiny_factory"]
