"""docs/popart-operators.md stays true: each table row's "ours" column is what the op
registry holds for that domain and type, and the table of op types PopART does not register
lists exactly the registered types the table of PopART's op types leaves out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from popart_unwind.ir.op import OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import LayoutRule

PAGE = Path(__file__).resolve().parents[2] / "docs" / "popart-operators.md"
STATUSES = ("shape rule, layout rule", "shape rule, barrier", "no shape rule, layout rule",
            "no shape rule, barrier", "refused")
_SECTION = re.compile(r"^## (.+)$", re.MULTILINE)


def status(domain: str, name: str) -> str:
    """What the registry holds for an op type, in the page's words."""
    opdef = REGISTRY.lookup(OpType(domain, name, 1))
    if opdef is None:
        return "refused"
    shape = "shape rule" if opdef.infer is not None else "no shape rule"
    layout = "barrier" if type(opdef.layout) is LayoutRule else "layout rule"
    return f"{shape}, {layout}"


def table(section: str) -> list[dict[str, str]]:
    """The rows of the first table under the heading ``section``, as column -> cell."""
    text = PAGE.read_text(encoding="utf-8")
    headings = list(_SECTION.finditer(text))
    [start] = [h.end() for h in headings if h.group(1) == section]
    end = min([h.start() for h in headings if h.start() > start], default=len(text))
    lines = [line for line in text[start:end].splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")),
                     strict=True)) for line in lines[2:]]


POPART = table("PopART's op types")
OURS_ONLY = table("Op types we take that PopART does not register")


def test_tables_are_sorted_unique_and_spelt_right():
    for rows in (POPART, OURS_ONLY):
        keys = [(row["domain"], row["op type"]) for row in rows]
        assert keys == sorted(set(keys))
        assert all(row["ours"] in STATUSES for row in rows)
    assert len(POPART) >= 190  # the page lists 195: a truncated parse would miss rows
    hows = {row["how PopART takes it"] for row in POPART}
    assert hows == {"op", "op, internal", "rewritten before import", "folded at import"}


@pytest.mark.parametrize("row", POPART + OURS_ONLY,
                         ids=lambda row: f"{row['domain']}.{row['op type']}")
def test_ours_is_what_the_registry_holds(row):
    assert row["ours"] == status(row["domain"], row["op type"])


def test_every_registered_op_type_is_listed_once():
    popart = {(row["domain"], row["op type"]) for row in POPART}
    ours_only = {(row["domain"], row["op type"]) for row in OURS_ONLY}
    assert ours_only == set(REGISTRY.names()) - popart
