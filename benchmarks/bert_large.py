"""BERT-Large SL128 pretraining throughput: the IPU Model against Graphcore's published figure.

Graphcore's performance results (Poplar SDK 3.x) give BERT-Large pretraining phase 1,
sequence length 128, on a Bow Pod16 (16 Bow IPUs at 1.85 GHz): 4,527 sequences/s with
TensorFlow 2 and 6,044 with PopART on packed sequences. The configuration, as Graphcore's
public examples repository states it (``graphcore/examples``, files
``nlp/bert/popart/configs/pretrain_large_128.json``,
``nlp/bert/popart/configs/packed/packed_pretrain_large_128.json`` and
``nlp/bert/tensorflow2/configs/pretrain_large_128_phase1.json``):

- micro-batch 8 sequences, 4 replicas (data parallel), each replica a pipeline over
  4 IPUs with the 24 encoder layers split [3, 7, 7, 7] (the embeddings and the first 3
  layers on IPU 0; the pooler and the MLM and NSP heads back on IPU 0, the MLM
  decoder tied to the token table);
- gradient accumulation: PopART global batch 65,536 (54,784 packed) = 8 × 4 × 2,048
  (1,712 packed) micro-batches; TensorFlow 2 2,040 micro-batches per replica and step;
- 20 masked tokens per sequence, vocabulary 30,400; the data puts the masked tokens
  first and the MLM head reads the first 20 positions alone (the projection in
  ``nlp/bert/popart/bert_model.py`` slices them);
- PopART: float16 weights and activations (``popart_dtype`` FLOAT16; no float32 master
  copy), stochastic rounding, half-precision matmul partials, LAMB with its state
  off chip and sharded over the replicas; pipelining with PopART's pipeline
  recomputation (``nlp/bert/popart/bert.py``, ``bert_session_options``); matmul
  available memory proportion 0.15 on IPU 0 and 0.25 on the others; dropout 0.1 on
  the hidden states, none on attention.

What is modelled: one replica's training step, micro-batch 8, imported through the PyTorch
route (``Ir.from_torch``, training=True) from transformers' ``BertForPreTraining`` built
from a ``BertConfig`` of Graphcore's shape with seeded random weights, in float16
(``module.half()``; the losses in float32), wrapped so that the MLM head reads the first
20 positions, as Graphcore's does, and the NSP head the pooled first token. It is placed
as PopTorch's ``BeginBlock`` places it (``blocks``: the layer split exactly, no split
ratios needed), pipelined (``enable_pipelining``), planned by our planner and by the
PopART baseline, and costed by ``evaluate``. The figure read is the
report's ``pipeline_cycles``: the slowest IPU's cycles per micro-batch plus one copy phase
(docs/multi-ipu.md). Then

    sequences/s per replica = micro-batch × clock / pipeline_cycles,  per IPU = that / 4,

beside Graphcore's published figure per IPU (sequences/s ÷ 16).

Assumptions and what the model leaves out, and which way each leans ("faster": the model
predicts more sequences/s than the machine would give for it):

- faster: the pipeline's ramp up and down (2N − 2 = 6 of 2,048 + 6 pipeline cycles:
  0.3 %);
- faster: host I/O, the replicas' all-reduce of the gradients and the optimizer step:
  LAMB once per 2,048 micro-batches, its state streamed from off-chip memory. The
  traced step updates each weight by SGD every micro-batch, which the cost counts on
  each IPU: about what accumulating the gradient into its accumulator costs each
  micro-batch on the machine (an elementwise pass over the weights), so kept;
- faster: recomputation. The published PopART run recomputes each stage's forward
  pass in its backward pass (PopART's ``RecomputationType::Pipeline``); the planned
  step does not. The rows marked "+ forward again" estimate it: each IPU's cycles plus
  its forward ops' cycles (the ops the loss depends on), as if every forward op ran
  twice, which overstates it a little (a stage's stashed input and its loss are not
  recomputed). ``--recompute recompute_all`` asks the tool's own ExplicitRecompute,
  which on this placed and pipelined step is refused (a recomputed clone reads a
  weight of another IPU: "a pipelined model cannot copy a weight between IPUs");
- slower, against the PopART figure alone: packing. That figure counts sequences packed
  up to 3 to a row of 128 tokens; a micro-batch here is 8 sequences of 128 tokens, so
  the packed run holds more sequences per micro-batch than modelled, and the
  TensorFlow 2 figure (unpacked) is the one to compare with;
- slower: matmul partials are float32 in the IPU Model (``partial_bytes_per_element``),
  where Graphcore ran half partials (half the bytes of partial sums to exchange);
- faster, probably: the matmuls' available memory proportion is the IPU Model's one
  value for every IPU (0.6 unless ``--amp``), where Graphcore set 0.15 on IPU 0 and
  0.25 on the others, which leaves Poplibs fewer plans;
- memory is not held against the plan: without recomputation the planned step does not
  fit (its peak tile is reported), so the cycles are those of a step the machine could
  not run as planned; the published one fits by recomputing;
- the IPU Model itself (docs/ipu-model.md, "Cycles of a step"): BSP steps one after
  another, Poplibs' vertex estimates for matmuls, one elementwise estimate for every
  other op (GELU, softmax's exp and the norms cost as an add would: faster);
  no host or stream copies, program syncs or code loading (faster);
- the clock: 1.85 GHz, the Bow IPU's; no other Bow figure (exchange, links) differs
  from the IPU Model's Mk2 figures.

With ``--layers N`` (N a multiple of 4, less than 24) the model is built with N layers on
an even split (N/4 layers per IPU) and each IPU's cycles are scaled to the published split:
the cycles of one layer are taken from the IPUs holding nothing but layers (IPUs 1–3, their
mean cycles per layer), IPU 0's other work is its cycles less its layers'; an IPU of L
layers is then L × per-layer cycles (+ IPU 0's other work), and the copy phase is kept as
planned. An approximation for when the full model is too slow or large to plan.

    python benchmarks/bert_large.py [--layers N] [--markdown] [--no-baseline] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # this folder's benchmark: the models' builder and the child runner

#: Graphcore's published BERT-Large SL128 phase 1 throughput on a Bow Pod16, sequences/s.
PUBLISHED = {"TensorFlow 2": 4527, "PopART (packed)": 6044}
POD_IPUS = 16
BOW_GHZ = 1.85
#: One replica: 4 IPUs, the encoder layers per IPU of Graphcore's configuration.
LAYERS_PER_IPU = (3, 7, 7, 7)
IPUS = len(LAYERS_PER_IPU)
MICRO_BATCH = 8
SEQUENCE = 128
MASK_TOKENS = 20
VOCAB = 30400
#: What a pipelined run of 2,048 micro-batches spends ramping up and down (not modelled).
ACCUMULATION = 2048
PLANS = ("ours", "popart")


#: BERT-Large's shape (transformers' ``BertConfig`` names) as Graphcore trains it.
SHAPE = dict(hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
             vocab_size=VOCAB)


def config(layers: int, shape: dict[str, int] | None = None) -> Any:
    """The BERT configuration of ``layers`` layers and ``shape`` (BERT-Large's unless
    given: a test plans a narrow one), eager attention, dropout on the hidden states alone
    (Graphcore's setting)."""
    builder = models.make_models()
    found = builder.make_config("bert", "real")
    for key, value in {**SHAPE, **(shape or {}), "num_hidden_layers": layers,
                       "hidden_dropout_prob": 0.1,
                       "attention_probs_dropout_prob": 0.0}.items():
        setattr(found, key, value)
    return found


def pretraining_module(layers: int, micro_batch: int, shape: dict[str, int] | None = None
                       ) -> tuple[Any, tuple[Any, ...]]:
    """``BertForPreTraining`` in float16 returning its two losses' sum, its MLM head on the
    first ``MASK_TOKENS`` positions; and seeded inputs of ``micro_batch`` sequences."""
    import torch
    import transformers

    builder = models.make_models()

    class Pretraining(torch.nn.Module):
        """The encoder, then the MLM head on the masked positions (first in Graphcore's
        data) and the NSP head on the pooled first token; the losses in float32."""

        def __init__(self, network: Any) -> None:
            super().__init__()
            self.bert = network.bert
            self.cls = network.cls

        def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor,
                    mlm_labels: torch.Tensor, nsp_labels: torch.Tensor) -> torch.Tensor:
            hidden, pooled = self.bert(input_ids=ids, token_type_ids=types,
                                       attention_mask=mask, return_dict=False)[:2]
            scores, nsp = self.cls(hidden[:, :MASK_TOKENS], pooled)
            mlm = torch.nn.functional.cross_entropy(scores.float().flatten(0, 1),
                                                    mlm_labels.flatten())
            return mlm + torch.nn.functional.cross_entropy(nsp.float(), nsp_labels)

    found = config(layers, shape)
    vocab = found.vocab_size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(builder.SEED)
        network = transformers.BertForPreTraining(found)
    module = Pretraining(network).half().eval()
    generator = torch.Generator().manual_seed(builder.SEED)
    ids = torch.randint(0, vocab, (micro_batch, SEQUENCE), generator=generator)
    types = (torch.arange(SEQUENCE) >= SEQUENCE // 2).long().expand(micro_batch, -1)
    mask = torch.ones(micro_batch, SEQUENCE, dtype=torch.long)
    mlm_labels = torch.randint(0, vocab, (micro_batch, MASK_TOKENS), generator=generator)
    nsp_labels = torch.randint(0, 2, (micro_batch,), generator=generator)
    return module, (ids, types.contiguous(), mask, mlm_labels, nsp_labels)


def layer_split(layers: int) -> tuple[int, ...]:
    """The layers per IPU: Graphcore's at 24, else N/4 on each IPU."""
    if layers == sum(LAYERS_PER_IPU):
        return LAYERS_PER_IPU
    if layers <= 0 or layers % IPUS:
        raise SystemExit(f"--layers must be 24 or a positive multiple of {IPUS}, not {layers}")
    return (layers // IPUS,) * IPUS


def blocks(split: tuple[int, ...]) -> dict[str, int]:
    """PopTorch-like blocks: the embeddings on IPU 0, each IPU's first layer beginning its
    block, the pooler (and the heads after it) back on IPU 0."""
    found = {"bert.embeddings": 0}
    first = 0
    for ipu, count in enumerate(split):
        if ipu:
            found[f"bert.encoder.layer.{first}"] = ipu
        first += count
    found["bert.pooler"] = 0
    return found


def import_replica(layers: int, micro_batch: int, shape: dict[str, int] | None = None,
                   recompute: str = "none") -> Any:
    """One replica's training step as an Ir, its forward pass placed by the layer split
    and pipelined (the transforms not yet run)."""
    from popart_unwind.ir import Ir
    from popart_unwind.options import SessionOptions

    module, args = pretraining_module(layers, micro_batch, shape)
    options = SessionOptions(enable_unwind_layouts=False, ipus=IPUS,
                             virtual_graph_mode="manual", enable_pipelining=True,
                             recompute=recompute)
    return Ir.from_torch(module, args, training=True, options=options,
                         blocks=blocks(layer_split(layers)))


def run_replica(job: dict[str, Any], report: Any) -> None:
    """Import, place, pipeline, plan (ours and PopART's) and cost one replica's step."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from popart_unwind.transforms import run_pipeline
    from popart_unwind.transforms.unwind_layouts import plan_ir

    from popart_unwind.baselines import popart_baseline
    from popart_unwind.cost import evaluate
    from popart_unwind.cost.terms import ON_IPU, TERMS
    from popart_unwind.machine import IpuModel, TileTarget
    from popart_unwind.training import loss_forward_ops

    row: dict[str, Any] = {}
    report.put(("stage", "import"))
    began = time.perf_counter()
    ir = import_replica(job["layers"], job["micro_batch"], job.get("shape"), job["recompute"])
    row["import_s"] = time.perf_counter() - began
    began = time.perf_counter()
    run_pipeline(ir)
    row["pipeline_s"] = time.perf_counter() - began
    row["ops"] = sum(1 for _ in ir.all_ops())
    row["ops_per_ipu"] = [sum(1 for op in ir.main_graph.ops if op.settings.vgraph_id == ipu)
                          for ipu in range(IPUS)]
    model = IpuModel(ipus=IPUS)
    if job["amp"] is not None:
        model = dataclasses.replace(model, available_memory_proportion=job["amp"])
    target = TileTarget(model)
    report.put(("stage", "plan"))
    began = time.perf_counter()
    plan = plan_ir(ir, target, write=False)
    row["plan_s"] = time.perf_counter() - began
    plans = {"ours": ({(p.graph_id, p.tensor_id): p.tile_mapping for p in plan.tensors},
                      plan.op_plans)}
    del plan
    if job["baseline"]:
        report.put(("stage", "baseline"))
        began = time.perf_counter()
        baseline = popart_baseline(ir, target)
        plans["popart"] = (dict(baseline.mappings), baseline.op_plans)
        del baseline
        row["baseline_s"] = time.perf_counter() - began
    row["evaluate_s"] = 0.0
    # what the loss depends on: the forward pass (its stashes and copies included)
    main = ir.main_graph
    forward = {op.id for op in loss_forward_ops(main, main.tensor(ir.final_loss_id))}
    for name, (mappings, op_plans) in plans.items():
        report.put(("stage", f"evaluate {name}"))
        began = time.perf_counter()
        cost = evaluate(ir, target, mappings=mappings, op_plans=op_plans)
        row["evaluate_s"] += time.perf_counter() - began
        row[name] = {"pipeline_cycles": cost.pipeline_cycles,
                     "copy_phase_cycles": cost.copy_phase_cycles,
                     "ipu_cycles": [cost.ipu_cycles(ipu) for ipu in range(IPUS)],
                     "ipu_forward_cycles": [
                         sum(r.ipu_cycles * r.executions for r in cost.ops
                             if r.ipu == ipu and r.op_id in forward) for ipu in range(IPUS)],
                     "per_ipu": cost.per_ipu(),
                     # where each IPU's cycles go: exchange, compute, partial sums
                     "ipu_terms": {str(term.key): [
                         sum(r.per_step(term.field) for r in cost.ops if r.ipu == ipu)
                         for ipu in range(IPUS)] for term in TERMS if term.time == ON_IPU},
                     "cycles": cost.cycles, "peak_tile_bytes": cost.peak_tile_bytes,
                     "fits": cost.fits}
    row["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report.put(("done", row))


#: The suffix of a plan's figure with each IPU's forward pass counted twice.
RECOMPUTED = " + forward again"


def scaled(row: dict[str, Any], split: tuple[int, ...]) -> dict[str, int]:
    """Each plan's cycles per micro-batch on the published split: from the planned split
    when it is the published one, else scaled per layer (module docstring). Beside each,
    an estimate of PopART's pipeline recomputation (``RECOMPUTED``): each IPU's forward
    cycles once more."""
    found = {}
    for name in PLANS:
        if name not in row:
            continue
        planned = row[name]
        found[name] = published_split_cycles(planned["ipu_cycles"],
                                             planned["copy_phase_cycles"], split)
        if "ipu_forward_cycles" in planned:
            again = [a + f for a, f in zip(planned["ipu_cycles"],
                                           planned["ipu_forward_cycles"], strict=True)]
            found[name + RECOMPUTED] = published_split_cycles(
                again, planned["copy_phase_cycles"], split)
    return found


def published_split_cycles(ipu_cycles: list[int], copy_phase: int,
                           split: tuple[int, ...]) -> int:
    """The pipeline's cycles per micro-batch (slowest IPU and the copy phase) had the IPUs
    held the published split: each IPU's cycles as planned on that split, else IPU 0's
    work besides its layers plus its layers, the others their layers, at the mean cycles
    of a layer on IPUs 1-3."""
    if tuple(split) == LAYERS_PER_IPU:
        return max(ipu_cycles) + copy_phase
    per_layer = sum(ipu_cycles[1:]) / sum(split[1:])
    first_other = ipu_cycles[0] - split[0] * per_layer
    ipus = [first_other + LAYERS_PER_IPU[0] * per_layer,
            *(count * per_layer for count in LAYERS_PER_IPU[1:])]
    return round(max(ipus) + copy_phase)


def throughput(row: dict[str, Any], micro_batch: int) -> dict[str, float]:
    """Sequences per second per IPU: ``micro_batch`` sequences each pipeline cycle of the
    replica at the Bow clock, shared by its IPUs."""
    return {name: micro_batch * BOW_GHZ * 1e9 / cycles / IPUS
            for name, cycles in row["published_split_cycles"].items()}


def _child(job: dict[str, Any], report: Any) -> None:
    try:
        run_replica(job, report)
    except Exception as error:  # the row says why
        report.put(("failed", f"{type(error).__name__}: {str(error)[:300]}"))


def _name(job: dict[str, Any]) -> str:
    return f"bert-large L{job['layers']} mb{job['micro_batch']}"


def bert_large_rows(layers: int = 24, micro_batch: int = MICRO_BATCH, baseline: bool = True,
                    recompute: str = "none", amp: float | None = None,
                    timeout: float = 5400.0) -> list[dict]:
    """One row: the replica's planned cycles and the throughput they give beside
    Graphcore's, or why there is none (the row's ``failed``)."""
    job = dict(layers=layers, micro_batch=micro_batch, baseline=baseline,
               recompute=recompute, amp=amp)
    began = time.perf_counter()
    row = models.run_child(job, timeout, _child, _name)
    row["total_s"] = time.perf_counter() - began
    if "failed" in row:
        return [row]
    split = layer_split(layers)
    row["split"] = list(split)
    row["published_split_cycles"] = scaled(row, split)
    row["seq_per_s_per_ipu"] = throughput(row, micro_batch)
    row["published_per_ipu"] = {name: value / POD_IPUS for name, value in PUBLISHED.items()}
    return [row]


def print_bert(rows: list[dict], markdown: bool) -> None:
    """The modelled throughput per IPU beside each published figure, and the assumptions."""
    print("BERT-Large SL128 pretraining phase 1, one replica of 4 IPUs pipelined [3, 7, 7, 7],"
          f" Bow clock {BOW_GHZ} GHz: the IPU Model against Graphcore's Bow Pod16 figures\n")
    columns = ("plan", "layers planned", "micro-batch", "cycles / micro-batch",
               "slowest IPU", "copy phase", "model seq/s per IPU", "published", "per IPU",
               "model ÷ published")
    cells = []
    for row in rows:
        if "failed" in row:
            cells.append(["-", str(row["layers"]), str(row["micro_batch"]), row["failed"],
                          *[""] * (len(columns) - 4)])
            continue
        planned = f"{row['layers']} ({'/'.join(map(str, row['split']))})"
        for name, cycles in row["published_split_cycles"].items():
            modelled = row["seq_per_s_per_ipu"][name]
            copy = row[name.removesuffix(RECOMPUTED)]["copy_phase_cycles"]
            for source, per_ipu in row["published_per_ipu"].items():
                cells.append([name, planned, str(row["micro_batch"]), f"{cycles:,}",
                              f"{cycles - copy:,}", f"{copy:,}", f"{modelled:,.1f}",
                              source, f"{per_ipu:,.1f}", f"{modelled / per_ipu:.2f}"])
    models.print_table(columns, cells, markdown)
    for row in rows:
        if "failed" in row:
            continue
        for name in PLANS:
            if name in row:
                ipus = " / ".join(f"{c:,}" for c in row[name]["ipu_cycles"])
                forward = " / ".join(f"{c:,}" for c in row[name].get("ipu_forward_cycles", ()))
                print(f"{name}: cycles per IPU as planned {ipus} (forward pass {forward}); "
                      f"peak tile {row[name]['peak_tile_bytes'] / 1024:,.1f} KiB, fits "
                      f"{'yes' if row[name]['fits'] else 'no'}")
                for term, cycles in row[name].get("ipu_terms", {}).items():
                    print(f"  {term} per IPU: {' / '.join(f'{c:,}' for c in cycles)}")
        if row["split"] != list(LAYERS_PER_IPU):
            print(f"planned {row['layers']} layers split {row['split']}; cycles scaled per "
                  "layer to the published [3, 7, 7, 7] split")
        print(f"times: import {row['import_s']:.0f} s, transforms {row['pipeline_s']:.0f} s, "
              f"plan {row['plan_s']:.0f} s, baseline {row.get('baseline_s', 0):.0f} s, "
              f"evaluate {row['evaluate_s']:.0f} s, total {row['total_s']:.0f} s; peak RSS "
              f"{row['rss_mib']:,.0f} MiB; ops {row['ops']:,} "
              f"(per IPU {' / '.join(map(str, row['ops_per_ipu']))})")
    print("\nLeft out by the model: host I/O; the replicas' gradient all-reduce; LAMB "
          "(once per 2,048 micro-batches; the traced SGD update each micro-batch stands "
          f"for the gradient accumulation); the pipeline ramp (6 of {ACCUMULATION + 6:,} "
          "pipeline cycles); "
          "recomputation (Graphcore's runs recompute each stage's forward pass: the rows '"
          f"{RECOMPUTED.strip()}' count each IPU's forward cycles twice, an estimate); "
          "float32 matmul partials (Graphcore: half); "
          "one available memory proportion for all IPUs. The PopART figure is on packed "
          "sequences (up to 3 per 128 tokens); the model's micro-batch holds 8 unpacked "
          "sequences, so TensorFlow 2's figure is the like-for-like one.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=sum(LAYERS_PER_IPU),
                        help="encoder layers to plan (24, or a multiple of 4: scaled)")
    parser.add_argument("--micro-batch", type=int, default=MICRO_BATCH)
    parser.add_argument("--no-baseline", action="store_true",
                        help="plan ours alone, not the PopART baseline")
    parser.add_argument("--recompute", default="none",
                        help="SessionOptions.recompute (recompute_all: PopART's pipeline "
                             "recomputation)")
    parser.add_argument("--amp", type=float, default=None,
                        help="the IPU Model's matmul available memory proportion")
    parser.add_argument("--timeout", type=float, default=5400.0)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    rows = bert_large_rows(args.layers, args.micro_batch, not args.no_baseline,
                           args.recompute, args.amp, args.timeout)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    print_bert(rows, args.markdown)


if __name__ == "__main__":
    main()
