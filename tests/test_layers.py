"""The layers of docs/ARCHITECTURE.md, enforced: every import of every module points down a
layer (or stays in its own package), function-level and type-checking imports included, and
every module imports."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "popart_unwind"
#: Bottom to top, as docs/ARCHITECTURE.md draws them. A module may import its own package
#: and any package of a lower layer, never a higher one.
LAYERS = (
    ("errors", "validation", "option_names", "options", "version", "doors", "_hooks"),
    ("memory",),
    ("unwind",),
    ("shapes",),
    ("ir",),
    ("machine",),
    ("target",),  # the public face of the machine: IpuModel, TileTarget
    ("rewrite",),
    ("ops",),
    ("layers",),  # a training step's layers: recognition, plan options, the choice
    ("training",),  # the backward pass, losses and optimizers built in the IR
    ("frontends",),
    ("cost",),
    ("baselines",),
    ("transforms",),
    ("report",),
    ("cli", ""),  # "": the package's own __init__, which loads the front ends
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def source_files() -> dict[str, Path]:
    """Module name -> source file, for the package and ``transforms/`` (installed inside it)."""
    found = {}
    for folder, prefix in ((ROOT / PACKAGE, (PACKAGE,)), (ROOT / "transforms",
                                                         (PACKAGE, "transforms"))):
        for path in sorted(folder.rglob("*.py")):
            parts = [*prefix, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def layer_of(module: str) -> str:
    """The layer part of a module name: ``popart_unwind.ops.views`` -> ``ops``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(module: str, source: str, known: set[str],
                     is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every package import in ``source``, at any depth of the code
    (``is_package``: the source is the package's ``__init__``, the anchor of relative
    imports)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                anchor = here[:len(here) - node.level + 1] if node.level > 1 else here
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append((node.lineno, target if target in known else base))
    return [(line, name) for line, name in found if name.split(".")[0] == PACKAGE]


def violations(module: str, source: str, known: set[str], is_package: bool = False
               ) -> list[str]:
    """Every import in ``module`` that points to a higher layer."""
    own = layer_of(module)
    bad = []
    for line, target in imported_modules(module, source, known, is_package):
        other = layer_of(target)
        if other != own and RANK[other] > RANK[own]:
            bad.append(f"{module}:{line} imports {target} ({other} is above {own or PACKAGE})")
    return bad


FILES = source_files()
KNOWN = set(FILES) | {f"{PACKAGE}._hooks"}


def test_every_package_has_a_layer():
    assert {layer_of(name) for name in KNOWN} <= set(RANK)


@pytest.mark.parametrize("module", sorted(FILES))
def test_imports_point_down_the_layers(module):
    path = FILES[module]
    assert violations(module, path.read_text(), KNOWN, path.name == "__init__.py") == []


@pytest.mark.parametrize("module", sorted(FILES))
def test_every_module_imports(module):
    importlib.import_module(module)


@pytest.mark.parametrize("module, source", [
    ("popart_unwind.memory.region", "from popart_unwind.cli import main\n"),
    ("popart_unwind.memory.region", "def f():\n    import popart_unwind.ops.views\n"),
    ("popart_unwind.ir.ir", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                            "    from popart_unwind.frontends import Builder\n"),
    ("popart_unwind.ops.views", "from popart_unwind import cli\n"),
    ("popart_unwind.transforms.prune", "from ..report import summary\n"),
    ("popart_unwind.ops.linalg", "from popart_unwind.layers import choose_plans\n"),
    ("popart_unwind.layers.plan_choice",
     "from popart_unwind.transforms.unwind_layouts import plan_ir\n"),
    ("popart_unwind.baselines.popart_baseline",
     "from popart_unwind.transforms.unwind_layouts.start_tiles import planner_plans\n"),
])
def test_an_upward_import_is_caught(module, source):
    assert violations(module, source, KNOWN)


def test_downward_and_own_package_imports_pass():
    assert not violations("popart_unwind.ops.views",
                          "from popart_unwind.memory import Chain\n"
                          "from popart_unwind.ops.common import ints\n"
                          "from . import registry\n", KNOWN)


def loaded_layers(code: str) -> set[str]:
    """The layers whose modules a fresh interpreter has loaded after running ``code``."""
    probe = (f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules "
             f"if m.startswith('{PACKAGE}.'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=ROOT.parent)
    return {layer_of(name) for name in json.loads(done.stdout.splitlines()[-1])}


def test_importing_a_layer_loads_nothing_above_it():
    for layer in ("memory", "unwind", "ir"):
        above = {name for name in loaded_layers(f"import {PACKAGE}.{layer}")
                 if RANK[name] > RANK[layer]}
        assert above == set(), f"importing {layer} loaded {sorted(above)}"


def test_the_doors_load_the_front_ends_and_op_classes_on_first_use():
    code = (f"from {PACKAGE}.ir import Ir, OpType\n"
            "ir = Ir()\n"
            "callee = ir.create_graph('callee')\n"
            "op = ir.main_graph.create_op(OpType('ai.graphcore', 'Call', 1), [], 0,"
            " {'callee': callee})\n"
            "assert type(op).__name__ == 'CallOp', type(op)\n"
            f"from {PACKAGE}.ir import Builder\n"
            "assert Builder.__module__.endswith('builder')")
    assert {"ops", "frontends"} <= loaded_layers(code)
