"""Loading a PyTorch factory (``report/model_input.py``): the cyclic collector is paused
while torch, the model's libraries and the trace fill the heap, and passes over it once at
the end; what it froze meanwhile is given back, and what another froze is left so."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from popart_unwind.report.model_input import load_model


def _full_passes() -> int:
    return gc.get_stats()[-1]["collections"]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_factory_loads_with_one_full_pass_of_the_collector(factory, enabled):
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        gc.collect()  # the generations emptied: no pass of the collector's own comes due
        before = _full_passes()
        load_model("tiny_factories:gpt2", True)
        assert _full_passes() == before + 1
        assert gc.isenabled() is enabled  # the collector left as it was found
        assert gc.get_freeze_count() == 0
    finally:
        if was:
            gc.enable()


def _tracked(marker: object) -> bool:
    """Whether the collector's generations hold ``marker`` (a frozen object they do not)."""
    return any(found is marker for found in gc.get_objects())


def test_objects_frozen_before_a_load_stay_frozen(factory):
    marker: list[object] = [[]]
    gc.freeze()
    try:
        assert not _tracked(marker)
        load_model("tiny_factories:gpt2", True)
        assert not _tracked(marker)
    finally:
        gc.unfreeze()
    assert _tracked(marker)
