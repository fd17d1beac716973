"""The model of ``popart-unwind demo``: one training step of a small GPT-2.

What people train, at sizes where a GC200's tiles matter: transformers' GPT-2 decoder (2
layers, width 256, 4 heads, a 4,096-token vocabulary) with its LM head tied to the token
embedding, so one table is both gathered from and multiplied by; batch 4, sequence 128;
forward, the model's own cross-entropy of the next tokens, backward and an SGD update of
every weight. The step is shipped as the PyTorch front end imports it, in the IR's stable
JSON (``tests/models/make_demo_model.py`` builds the file), so the demo needs neither
PyTorch nor files. The weights' values are not shipped: the plan depends on their shapes
and types only; the constants keep theirs.
"""

from __future__ import annotations

import gzip
from importlib import resources

from popart_unwind.ir import Ir

#: The packaged file (beside this module).
DEMO_FILE = "demo_gpt2_training.json.gz"

#: What the demo plans, in the words of its summary's and report's title.
DEMO_TITLE = "popart-unwind demo: a GPT-2 training step (tied LM head, batch 4 × 128 tokens)"


def build_demo_ir() -> Ir:
    """The demo's training step as a fresh Ir (nothing shared between calls)."""
    data = resources.files(__package__).joinpath(DEMO_FILE).read_bytes()
    ir = Ir.from_json(gzip.decompress(data).decode())
    ir.metadata.update({"source": "demo: GPT-2 training step (PyTorch front end)",
                        "kind": "training", "format": "ir-json"})
    return ir
