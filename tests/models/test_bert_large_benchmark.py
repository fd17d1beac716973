"""benchmarks/bert_large.py on a narrow BERT: the layer split placed as published, the
pipeline planned and costed, and the scaling from fewer layers exact where cycles are
linear in the layers."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bert_large
from popart_unwind.transforms import run_pipeline

from popart_unwind.ir import TensorType

#: A narrow BERT of the benchmark's structure (heads, MLM and NSP, tied decoder).
NARROW = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=96)
LAYER = re.compile(r"bert\.encoder\.layer\.(\d+)\.")


def ipu_of_layer(split: tuple[int, ...]) -> dict[int, int]:
    """Layer -> IPU, by counting the split out."""
    layers = itertools.chain.from_iterable([ipu] * count for ipu, count in enumerate(split))
    return dict(enumerate(layers))


def test_blocks_begin_where_the_published_split_says():
    found = bert_large.blocks(bert_large.LAYERS_PER_IPU)
    owners = ipu_of_layer(bert_large.LAYERS_PER_IPU)
    first_of = {ipu: min(k for k, v in owners.items() if v == ipu) for ipu in range(1, 4)}
    assert found == {"bert.embeddings": 0,
                     **{f"bert.encoder.layer.{first_of[ipu]}": ipu for ipu in range(1, 4)},
                     "bert.pooler": 0}


def test_every_weight_is_read_on_its_layer_ipu():
    """After the pipeline's transforms each layer's weights are read (forward, backward,
    update) only on the IPU the split gives the layer; embeddings and heads on IPU 0."""
    layers = 8  # two layers per IPU: a block holds more than its first layer
    ir = bert_large.import_replica(layers, 1, NARROW)
    run_pipeline(ir)
    owners = ipu_of_layer(bert_large.layer_split(layers))
    checked = 0
    for tensor in ir.main_graph.tensors:
        if tensor.tensor_type is not TensorType.VARIABLE or not tensor.consumers:
            continue
        match = LAYER.search(tensor.id)
        expected = owners[int(match.group(1))] if match else 0
        assert {op.settings.vgraph_id for op in tensor.consumers} == {expected}, tensor.id
        checked += 1
    assert checked >= 16 * layers  # every layer's weights were seen


class Report:
    def __init__(self) -> None:
        self.items: list = []

    def put(self, item: object) -> None:
        self.items.append(item)


def test_a_narrow_replica_plans_as_a_four_ipu_pipeline():
    report = Report()
    bert_large.run_replica(dict(layers=4, micro_batch=2, baseline=True, recompute="none",
                                amp=None, shape=NARROW), report)
    kind, row = report.items[-1]
    assert kind == "done"
    assert all(count > 0 for count in row["ops_per_ipu"])
    for name in ("ours", "popart"):
        planned = row[name]
        assert planned["fits"]
        assert all(cycles > 0 for cycles in planned["ipu_cycles"])
        assert planned["pipeline_cycles"] == max(planned["ipu_cycles"]) \
            + planned["copy_phase_cycles"]
        # the terms on the IPU (exchange, compute, partial sums) make up its cycles
        terms = planned["ipu_terms"]
        assert {"exchange_cycles", "compute_cycles"} <= set(terms)
        assert [sum(each) for each in zip(*terms.values(), strict=True)] \
            == planned["ipu_cycles"]
        # every IPU runs a forward part and a (larger) backward part
        assert all(0 < forward < total for forward, total in
                   zip(planned["ipu_forward_cycles"], planned["ipu_cycles"], strict=True))
        # pipelined: the slowest IPU sets the pace, not the sum over the IPUs
        assert planned["pipeline_cycles"] < planned["cycles"]


@given(other=st.integers(0, 10**6), per_layer=st.integers(1, 10**6),
       copy=st.integers(0, 10**5), each=st.sampled_from([1, 2, 3]))
def test_scaling_is_exact_when_cycles_are_linear_in_layers(other, per_layer, copy, each):
    """IPU 0 holds ``other`` cycles of embeddings and heads beside its layers; every layer
    costs ``per_layer``: the scaled figure is the published split's, computed directly."""
    split = (each,) * 4
    ipus = [other + each * per_layer] + [each * per_layer] * 3
    row = {"ours": {"ipu_cycles": ipus, "copy_phase_cycles": copy}}
    published = [other + 3 * per_layer, 7 * per_layer, 7 * per_layer, 7 * per_layer]
    assert bert_large.scaled(row, split) == {"ours": max(published) + copy}


def test_throughput_per_ipu():
    row = {"published_split_cycles": {"ours": 1_850_000}}
    # 8 sequences per 1 ms pipeline cycle at 1.85 GHz: 8,000 per s per replica, 2,000 per IPU
    assert bert_large.throughput(row, 8) == {"ours": pytest.approx(2000.0)}


def test_the_layer_count_must_split_evenly():
    with pytest.raises(SystemExit, match="multiple of 4"):
        bert_large.layer_split(6)


def test_the_recomputation_estimate_adds_each_ipus_forward_cycles():
    """On the published split: the slowest IPU once its forward pass is counted twice."""
    ipus, forward, copy = [900, 1000, 1000, 990], [300, 320, 330, 340], 7
    row = {"ours": {"ipu_cycles": ipus, "ipu_forward_cycles": forward,
                    "copy_phase_cycles": copy}}
    found = bert_large.scaled(row, bert_large.LAYERS_PER_IPU)
    assert found == {"ours": 1000 + copy,
                     "ours" + bert_large.RECOMPUTED: 1330 + copy}  # IPUs 2 and 3: 1,330
