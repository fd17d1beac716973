"""``SessionOptions.spread_statistics_partners``: a producer-less tensor that only
statistics lay out (a batch norm's running mean, updated from the batch's mean) is moved
off the tiles ``popops::reduce`` lays every result out on, onto the least loaded tiles.

Laws: off, each running statistic lies where its batch statistic does (every layer's on the
same lowest tiles); on, each is the same layout over other tiles (elements that shared a
tile still share one), the running statistics no longer stack, the busiest tile holds
less, the exchange rises by at most the statistics' bytes (each update receives the
batch's once), and equal IRs get identical plans. A weight tied to a matmul is not moved."""

from __future__ import annotations

import numpy as np
from planner_testing import weight
from popart_unwind.transforms import plan_ir

from popart_unwind.cost import evaluate
from popart_unwind.frontends.builder import Builder
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.options import SessionOptions

ON = SessionOptions(spread_statistics_partners=True)
OFF = SessionOptions(spread_statistics_partners=False)
LAYERS, ROWS, CHANNELS = 6, 16, 64


def layers_with_running_means():
    """``LAYERS`` dense layers, each with a running mean of its output's channels updated
    as ``0.9 · running + 0.1 · mean`` (how a traced batch norm updates it)."""
    b = Builder()
    x = b.add_input_tensor("float32", [ROWS, CHANNELS], "x")
    for n in range(LAYERS):
        x = b.op("MatMul", [x, weight(b, (CHANNELS, CHANNELS), f"w{n}")])
        mean = b.op("ReduceMean", [x, np.array([0], np.int64)], {"keepdims": 0})
        running = weight(b, (CHANNELS,), f"running{n}")
        kept = b.op("Mul", [running, np.array(0.9, np.float32)])
        added = b.op("Mul", [mean, np.array(0.1, np.float32)])
        b.add_output_tensor(b.op("Add", [kept, added]))
    b.add_output_tensor(x)
    return b.ir()


def planned(options: SessionOptions):
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    ir = layers_with_running_means()
    plan = plan_ir(ir, target, options=options)
    mappings = {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors}
    return plan, evaluate(ir, target, mappings=mappings)


def running_tiles(plan) -> list[np.ndarray]:
    return [np.asarray(plan.tensor("", f"running{n}").tiles) for n in range(LAYERS)]


def test_off_every_running_statistic_lies_on_the_same_lowest_tiles():
    plan, _ = planned(OFF)
    first, *others = running_tiles(plan)
    assert first.min() == 0
    for tiles in others:
        np.testing.assert_array_equal(tiles, first)


def test_on_the_same_layouts_move_apart_onto_other_tiles():
    off_plan, off = planned(OFF)
    on_plan, on = planned(ON)
    used = set()
    for before, after in zip(running_tiles(off_plan), running_tiles(on_plan), strict=True):
        # a renaming of the tiles: elements share a tile on exactly as before
        _, before_groups = np.unique(before, return_inverse=True)
        _, after_groups = np.unique(after, return_inverse=True)
        np.testing.assert_array_equal(before_groups, after_groups)
        assert not used & set(after.tolist())  # no two layers' statistics share a tile
        used |= set(after.tolist())
    assert on.always_live_max_tile_bytes < off.always_live_max_tile_bytes
    statistics_bytes = LAYERS * CHANNELS * 4
    assert 0 <= on.exchange_bytes - off.exchange_bytes <= statistics_bytes
    for n in range(LAYERS):  # weights keep their matmul's layout
        np.testing.assert_array_equal(on_plan.tensor("", f"w{n}").tiles,
                                      off_plan.tensor("", f"w{n}").tiles)


def test_on_is_the_default_and_reruns_are_identical():
    assert SessionOptions().spread_statistics_partners
    first, _ = planned(SessionOptions())
    again, _ = planned(SessionOptions())
    for a, b in zip(running_tiles(first), running_tiles(again), strict=True):
        np.testing.assert_array_equal(a, b)
