"""The IPU Model held against measured IPUs: dense matmuls, a per-tile formula, and BERT-Large.

1. **Measured Poplar matmuls.** PopSparse (Graphcore Research, 2023, arXiv 2303.16999)
   published dense ``[m,k] x [k,n]`` matmul throughput on a Mk2-class IPU (Poplibs' matmul,
   ``availableMemoryProportion`` 0.6, FP16 with float partials, or FP32); the figures below
   were read off its plot (about ±5 %; its harness is ``ipu/matmul_bench.py`` in
   ``graphcore-research/sparsity-benchmarks``). Time = 2mkn / rate, so the measured time does
   not depend on the clock, which the source does not state (a GC200 runs at 1.33 GHz, a Bow
   IPU at 1.85 GHz). Each point is planned as one ``MatMul`` of two graph inputs on one IPU
   of 1,472 tiles; the model's time is the PopART baseline's cycles (a lone matmul creates
   both its operands, as Poplibs' harness does) at each clock.
2. **A per-tile formula fitted on a real IPU** (the ELK artifact, ``platformxlab/elk``,
   MICRO 2025; its IPU Mk2 model): one tile's FP16 matmul of an ``m x k x n`` block, beside
   the IPU Model's compute for the same block on one tile (Poplibs' AMP estimate).
3. **BERT-Large SL128 training** (``--bert``, slow: 4 of the 24 layers planned, one per IPU,
   and scaled to Graphcore's [3, 7, 7, 7] split, 2-10 minutes; within 0.2 % of the whole
   model, which ``benchmarks/bert_large.py`` plans in 10-25 minutes and 8 GB): see
   ``bert_large.py`` for the configuration and the assumptions of the comparison.

    python benchmarks/ipu_measured.py [--markdown] [--json OUT] [--bert]

``--peak`` also prints the model with matmul compute at peak rate alone (the IPU Model
before Poplibs' vertex estimates), for comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

#: (dtype, m = k, n, measured TFLOP/s) read off PopSparse's dense-matmul figure.
MEASURED_MATMULS = (
    ("float16", 1024, 4, 6.0), ("float16", 1024, 16, 20.3), ("float16", 1024, 64, 45.5),
    ("float16", 1024, 256, 89.0), ("float16", 1024, 1024, 120.0),
    ("float16", 1024, 4096, 180.0), ("float16", 1024, 16384, 223.0),
    ("float16", 4096, 4, 18.2), ("float16", 4096, 64, 130.0), ("float16", 4096, 256, 175.0),
    ("float32", 1024, 4, 3.6), ("float32", 1024, 64, 20.9), ("float32", 1024, 1024, 43.0),
    ("float32", 1024, 16384, 58.0), ("float32", 4096, 4, 6.9), ("float32", 4096, 4096, 58.0),
)
#: Clocks of the two Mk2-class IPUs the measurement may have run on, in GHz.
CLOCKS = {"GC200": 1.33, "Bow": 1.85}
#: ELK's FP16 per-tile matmul formula, at its stated clock of 1.325 GHz.
ELK_CLOCK = 1.325
TILES = 1472


def elk_tile_cycles(m: int, k: int, n: int) -> int:
    """ELK's fitted cycles of one tile's FP16 ``[m,k] x [k,n]``."""
    c = math.ceil
    return (2 * 12 * c(m / 6) * c(k / 16) * c(n / 16) + 514 * c(k / 16) * c(n / 16)
            + 113 * c(n / 16) + 173)


def matmul_model(dtype: str, m: int, k: int, n: int, vertex_costs: bool) -> dict[str, int]:
    """Plan one MatMul of two graph inputs as PopART would and read its cycles."""
    import onnx
    from onnx import TensorProto, helper
    from popart_unwind.transforms import run_pipeline

    from popart_unwind.baselines import popart_baseline
    from popart_unwind.cost import evaluate
    from popart_unwind.ir import Ir
    from popart_unwind.target import IpuModel, TileTarget

    element = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul",
        [helper.make_tensor_value_info("a", element, [m, k]),
         helper.make_tensor_value_info("b", element, [k, n])],
        [helper.make_tensor_value_info("c", element, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "matmul.onnx"
        onnx.save(model, path)
        ir = Ir.from_onnx(str(path))
    run_pipeline(ir)
    target = TileTarget(IpuModel(tiles_per_ipu=TILES, vertex_costs=vertex_costs))
    baseline = popart_baseline(ir, target)
    cost = evaluate(ir, target, mappings=baseline.mappings, op_plans=baseline.op_plans)
    row = cost.ops[0]
    return {"cycles": int(cost.cycles), "exchange": int(row.cycles),
            "compute": int(row.compute_cycles), "partials": int(row.partials_cycles)}


def matmul_rows(peak: bool) -> list[dict]:
    rows = []
    for dtype, size, n, tflops in MEASURED_MATMULS:
        measured_us = 2 * size * size * n / (tflops * 1e12) * 1e6
        row = {"dtype": dtype, "m": size, "k": size, "n": n, "measured_tflops": tflops,
               "measured_us": measured_us, "model": matmul_model(dtype, size, size, n, True)}
        if peak:
            row["peak_model"] = matmul_model(dtype, size, size, n, False)
        for name, ghz in CLOCKS.items():
            row[f"error_{name}"] = row["model"]["cycles"] / (ghz * 1e3) / measured_us - 1
        rows.append(row)
        print(f"  {dtype} {size}x{size}x{n}: {row['model']['cycles']} cycles", file=sys.stderr)
    return rows


def elk_rows() -> list[dict]:
    """ELK's per-tile formula beside the IPU Model's one-tile AMP estimate, cubes 16³-256³."""
    from popart_unwind.target import IpuModel, MatmulPartition, TileTarget

    target = TileTarget(IpuModel(tiles_per_ipu=1))
    whole = MatmulPartition(1, 1, 1, 1)
    rows = []
    for size in (16, 32, 64, 128, 256):
        model = target.matmul_cost(1, size, size, size, "float16", whole)
        rows.append({"block": size, "elk": elk_tile_cycles(size, size, size),
                     "model_compute": int(model.compute_cycles),
                     "peak_rate": math.ceil(size ** 3 / 64)})
    return rows


def _pct(value: float) -> str:
    return f"{value * 100:+.0f} %"


def print_table(columns: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(columns) + " |")
        print("|" + "|".join(" --- " for _ in columns) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
        print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
        for row in rows:
            print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--peak", action="store_true",
                        help="also cost each matmul at peak rate alone (the former model)")
    parser.add_argument("--bert", action="store_true",
                        help="also model BERT-Large SL128 training (slow)")
    args = parser.parse_args()
    began = time.perf_counter()
    results: dict = {"matmuls": matmul_rows(args.peak), "elk": elk_rows()}

    print("Measured dense matmuls (PopSparse, Mk2-class IPU) against the IPU Model "
          "(the PopART baseline's plan on 1,472 tiles)\n")
    columns = ["dtype", "m = k", "n", "measured us", "model cycles", "compute", "exchange",
               "partials", "GC200 1.33 GHz", "Bow 1.85 GHz"]
    if args.peak:
        columns += ["peak-rate model, GC200"]
    rows = []
    for r in results["matmuls"]:
        model = r["model"]
        cells = [r["dtype"], str(r["m"]), str(r["n"]), f"{r['measured_us']:.2f}",
                 str(model["cycles"]), str(model["compute"]), str(model["exchange"]),
                 str(model["partials"]), _pct(r["error_GC200"]), _pct(r["error_Bow"])]
        if args.peak:
            peak_us = r["peak_model"]["cycles"] / (CLOCKS["GC200"] * 1e3)
            cells.append(_pct(peak_us / r["measured_us"] - 1))
        rows.append(cells)
    print_table(columns, rows, args.markdown)
    for clock in CLOCKS:
        errors = [abs(r[f"error_{clock}"]) for r in results["matmuls"]]
        within = sum(e <= 0.30 for e in errors)
        print(f"{clock}: {within} of {len(errors)} points within ±30 %; "
              f"largest error {max(errors) * 100:.0f} %")
    print()
    print("One tile's FP16 matmul of a b x b x b block: ELK's fitted formula and the "
          "IPU Model's AMP estimate\n")
    print_table(["block", "ELK cycles", "model compute", "peak rate alone", "model / ELK"],
                [[str(r["block"]), str(r["elk"]), str(r["model_compute"]), str(r["peak_rate"]),
                  f"{r['model_compute'] / r['elk']:.2f}"] for r in results["elk"]],
                args.markdown)
    if args.bert:
        from bert_large import bert_large_rows, print_bert

        results["bert_large"] = bert_large_rows(layers=4)
        print_bert(results["bert_large"], args.markdown)
    print(f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
