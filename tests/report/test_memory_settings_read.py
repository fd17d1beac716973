"""The transforms a forked memory search runs once for every setting
(``memory_search.shared_transforms``) must read none of the options the settings set:
only ``SETTING_READERS``, the planner, the pipeline's order and the options' own checks
read them."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from popart_unwind.transforms import registry

import popart_unwind
from popart_unwind.options import SessionOptions, with_options
from popart_unwind.report.memory_search import (
    MEMORY_SETTINGS,
    SETTING_READERS,
    shared_transforms,
)

PACKAGE = Path(popart_unwind.__file__).parent


def _set_options() -> set[str]:
    return {assignment.split("=", 1)[0] for setting in MEMORY_SETTINGS
            for assignment in setting}


def _readers(names: set[str]) -> dict[Path, set[str]]:
    """Each module of the package that reads one of ``names`` as an attribute."""
    found: dict[Path, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.setdefault(path, set()).add(node.attr)
    return found


def test_only_the_readers_the_search_names_read_the_settings_options():
    allowed = {Path(inspect.getfile(type(registry.get(name)))) for name in SETTING_READERS}
    allowed |= {PACKAGE / "options.py", Path(registry.__file__)}
    planner = Path(inspect.getfile(registry.get(registry.UNWIND_LAYOUTS).__class__)).parent
    readers = _readers(_set_options())
    assert readers  # the scan finds the readers it allows
    unexpected = {path: names for path, names in readers.items()
                  if path not in allowed and planner not in path.parents}
    assert unexpected == {}


def test_the_shared_transforms_lead_every_settings_pipeline_and_stop_at_a_reader():
    settings = list(MEMORY_SETTINGS)
    for options in (SessionOptions(), with_options(SessionOptions(), ["loss=sum"])):
        shared = shared_transforms(options, settings)
        assert shared and not set(shared) & SETTING_READERS
        for setting in settings:
            names = registry.pipeline_names(with_options(options, setting))
            assert names[:len(shared)] == shared
            assert names[len(shared)] in SETTING_READERS
