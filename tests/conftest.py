"""Every test module may import the model builders of ``tests/models`` by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "models"))
