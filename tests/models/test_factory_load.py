"""Loading a PyTorch factory (``report/model_input.py``): the cyclic collector is paused
while torch, the model's libraries and the trace fill the heap, and passes over it once at
the end."""

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
        before = _full_passes()
        load_model("tiny_factories:gpt2", True)
        assert _full_passes() == before + 1
        assert gc.isenabled() is enabled  # the collector left as it was found
    finally:
        if was:
            gc.enable()
