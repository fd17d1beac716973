"""The figure table (``cost/terms.py``) is what the report is made of: the summary's keys
keep their order, every total is its term summed over the rows as the term says, and the
step's cycles are the terms that take time."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
from test_cost_multi_ipu import mlp, planned

from popart_unwind.cost import CostReport, OpCost
from popart_unwind.cost.terms import (
    ALWAYS,
    NOT_CYCLES,
    ON_IPU,
    PIPELINED,
    SEVERAL_IPUS,
    TERMS,
    TOTALLED,
    figure,
    summary_keys,
)

#: The summary's keys as plan files and benchmarks have always had them, in order.
ONE_IPU_KEYS = ["objective", "upper_bound", "exchange_bytes", "exchange_cycles", "cycles",
                "compute_cycles", "max_tile_bytes", "regions", "avoidable_exchange_bytes",
                "peak_tile_bytes", "always_live_max_tile_bytes", "peak_tile_bytes_floor",
                "fits"]
SEVERAL_IPU_KEYS = ["ipus", "ipu_copy_bytes", "ipu_copy_cycles", "per_ipu"]


def test_the_summary_keys_keep_their_order():
    one, _ = planned(mlp(2, None), 1)
    assert list(one.summary()) == ONE_IPU_KEYS
    split, _ = planned(mlp(4, [0, 0, 1, 1]), 2)
    assert list(split.summary()) == ONE_IPU_KEYS + SEVERAL_IPU_KEYS
    assert list(split.summary()["per_ipu"][0]) == ["peak_tile_bytes", "exchange_bytes",
                                                   "ipu_copy_bytes", "fits"]
    assert list(summary_keys(ALWAYS)) == ONE_IPU_KEYS
    assert list(summary_keys(SEVERAL_IPUS)) == SEVERAL_IPU_KEYS
    assert summary_keys(PIPELINED) == ("pipeline_cycles",)


def test_every_total_is_its_term_over_the_rows():
    report, _ = planned(mlp(4, [0, 0, 1, 1]), 2)
    for term in TOTALLED:
        expected = sum(getattr(row, term.field) * (row.executions if term.per_execution else 1)
                       for row in report.ops)
        assert getattr(report, str(term.key)) == expected, term.key
    timed = [t for t in TOTALLED if t.time != NOT_CYCLES]
    assert report.cycles == sum(getattr(report, str(t.key)) for t in timed)
    for row in report.ops:
        assert row.total_cycles == sum(getattr(row, t.field) for t in TERMS
                                       if t.time != NOT_CYCLES)
        assert row.ipu_cycles == sum(getattr(row, t.field) for t in TERMS if t.time == ON_IPU)
    assert sum(report.ipu_cycles(ipu) for ipu in range(2)) \
        == report.cycles - report.ipu_copy_cycles


def test_rows_and_reports_have_a_field_per_term_and_travel():
    names = {field.name for field in dataclasses.fields(OpCost)}
    assert {term.field for term in TERMS} <= names
    assert {str(term.key) for term in TOTALLED} <= {f.name for f in dataclasses.fields(CostReport)}
    report, _ = planned(mlp(2, None), 1)
    again = pickle.loads(pickle.dumps(report))
    assert again.summary() == report.summary()
    assert np.array_equal(again.received_bytes_per_tile, report.received_bytes_per_tile)


def test_labels_and_names_come_from_the_table():
    assert figure("exchange_bytes").table_label == "exchange bytes"
    assert figure("avoidable_exchange_bytes").table_label == "exchange left to save"
    assert figure("cycles").name == "cycles"
    assert figure("exchange_cycles").field == "cycles"
