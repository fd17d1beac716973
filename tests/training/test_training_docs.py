"""docs/training.md lists exactly the op types whose family states a gradient rule."""

from __future__ import annotations

import re
from pathlib import Path

from popart_unwind.ir.op import DEFAULT_ONNX_OPSET, OpType
from popart_unwind.ops import REGISTRY

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()


def test_the_page_lists_every_op_with_a_gradient_rule():
    listed: dict[str, set[str]] = {}
    for domain, names in re.findall(r"^- `([\w.]+)`: ([^`]+?)(?=\n- `|\n\n)", PAGE,
                                    flags=re.MULTILINE | re.DOTALL):
        listed[domain] = {name.strip() for name in names.replace("\n", " ").split(",")}
    registered: dict[str, set[str]] = {}
    for domain, name in REGISTRY.names():
        if REGISTRY.gradient_rule(OpType(domain, name, DEFAULT_ONNX_OPSET)) is not None:
            registered.setdefault(domain, set()).add(name)
    assert listed == registered
