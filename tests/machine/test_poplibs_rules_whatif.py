"""benchmarks/ipu_measured.py --poplibs-rules: the three Poplibs planner rules the IPU Model
lacks, asked of small matmuls where each rule's effect can be stated exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ipu_measured

from popart_unwind.target import IpuModel, MatmulPartition, TileTarget


def test_serial_steps_are_taken_only_when_no_parallel_split_fits():
    # 512^3 in float32 on 16 tiles: every tile's operand blocks exceed the bound
    alone = ipu_measured.poplibs_rules_cycles("float32", 512, 512, 512, tiles=16, max_steps=1)
    serial = ipu_measured.poplibs_rules_cycles("float32", 512, 512, 512, tiles=16)
    assert not alone["fits"]
    assert serial["fits"] and serial["serial"] > 1
    assert serial["cycles"] > alone["cycles"]  # the steps re-receive an operand each


@pytest.mark.parametrize("tiles", [3, 5, 7])
def test_without_shared_buses_or_serial_steps_the_rules_cost_what_the_model_costs(tiles):
    """An odd row split (no bus sharing) in one step is costed exactly as the IPU Model
    costs that partition: the rules change only what they say they change."""
    found = ipu_measured.poplibs_rules_cycles("float16", 48, 64, 40, tiles=tiles, max_steps=1)
    model = TileTarget(IpuModel(tiles_per_ipu=tiles)).matmul_cost(
        1, 48, 64, 40, "float16", MatmulPartition(1, found["rows"], found["inner"],
                                                   found["cols"]))
    if found["rows"] % 2:
        assert found["cycles"] == model.cycles
    else:
        assert found["cycles"] < model.cycles  # the rows' operand arrives twice as fast


def test_an_even_row_split_receives_the_shared_operand_at_twice_the_rate():
    found = ipu_measured.poplibs_rules_cycles("float16", 64, 64, 64, tiles=5, max_steps=1)
    model = TileTarget(IpuModel(tiles_per_ipu=5)).matmul_cost(
        1, 64, 64, 64, "float16", MatmulPartition(1, 4, 1, 1))
    assert (found["rows"], found["inner"], found["cols"]) == (4, 1, 1)
    # the RHS block (64 x 64 halves) is received by all four tiles but for its own quarter
    received = 64 * 64 - 64 * 64 // 4
    saved = received * 2 // 4 - -(-received * 2 // 8)
    assert model.cycles - found["cycles"] == saved
