"""Models split over several IPUs: PopART's AutoVirtualGraph, Graphcore's published splits
and an even layer split, each planned by us and by the PopART baseline.

    python benchmarks/multi_ipu.py --models gpt2 vit --kinds forward training --markdown

Each model at its published width (GPT-2 small and medium, BERT-large, ViT-B/16, and T5
at t5-small's shape; float32 by default, float16 as Graphcore trains them with ``--dtype
float16``), on the IPU count of Graphcore's published split (T5: four, none published).
Splits:

- ``ours``: SplitByMemory (``--ipus N`` on a model without placement);
- ``auto``: PopART's AutoVirtualGraph (what the PopART baseline splits by);
- ``graphcore``: the layers per IPU Graphcore's examples use, placed as PopTorch's
  ``BeginBlock`` places them (``Ir.from_torch(..., blocks=...)``);
- ``even``: the layers spread evenly, the embeddings on the first IPU and the head on the
  last (no block of its own).

Per split and plan (ours, PopART's): each IPU's liveness peak on its busiest tile, the
largest of them, the bytes copied between IPUs per step and the step's cycles. Without
``--pipeline`` the IPUs run one after another, every activation kept for the backward
pass. With it they run as a pipeline (InferPipelineStages, Pipeline): the table then
shows each IPU's stash, and the cycles per micro-batch of the running pipeline; a training
step accumulates its gradients (one accumulator per weight), as Graphcore's pipelined
configurations do. Each graph runs in a process of its own.

    python benchmarks/multi_ipu.py --models bert-large gpt2 --kinds training \
        --splits ours graphcore --pipeline --markdown
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # this folder's benchmark: the models' builder and its table printer

#: model -> (transformers family, config overrides, IPUs, {split: blocks in run order}).
#: Graphcore's splits (graphcore/examples and optimum-graphcore's IPU configs): BERT-large
#: pretraining [3, 7, 7, 7] layers with the embeddings and the tied MLM head on IPU 0;
#: GPT-2 small [0, 4, 4, 4] and medium [0, 3, 3, 3, 3, 4, 4, 4], the token table and the
#: tied LM head on IPU 0, the position table on IPU 1; ViT-B/16 [3, 3, 3, 3].
MODELS: dict[str, tuple[str, dict[str, Any], int, dict[str, dict[str, int]]]] = {
    "gpt2": ("gpt2", {}, 4, {
        "graphcore": {"model.transformer.wte": 0, "model.transformer.wpe": 1,
                      "model.transformer.h.4": 2, "model.transformer.h.8": 3,
                      "model.lm_head": 0},
        "even": {"model.transformer.wte": 0, "model.transformer.h.3": 1,
                 "model.transformer.h.6": 2, "model.transformer.h.9": 3}}),
    "gpt2-medium": ("gpt2", dict(n_embd=1024, n_layer=24, n_head=16), 8, {
        "graphcore": {"model.transformer.wte": 0, "model.transformer.wpe": 1,
                      **{f"model.transformer.h.{layer}": ipu for layer, ipu in
                         ((3, 2), (6, 3), (9, 4), (12, 5), (16, 6), (20, 7))},
                      "model.lm_head": 0},
        "even": {"model.transformer.wte": 0,
                 **{f"model.transformer.h.{3 * ipu}": ipu for ipu in range(1, 8)}}}),
    "bert-large": ("bert", dict(hidden_size=1024, num_hidden_layers=24,
                                num_attention_heads=16, intermediate_size=4096), 4, {
        "graphcore": {"model.bert.embeddings": 0, "model.bert.encoder.layer.3": 1,
                      "model.bert.encoder.layer.10": 2, "model.bert.encoder.layer.17": 3,
                      "model.cls": 0},
        "even": {"model.bert.embeddings": 0, "model.bert.encoder.layer.6": 1,
                 "model.bert.encoder.layer.12": 2, "model.bert.encoder.layer.18": 3}}),
    # T5 at t5-small's shape (no published split): its decoder reads the table its
    # encoder and head share, a third reader of a tied weight
    "t5": ("t5", {}, 4, {}),
    "vit": ("vit", dict(num_labels=1000), 4, {
        "graphcore": {"model.vit.embeddings": 0, "model.vit.layers.3": 1,
                      "model.vit.layers.6": 2, "model.vit.layers.9": 3}}),
}
SPLITS = ("ours", "auto", "graphcore", "even")


def build(model: str, kind: str, dtype: str = "float32") -> tuple[Any, tuple[Any, ...]]:
    """The module (returning its first output, or its own loss for training) and its
    example inputs, at the model's published width, its weights and activations in
    ``dtype`` (float16: ``module.half()``; what PyTorch keeps in float32, such as the
    loss, stays so)."""
    import torch
    import transformers

    builder = models.make_models()
    family, overrides, _, _ = MODELS[model]
    config = builder.make_config(family, "real")
    for key, value in overrides.items():
        setattr(config, key, value)
    spec = builder._spec(family)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(builder.SEED)
        network = getattr(transformers, spec.model_class)(config, **spec.model_kwargs)
    module = builder._first_output_class()(network, builder.input_names(family, kind)).eval()
    args = builder.example_inputs(family, config, "real", kind)
    if dtype == "float16":
        module = module.half()
        args = tuple(a.half() if a.is_floating_point() else a for a in args)
    return module, args


def run_split(job: dict[str, Any], report: Any) -> None:
    """Import with the split's placement, plan, cost ours and PopART's."""
    from popart_unwind.transforms import run_pipeline
    from popart_unwind.transforms.unwind_layouts import plan_ir

    from popart_unwind.baselines import popart_baseline
    from popart_unwind.cost import evaluate
    from popart_unwind.ir import Ir
    from popart_unwind.machine import IpuModel, TileTarget
    from popart_unwind.options import SessionOptions

    model, kind, split = job["model"], job["kind"], job["split"]
    _, _, ipus, splits = MODELS[model]
    blocks = splits.get(split) if split not in ("ours", "auto") else None
    report.put(("stage", "import"))
    module, args = build(model, kind, job.get("dtype", "float32"))
    options = SessionOptions(enable_unwind_layouts=False, ipus=ipus,
                             virtual_graph_mode="auto" if blocks is None else "manual",
                             auto_split="popart" if split == "auto" else "memory",
                             enable_pipelining=job.get("pipeline", False))
    began = time.perf_counter()
    ir = Ir.from_torch(module, args, training=kind == "training", options=options,
                       blocks=blocks)
    del module
    row: dict[str, Any] = {"import_s": time.perf_counter() - began}
    began = time.perf_counter()
    run_pipeline(ir)
    row["pipeline_s"] = time.perf_counter() - began
    target = TileTarget(IpuModel(ipus=ipus))
    report.put(("stage", "plan"))
    began = time.perf_counter()
    plan = plan_ir(ir, target, write=False)
    row["plan_s"] = time.perf_counter() - began
    ours = {(p.graph_id, p.tensor_id): p.tile_mapping for p in plan.tensors}
    report.put(("stage", "baseline"))
    baseline = popart_baseline(ir, target)
    report.put(("stage", "evaluate"))
    for name, mappings, op_plans in (("ours", ours, plan.op_plans),
                                     ("popart", dict(baseline.mappings), baseline.op_plans)):
        cost = evaluate(ir, target, mappings=mappings, op_plans=op_plans)
        row[name] = {"per_ipu": cost.per_ipu(), "peak": cost.peak_tile_bytes,
                     "ipu_copy_bytes": cost.ipu_copy_bytes, "cycles": cost.cycles,
                     "exchange_bytes": cost.exchange_bytes, "fits": cost.fits,
                     **({"pipeline_cycles": cost.pipeline_cycles} if cost.pipelined else {})}
    row["ops_per_ipu"] = [sum(1 for op in ir.main_graph.ops
                              if op.settings.vgraph_id == ipu) for ipu in range(ipus)]
    report.put(("done", row))


def _child(job: dict[str, Any], report: Any) -> None:
    try:
        run_split(job, report)
    except Exception as error:  # the row says why; the other graphs go on
        report.put(("failed", f"{type(error).__name__}: {str(error)[:200]}"))


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    began = time.perf_counter()
    row = models.run_child(job, timeout, _child, name_of)
    return {**row, "total_s": time.perf_counter() - began}


def name_of(job: dict[str, Any]) -> str:
    pipelined = "-pipelined" if job.get("pipeline") else ""
    return f"{job['model']}-{job['kind']}-{job['split']}{pipelined}-{job.get('dtype')}"


COLUMNS = ("model", "IPUs", "split", "ops per IPU", "peak KiB per IPU, ours",
           "largest peak KiB o/P", "IPU-copy MB o", "cycles k o/P", "fits o/P", "s")


#: With ``--pipeline``: the stash and accumulators per IPU, and cycles per micro-batch.
PIPELINE_COLUMNS = ("model", "IPUs", "split", "ops per IPU", "peak KiB per IPU, ours",
                    "stash MB per IPU", "accumulators MB per IPU", "largest peak KiB o/P",
                    "IPU-copy MB o", "pipeline cycles k o/P", "fits o/P", "s")


def cells(row: dict[str, Any], pipelined: bool = False) -> list[str]:
    title = f"{row['model']} {row['kind']}"
    columns = PIPELINE_COLUMNS if pipelined else COLUMNS
    if "failed" in row:
        return [title, "", row["split"], row["failed"], *[""] * (len(columns) - 4)]
    ours, popart = row["ours"], row["popart"]
    kib = " / ".join(f"{ipu['peak_tile_bytes'] / 1024:.0f}" for ipu in ours["per_ipu"])
    cycles = "pipeline_cycles" if pipelined else "cycles"
    held = [" / ".join(f"{ipu[name] / 1e6:.1f}" for ipu in ours["per_ipu"])
            for name in ("stash_bytes", "accumulator_bytes")] if pipelined else []
    return [title, str(len(ours["per_ipu"])), row["split"],
            " / ".join(str(n) for n in row["ops_per_ipu"]), kib, *held,
            f"{ours['peak'] / 1024:,.1f} / {popart['peak'] / 1024:,.1f}",
            f"{ours['ipu_copy_bytes'] / 1e6:,.1f}",
            f"{ours[cycles] / 1e3:,.0f} / {popart[cycles] / 1e3:,.0f}",
            f"{'yes' if ours['fits'] else 'no'} / {'yes' if popart['fits'] else 'no'}",
            f"{row['total_s']:.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--kinds", nargs="+", default=["forward", "training"],
                        choices=["forward", "training"])
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                        help="the models' weights and activations (Graphcore trains these "
                             "models in float16)")
    parser.add_argument("--pipeline", action="store_true",
                        help="run the IPUs as a pipeline (stages, stashes)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for model in args.models:
        for kind in args.kinds:
            for split in args.splits:
                if split not in ("ours", "auto") and split not in MODELS[model][3]:
                    continue  # no split of that kind published (ViT's is even)
                rows.append(run_job({"model": model, "kind": kind, "split": split,
                                     "pipeline": args.pipeline, "dtype": args.dtype},
                                    args.timeout))
                print(" | ".join(cells(rows[-1], args.pipeline)), file=sys.stderr,
                      flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True))
    models.print_table(PIPELINE_COLUMNS if args.pipeline else COLUMNS,
                       [cells(row, args.pipeline) for row in rows], args.markdown)


if __name__ == "__main__":
    main()
