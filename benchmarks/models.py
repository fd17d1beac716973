"""Plan real model graphs (BERT, GPT-2, T5, Llama, ViT, ResNet) and compare with PopART.

The models carry their task heads (tests/models/make_models.py): BERT's masked-LM head,
GPT-2's and Llama's LM heads (tied to the token embedding; Llama with rotary embeddings and
grouped-query attention), T5 for conditional generation, ViT's and ResNet's classifiers.
For each model, size (tiny, real) and kind (forward, training): import the graph (the
PyTorch front end by default; ``--frontends onnx`` imports the ONNX export instead), run
the transform pipeline, plan it with ``plan_ir`` (ours), lay it out as PopART's creator
search would (``popart_baseline``) and linearly (``linear_plan``), and cost all three
plans with ``evaluate`` on one IPU Model.

    python benchmarks/models.py --sizes tiny
    python benchmarks/models.py --sizes real --models bert gpt2 --kinds training

Each graph runs in a fresh process (``--timeout`` seconds at most), so one that does not
finish is reported and the rest go on, and peak memory is that graph's own: "plan MiB" is
tracemalloc's peak during a second, identical planning run (Python and numpy allocations
of ``plan_ir`` alone, so not what the unwinding solver's C++ core allocates; the run also
checks that planning is deterministic), "RSS MiB" the process's ``ru_maxrss`` (torch, the
model, import, the C++ core and everything else included).
``--quick`` skips the second planning run. ``--popart-tied-gather`` runs the baseline with
PopART's TiedGatherPattern (docs/baseline.md): off by default, as in PopART. ``--dump DIR``
saves the three plans' mappings and costs; ``--check DIR`` compares them with an earlier
dump (a speed-up must not change any plan). ``benchmarks/exchange_breakdown.py`` shows
where one graph's exchange goes.
``--json FILE`` keeps the rows, and ``--from-json FILE --markdown`` prints them as the
Markdown tables RESULTS.md records. The first table's last column lists each graph's ops
without a layout rule (as the plan file's ``ops_without_rule`` does). In the second, "max
tile" is the cost model's resident figure (always-live bytes plus the largest single op's
data), "peak tile" the liveness peak over the schedule of the busiest tile (activations kept
for the backward pass included), "always-live" that of producer-less tensors alone, and
"fits" whether the peak is within a tile's memory (docs/ipu-model.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import platform
import queue
import re
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from popart_unwind.options import OPTIMIZER_CHOICES

MODELS = ("bert", "gpt2", "t5", "llama", "vit", "resnet")
SIZES = ("tiny", "real")
KINDS = ("forward", "training")
FRONTENDS = ("torch", "onnx")
PLANS = ("ours", "popart", "linear")
#: Longest failure message a table cell shows.
MESSAGE_CHARS = 90
MODELS_DIR = Path(__file__).resolve().parent.parent / "tests" / "models"


# -- one graph, in a child process ------------------------------------------------------------
def make_models() -> Any:
    """tests/models/make_models.py, the models' builder (not an installed module)."""
    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))
    import make_models as module

    return module


def import_graph(model: str, size: str, kind: str, frontend: str,
                 optimizer: str | None = None) -> Any:
    """The graph as an Ir, the planner itself left out of the pipeline options.

    A training step: through ONNX, the forward export made a step by the Autodiff
    transform (``--loss nll``, as PopART's TrainingSession makes one) with ``optimizer``'s
    updates (SGD when None); through PyTorch, torch's traced step with ``optimizer``'s
    updates built in the IR, or, when None, the SGD update traced with it."""
    from popart_unwind.ir import Ir
    from popart_unwind.options import SessionOptions
    from popart_unwind.training.optimizers import Optimizer

    options = SessionOptions(enable_unwind_layouts=False)
    builder = make_models()
    training = kind == "training"
    if frontend == "onnx":
        if training:
            options = dataclasses.replace(options, loss="nll", optimizer=optimizer or "sgd")
        return Ir.from_onnx(builder.build(model, "forward", size), options=options)
    module, args = (builder.tiny_model if size == "tiny" else builder.real_model)(model, kind)
    if training and optimizer is not None:
        return Ir.from_torch(module, args, training=True, options=options,
                             optimizer=Optimizer(optimizer))
    return Ir.from_torch(module, args, training=training, options=options)


def run_graph(job: dict[str, Any], report: Any) -> None:
    """Import, transform, plan three ways and cost each; ``report`` gets (stage, data)."""
    from popart_unwind.transforms import run_pipeline
    from popart_unwind.transforms.unwind_layouts import plan_ir

    from popart_unwind.baselines import linear_plan, popart_baseline
    from popart_unwind.cost import evaluate
    from popart_unwind.ir.tile_mapping import ExpandedLayouts
    from popart_unwind.ops.coverage import ops_without_rule
    from popart_unwind.options import with_options
    from popart_unwind.target import IpuModel, TileTarget

    row: dict[str, Any] = {}
    report.put(("stage", "import"))
    began = time.perf_counter()
    ir = import_graph(job["model"], job["size"], job["kind"], job["frontend"],
                      job["optimizer"])
    ir.options = with_options(ir.options, job["options"])
    row["import_s"] = time.perf_counter() - began
    began = time.perf_counter()
    run_pipeline(ir)
    row["pipeline_s"] = time.perf_counter() - began
    row["ops"] = sum(1 for _ in ir.all_ops())
    row["producerless"] = sum(len(g.producerless_tensors()) for g in ir.graphs)
    row["without_rule"] = ops_without_rule(ir)

    target = TileTarget(IpuModel(tiles_per_ipu=job["tiles"]))
    report.put(("stage", "plan"))
    began = time.perf_counter()
    ir.options = dataclasses.replace(ir.options, balance_tile_memory=job["balance_tile_memory"],
                                     matmul_plans=job["matmul_plans"],
                                     rotate_plan_start_tiles=job["rotate_start_tiles"])
    plan = plan_ir(ir, target)  # as the transform does: mappings written onto the Ir
    row["plan_s"] = time.perf_counter() - began
    row["plan_stages"] = {k: v for k, v in plan.timings.items() if k != "total"}
    row["solver_ratio"] = _ratio(plan.objective, plan.upper_bound)
    # plans held as the command holds them: intervals, expanded while read
    mappings = {"ours": ExpandedLayouts({(p.graph_id, p.tensor_id): p.tile_mapping
                                         for p in plan.tensors}, job["tiles"])}
    if job["memory"]:
        report.put(("stage", "plan (tracemalloc)"))
        row["plan_peak_mib"], again = _traced(lambda: plan_ir(ir, target))
        _check_same(mappings["ours"], {(p.graph_id, p.tensor_id): p.tiles
                                       for p in again.tensors}, "a second planning run")
    report.put(("stage", "baseline"))
    began = time.perf_counter()
    baseline = popart_baseline(ir, target, tied_gather=job["tied_gather"],
                               fully_connected_pass=not job["popart_no_fc"])
    mappings["popart"] = ExpandedLayouts.of_arrays(baseline.mappings, job["tiles"])
    popart_plans = baseline.op_plans
    del baseline  # its decisions' tile arrays: the held plan is all that is read from now
    row["baseline_s"] = time.perf_counter() - began
    mappings["linear"] = ExpandedLayouts.of_arrays(linear_plan(ir, target), job["tiles"])
    op_plans = {"ours": plan.op_plans, "popart": popart_plans, "linear": {}}
    row["plans_differing"] = sum(1 for key, chosen in plan.op_plans.items()
                                 if popart_plans.get(key) != chosen)
    row["costs"] = {}
    row["evaluate_s"] = {}
    for name in PLANS:
        report.put(("stage", f"evaluate {name}"))
        began = time.perf_counter()
        cost = evaluate(ir, target, mappings=mappings[name].held, op_plans=op_plans[name])
        row["evaluate_s"][name] = time.perf_counter() - began
        row["costs"][name] = {**cost.summary(),
                              "tile_ratio": _ratio(cost.objective, cost.upper_bound)}
    row["same_as_popart"] = same_tiles(mappings["ours"], mappings["popart"])
    if job["sensitivity"]:
        row["sensitivity_cases"] = sensitivity(ir, job, report)
    row["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if job["dump"]:
        _dump(Path(job["dump"]) / f"{job_name(job)}.npz", mappings, row["costs"])
    if job["check"]:
        row["compared"] = _compare(Path(job["check"]) / f"{job_name(job)}.npz", mappings,
                                row["costs"])
    report.put(("done", row))
    report.close()
    report.join_thread()


#: The IPU Model's cost figures ``--sensitivity`` halves and doubles one at a time.
COST_PARAMETERS = ("exchange_bytes_per_cycle", "sync_cycles", "macs_per_cycle_half",
                   "macs_per_cycle_float", "partial_bytes_per_element")


def sensitivity(ir: Any, job: dict[str, Any], report: Any) -> list[dict[str, Any]]:
    """Ours against PopART with each cost figure of the IPU Model halved and doubled: both
    plans made again on the changed model (plans depend on the figures) and costed there."""
    from popart_unwind.transforms.unwind_layouts import plan_ir

    from popart_unwind.baselines import popart_baseline
    from popart_unwind.cost import evaluate
    from popart_unwind.target import IpuModel, TileTarget

    found = []
    for parameter in COST_PARAMETERS:
        for factor in (0.5, 2.0):
            report.put(("stage", f"sensitivity {parameter} x{factor:g}"))
            base = IpuModel(tiles_per_ipu=job["tiles"])
            value = max(1, round(getattr(base, parameter) * factor))
            target = TileTarget(dataclasses.replace(base, **{parameter: value}))
            ours = plan_ir(ir, target, write=False)
            baseline = popart_baseline(ir, target, tied_gather=job["tied_gather"],
                                       fully_connected_pass=not job["popart_no_fc"])
            costs = {
                "ours": evaluate(ir, target, {(p.graph_id, p.tensor_id): p.tiles
                                              for p in ours.tensors}, op_plans=ours.op_plans),
                "popart": evaluate(ir, target, baseline.mappings, op_plans=baseline.op_plans)}
            found.append({"parameter": parameter, "factor": factor, "value": value,
                          **{f"{name}_{figure}": getattr(cost, figure)
                             for name, cost in costs.items()
                             for figure in ("exchange_bytes", "cycles")}})
    return found


def same_tiles(ours: dict, theirs: dict) -> float:
    """The share of planned elements two plans put on the same tile (tensors both plan)."""
    keys = [key for key in ours if key in theirs]
    same = sum(int(np.count_nonzero(np.asarray(ours[k]).reshape(-1)
                                    == np.asarray(theirs[k]).reshape(-1))) for k in keys)
    total = sum(np.asarray(ours[k]).size for k in keys)
    return same / total if total else 1.0


def _ratio(objective: float, bound: float) -> float:
    return objective / bound if bound else 1.0


def _traced(work: Any) -> tuple[float, Any]:
    """Peak MiB tracemalloc sees while ``work()`` runs, and its result."""
    tracemalloc.start()
    try:
        result = work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20, result


def _check_same(first: dict, second: dict, what: str) -> None:
    if first.keys() != second.keys() or any(
            not np.array_equal(first[k], second[k]) for k in first):
        raise RuntimeError(f"planning is not deterministic: {what} gave another plan")


def _flat(mappings: dict[str, dict[tuple[str, str], np.ndarray]]) -> dict[str, np.ndarray]:
    return {f"{plan}|{graph}|{tensor}": np.asarray(tiles)
            for plan, by_tensor in mappings.items()
            for (graph, tensor), tiles in by_tensor.items()}


def _dump(path: Path, mappings: dict, costs: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **_flat(mappings))
    path.with_suffix(".json").write_text(json.dumps(costs, indent=1, sort_keys=True))


def _compare(path: Path, mappings: dict, costs: dict) -> str:
    """"identical", or what differs from the dump at ``path``."""
    if not path.exists():
        return "no dump"
    saved = np.load(path)
    now = _flat(mappings)
    if set(saved.files) != set(now):
        return f"tensor sets differ ({len(saved.files)} saved, {len(now)} now)"
    differing = [key for key in now if not np.array_equal(saved[key], now[key])]
    if differing:
        return f"{len(differing)} mappings differ, e.g. {differing[0]}"
    if json.loads(path.with_suffix(".json").read_text()) != json.loads(json.dumps(costs)):
        return "costs differ"
    return "identical"


def _child(job: dict[str, Any], report: Any) -> None:
    try:
        run_graph(job, report)
    except Exception as error:  # reported as the row's outcome, the run goes on
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
        first = text.splitlines()[0] if text else ""
        report.put(("failed", f"{type(error).__name__}: {first}"[:MESSAGE_CHARS]))


# -- the parent: one process per graph ------------------------------------------------------
def job_name(job: dict[str, Any]) -> str:
    optimizer = job.get("optimizer")
    return f"{job['model']}-{job['size']}-{job['kind']}-{job['frontend']}" + (
        f"-{optimizer}" if optimizer and job["kind"] == "training" else "")


def make_job(model: str, size: str, kind: str, **settings: Any) -> dict[str, Any]:
    """One graph's job: what ``run_graph`` reads, each setting at the session's default
    unless given (an unknown setting is a TypeError)."""
    job = dict(model=model, size=size, kind=kind, frontend="torch", tiles=1472, memory=False,
               dump=None, check=None, tied_gather=False, balance_tile_memory=True,
               rotate_start_tiles=False, matmul_plans="with_layouts", popart_no_fc=False,
               sensitivity=False, options=(), optimizer=None)
    unknown = sorted(set(settings) - set(job))
    if unknown:
        raise TypeError(f"unknown job settings {unknown}")
    return {**job, **settings}


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one graph in a fresh process; the row, or why there is none."""
    return run_child(job, timeout, _child, job_name)


#: How often ``run_child`` looks whether its process still lives.
POLL_SECONDS = 5.0


def run_child(job: dict[str, Any], timeout: float, target: Any, name: Any) -> dict[str, Any]:
    """``target(job, report)`` in a fresh process, which puts ``("stage", text)`` as it goes
    (printed with ``name(job)``) and then ``("done", row)`` or ``("failed", why)``: the
    job with the row, or with why there is none (a timeout, a dead process)."""
    context = multiprocessing.get_context("spawn")
    report = context.Queue()
    process = context.Process(target=target, args=(job, report), daemon=True)
    began = time.perf_counter()
    process.start()
    stage, outcome = "start", None
    while outcome is None:
        left = timeout - (time.perf_counter() - began)
        try:
            # wake up now and then: a process that died puts nothing more
            kind, data = report.get(timeout=min(max(left, 0.01), POLL_SECONDS))
        except queue.Empty:
            if not process.is_alive() or left <= 0:
                outcome = {"failed": f"timed out after {timeout:.0f} s in {stage}"
                           if process.is_alive() else f"process died in {stage}"}
            continue
        if kind == "stage":
            stage = data
            print(f"  {name(job)}: {stage} ...", file=sys.stderr, flush=True)
        elif kind == "done":
            outcome = data
        else:
            outcome = {"failed": data}
    if process.is_alive():
        process.terminate()
    process.join()
    report.close()
    report.join_thread()
    return {**job, **outcome}


# -- tables -----------------------------------------------------------------------------------
TIME_COLUMNS = ("graph", "ops", "producer-less", "import s", "plan s", "plan MiB", "RSS MiB",
                "baseline s", "evaluate s", "solver obj/bound", "ops without rule")
COST_COLUMNS = ("graph", "tile obj/bound o/P/L", "exchange MB o/P/L", "exchange kcycles o/P/L",
                "cycles k o/P/L", "left to save MB o/P/L", "max tile KiB o/P/L",
                "peak tile KiB o/P/L", "always-live KiB o/P/L", "fits o/P/L", "o÷P exchange",
                "o÷P cycles", "o÷P peak", "o÷P left", "plans ≠ P", "same tiles as P")
SENSITIVITY_COLUMNS = ("graph", "figure", "×", "o÷P exchange", "o÷P cycles", "ours ≤ PopART")


def time_cells(row: dict[str, Any]) -> list[str]:
    if "failed" in row:
        return [job_name(row), row["failed"], *[""] * (len(TIME_COLUMNS) - 2)]
    peak = row.get("plan_peak_mib")
    return [job_name(row), f"{row['ops']:,}", f"{row['producerless']:,}",
            f"{row['import_s'] + row['pipeline_s']:.1f}", f"{row['plan_s']:.2f}",
            "-" if peak is None else f"{peak:,.0f}", f"{row['rss_mib']:,.0f}",
            f"{row['baseline_s']:.2f}", f"{sum(row['evaluate_s'].values()):.2f}",
            f"{row['solver_ratio']:.4f}", without_rule_cell(row)]


def without_rule_cell(row: dict[str, Any]) -> str:
    """The ops no layout rule models, by type (rows of older runs lack them: "-")."""
    counts = row.get("without_rule")
    if counts is None:
        return "-"
    return ", ".join(f"{name} ×{count}" for name, count in counts.items()) or "none"


def cost_cells(row: dict[str, Any]) -> list[str]:
    if "failed" in row:
        return [job_name(row), row["failed"], *[""] * (len(COST_COLUMNS) - 2)]
    costs = [row["costs"][name] for name in PLANS]

    def three(text: Any) -> str:
        return " / ".join(text(c) for c in costs)

    def ratio(figure: str) -> str:
        if any(figure not in c for c in costs[:2]):
            return "-"  # rows of older runs lack it
        ours, popart = costs[0][figure], costs[1][figure]
        return f"{ours / popart:.3f}" if popart else ("1.000" if not ours else "inf")

    return [job_name(row), three(lambda c: f"{c['tile_ratio']:.3f}"),
            three(lambda c: f"{c['exchange_bytes'] / 1e6:,.2f}"),
            three(lambda c: f"{c['exchange_cycles'] / 1e3:,.1f}"),
            three(lambda c: f"{c['cycles'] / 1e3:,.1f}" if "cycles" in c else "-"),
            three(lambda c: f"{c['avoidable_exchange_bytes'] / 1e6:,.3f}"
                  if "avoidable_exchange_bytes" in c else "-"),  # rows of older runs lack it
            three(lambda c: f"{c['max_tile_bytes'] / 1024:,.1f}"),
            # liveness over the schedule (rows of older runs lack it)
            three(lambda c: f"{c['peak_tile_bytes'] / 1024:,.1f}" if "fits" in c else "-"),
            three(lambda c: f"{c['always_live_max_tile_bytes'] / 1024:,.1f}"
                  if "fits" in c else "-"),
            three(lambda c: ("yes" if c["fits"] else "no") if "fits" in c else "-"),
            ratio("exchange_bytes"), ratio("cycles"), ratio("peak_tile_bytes"),
            ratio("avoidable_exchange_bytes"),
            f"{row['plans_differing']:,}" if "plans_differing" in row else "-",
            f"{100 * row['same_as_popart']:.1f}%" if "same_as_popart" in row else "-"]


def sensitivity_rows(row: dict[str, Any]) -> list[list[str]]:
    """One row per changed figure: ours ÷ PopART in exchange bytes and cycles."""
    found = []
    for case in row.get("sensitivity_cases", ()):
        exchange = case["ours_exchange_bytes"] / max(case["popart_exchange_bytes"], 1)
        cycles = case["ours_cycles"] / max(case["popart_cycles"], 1)
        holds = case["ours_exchange_bytes"] <= case["popart_exchange_bytes"] \
            and case["ours_cycles"] <= case["popart_cycles"]
        found.append([job_name(row), f"{case['parameter']} = {case['value']}",
                      f"{case['factor']:g}", f"{exchange:.3f}", f"{cycles:.3f}",
                      "yes" if holds else "NO"])
    return found


def print_table(columns: tuple[str, ...], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(columns) + " |")
        print("| --- |" + " ---: |" * (len(columns) - 1))
        for cells in rows:
            print("| " + " | ".join(cells) + " |")
        print()
        return
    widths = [max(len(str(c)) for c in column) for column in zip(columns, *rows, strict=True)]
    for cells in (columns, *rows):
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
    print()


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.machine()}, {cpu}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, numpy {np.__version__}")


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    names = [n for n in text.replace(",", " ").split() if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {', '.join(known)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,real")
    parser.add_argument("--models", nargs="+", default=[",".join(MODELS)])
    parser.add_argument("--kinds", default="forward,training")
    parser.add_argument("--frontends", default="torch",
                        help="torch, onnx or both (an ONNX training step is the forward "
                             "export made a step by the Autodiff transform, --loss nll)")
    parser.add_argument("--optimizers", default="",
                        help="the optimizers of training steps, e.g. sgd,adam (built in the "
                             "IR); empty: the PyTorch route's traced SGD update, SGD on ONNX")
    parser.add_argument("--tiles", type=int, default=1472)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one graph may take, import included")
    parser.add_argument("--quick", action="store_true",
                        help="skip the second (tracemalloc) planning run")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--from-json", help="only print the tables of a --json file")
    parser.add_argument("--popart-tied-gather", action="store_true",
                        help="the PopART baseline with its TiedGatherPattern (off by default "
                             "in PopART): a tied embedding laid out by the LM head's matmul")
    parser.add_argument("--no-balance-tile-memory", action="store_true",
                        help="plan with SessionOptions.balance_tile_memory off (broadcast "
                             "operands on the tiles reading them most, as Poplibs lays them "
                             "out, instead of spread over lightly used tiles)")
    parser.add_argument("--rotate-start-tiles", action="store_true",
                        help="plan with SessionOptions.rotate_plan_start_tiles set (each "
                             "matmul and convolution plan starting where the last ended)")
    parser.add_argument("--matmul-plans", default="with_layouts",
                        choices=("with_layouts", "poplibs", "alone"),
                        help="how our plan chooses matmul plans (SessionOptions.matmul_plans)")
    parser.add_argument("--popart-no-fc", action="store_true",
                        help="the PopART baseline without fullyConnectedPass planning "
                             "(SessionOptions.enableFullyConnectedPass off): every matmul "
                             "planned alone")
    parser.add_argument("--sensitivity", action="store_true",
                        help="also compare ours with PopART with each cost figure of the IPU "
                             "Model halved and doubled")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="set a session option before the pipeline runs (repeatable), "
                             "as the command's --option does: recompute=standard, say")
    parser.add_argument("--dump", help="save each graph's three plans and costs here")
    parser.add_argument("--check", help="compare each graph's plans with a --dump folder")
    args = parser.parse_args()
    jobs = [make_job(model, size, kind, frontend=frontend, tiles=args.tiles,
                     memory=not args.quick, dump=args.dump, check=args.check,
                     tied_gather=args.popart_tied_gather,
                     balance_tile_memory=not args.no_balance_tile_memory,
                     rotate_start_tiles=args.rotate_start_tiles,
                     matmul_plans=args.matmul_plans, popart_no_fc=args.popart_no_fc,
                     sensitivity=args.sensitivity, options=tuple(args.option),
                     optimizer=optimizer)
            for size in _names(args.sizes, SIZES, "sizes")
            for model in _names(" ".join(args.models), MODELS, "models")
            for kind in _names(args.kinds, KINDS, "kinds")
            for frontend in _names(args.frontends, FRONTENDS, "front ends")
            for optimizer in (_names(args.optimizers, OPTIMIZER_CHOICES, "optimizers")
                              if kind == "training" and args.optimizers else [None])]
    if args.from_json:
        print_tables(json.loads(Path(args.from_json).read_text()), args)
        return
    variant = "; PopART with TiedGatherPattern" if args.popart_tied_gather else ""
    variant += "; balance_tile_memory off" if args.no_balance_tile_memory else ""
    variant += "; rotate_plan_start_tiles" if args.rotate_start_tiles else ""
    variant += f"; matmul_plans={args.matmul_plans}"
    variant += "; PopART without fullyConnectedPass" if args.popart_no_fc else ""
    variant += "".join(f"; {assignment}" for assignment in args.option)
    print(f"machine: {machine()}; {args.tiles} tiles{variant}", flush=True)
    rows = []
    for job in jobs:
        row = run_job(job, args.timeout)
        rows.append(row)
        status = row.get("failed") or row.get("compared") or f"plan {row['plan_s']:.2f} s"
        print(f"  {job_name(row)}: {status}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print_tables(rows, args)


def print_tables(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Both tables, the comparison with a dump, and the planner's stage times."""
    print_table(TIME_COLUMNS, [time_cells(r) for r in rows], args.markdown)
    print_table(COST_COLUMNS, [cost_cells(r) for r in rows], args.markdown)
    sensitive = [cells for r in rows for cells in sensitivity_rows(r)]
    if sensitive:
        print_table(SENSITIVITY_COLUMNS, sensitive, args.markdown)
    compared = [f"{job_name(r)}: {r['compared']}" for r in rows if "compared" in r]
    if compared:
        print("plans compared with the dump in", rows[0]["check"], "\n  " + "\n  ".join(compared))
    stages = [f"{job_name(r)}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["plan_stages"].items())
              for r in rows if "plan_stages" in r]
    if stages:
        print("plan stages (s):\n  " + "\n  ".join(stages))


if __name__ == "__main__":
    main()
