"""Transforms change the IR only through the rewriter they are handed.

The registry learns what a transform changed from its rewriter's record, so a change made
any other way goes unnoticed (and, outside checking mode, uncounted). This test reads every
module under ``transforms/`` and fails on any direct IR mutation: a call of a mutating
method on anything but the rewriter, an assignment to a tensor's or op's state, an edit of
a graph's input or output list or of an op's attributes, or a call of a function that
changes the IR on a rewriter of its own making.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from popart_unwind.rewrite import Rewriter

TRANSFORMS = Path(__file__).resolve().parents[2] / "transforms"

#: The IR's own mutators (Graph, Ir, Op, Tensor), by method name.
IR_MUTATORS = frozenset({
    "add_constant", "add_input", "add_tensor", "add_variable", "connect_input",
    "connect_output", "create_graph", "create_op", "create_output", "disconnect_input",
    "disconnect_output", "erase_op", "inherit_placement_attributes", "mark_output",
    "remove_graph", "remove_tensor", "replace_all_uses", "_add_consumer", "_next_op_id",
    "_remove_consumer",
})
#: Everything the rewriter can change, so that a call on another receiver is caught too.
REWRITER_METHODS = frozenset(name for name, value in vars(Rewriter).items()
                             if callable(value) and not name.startswith("_")
                             and name not in {"pool", "take_record"})
MUTATING_METHODS = IR_MUTATORS | REWRITER_METHODS
#: State a transform must not assign (``tensor.shape = ...``, ``graph.output_ids = ...``).
IR_STATE = frozenset({"attributes", "data", "dtype", "input_ids", "output_ids", "producer",
                      "settings", "shape", "tensor_type", "tile_mapping"})
#: Containers of ops, tensors and graphs whose items a transform must not edit in place.
IR_CONTAINERS = frozenset({"attributes", "input_ids", "output_ids", "_consumers", "_inputs",
                           "_outputs"})
CONTAINER_EDITS = frozenset({"append", "clear", "extend", "insert", "pop", "popitem", "remove",
                             "setdefault", "sort", "update"})
#: Functions that change the IR through the rewriter they are given, or through one of
#: their own when given none: inside a transform they must be handed one.
TAKE_A_REWRITER = frozenset({"canonicalize", "infer_op", "infer_shapes", "plan_ir",
                             "seed_callee_inputs"})


def _is_rewriter(node: ast.expr) -> bool:
    """A name bound to the rewriter: ``rewriter`` or ``<something>.rewriter``."""
    return (isinstance(node, ast.Name) and node.id == "rewriter") or \
        (isinstance(node, ast.Attribute) and node.attr == "rewriter")


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        found = [node.target]
    elif isinstance(node, ast.Delete):
        found = list(node.targets)
    else:
        return []
    flat = []
    while found:
        target = found.pop()
        if isinstance(target, ast.Tuple | ast.List):
            found += target.elts
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            flat.append(target)
    return flat


def _assigned_state(target: ast.expr) -> str | None:
    if isinstance(target, ast.Attribute):
        if target.attr in IR_STATE:
            return f"assigns .{target.attr}"
        if isinstance(target.value, ast.Attribute) and target.value.attr == "settings":
            return f"assigns .settings.{target.attr}"
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
            and target.value.attr in IR_CONTAINERS:
        return f"writes .{target.value.attr}[...]"
    return None


def direct_mutations(source: str) -> list[str]:
    """``line: what`` for each IR change in ``source`` that bypasses the rewriter."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            what = _assigned_state(target)
            if what is not None:
                found.append(f"{target.lineno}: {what}")
        if not isinstance(node, ast.Call):
            continue
        func, name = node.func, _called_name(node.func)
        if name == "setattr":
            found.append(f"{node.lineno}: calls setattr")
        elif isinstance(func, ast.Attribute) and name in MUTATING_METHODS \
                and not _is_rewriter(func.value):
            found.append(f"{node.lineno}: calls .{name}( on something other than the rewriter")
        elif isinstance(func, ast.Attribute) and name in CONTAINER_EDITS \
                and isinstance(func.value, ast.Attribute) and func.value.attr in IR_CONTAINERS:
            found.append(f"{node.lineno}: calls .{func.value.attr}.{name}(")
        elif name in TAKE_A_REWRITER and not any(k.arg == "rewriter" for k in node.keywords):
            found.append(f"{node.lineno}: calls {name}( without rewriter=")
    return sorted(found, key=lambda line: (int(line.split(":")[0]), line))


MODULES = sorted(TRANSFORMS.rglob("*.py"))


def test_every_transform_module_is_read():
    names = {path.relative_to(TRANSFORMS).as_posix() for path in MODULES}
    assert {"prune.py", "merge_duplicate_ops.py", "helpers.py",
            "unwind_layouts/plan.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(TRANSFORMS).as_posix())
def test_transform_modules_change_the_ir_only_through_the_rewriter(path):
    assert direct_mutations(path.read_text()) == []


@pytest.mark.parametrize(("line", "what"), [
    ("graph.erase_op(op)", "calls .erase_op( on something other than the rewriter"),
    ("op.graph.remove_tensor(t)", "calls .remove_tensor( on something other than the rewriter"),
    ("graph.replace_all_uses(a, b)",
     "calls .replace_all_uses( on something other than the rewriter"),
    ("graph.create_op(t, [x])", "calls .create_op( on something other than the rewriter"),
    ("ir.remove_graph(g.id)", "calls .remove_graph( on something other than the rewriter"),
    ("other.set_type(t, 'float32', ())",
     "calls .set_type( on something other than the rewriter"),
    ("tensor.tile_mapping = m", "assigns .tile_mapping"),
    ("tensor.dtype, tensor.shape = d, s", ("assigns .dtype", "assigns .shape")),
    ("graph.output_ids = []", "assigns .output_ids"),
    ("graph.output_ids[0] = t.id", "writes .output_ids[...]"),
    ("graph.input_ids.pop(0)", "calls .input_ids.pop("),
    ("op.attributes['perm'] = [1, 0]", "writes .attributes[...]"),
    ("del op.attributes['perm']", "writes .attributes[...]"),
    ("op.settings.name = 'n'", "assigns .settings.name"),
    ("setattr(op.settings, 'name', 'n')", "calls setattr"),
    ("infer_shapes(graph.ir, registry)", "calls infer_shapes( without rewriter="),
])
def test_the_reader_catches_each_kind_of_direct_change(line, what):
    whats = (what,) if isinstance(what, str) else what
    assert direct_mutations(line) == [f"1: {each}" for each in whats]


def test_the_reader_lets_changes_through_the_rewriter_and_plain_reads_pass():
    source = "\n".join([
        "rewriter.erase_op(op)",
        "self.rewriter.replace_all_uses(a, b)",
        "rewriter.set_attribute(op, 'perm', [1, 0])",
        "infer_shapes(graph.ir, registry, rewriter=rewriter)",
        "shape = tensor.shape",
        "pairs = op.attributes['then_inputs']",
        "self.graph = Graph()",
        "seen.add(graph.id)",
        "self._graphs[graph.id] = False",
    ])
    assert direct_mutations(source) == []
