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
before Poplibs' vertex estimates), for comparison. ``--poplibs-rules`` also prints what the
measured matmuls would cost if the plan followed three rules of Poplibs' planner the IPU
Model does not have (a question, not the model: the tool's plans and costs do not use them):

- temporary memory counted as Poplibs counts it (``lib/poplin/ConvModel.cpp``): the largest
  of the convolution phase (the tile's whole operand blocks and its float partials) and
  the reduction phase, not their sum over the tile's received parts;
- serial splits of the output channels (``Partition::outChanSplit.serial``): the plan runs
  S times on 1/S of the rows, re-receiving the other operand each time, its cycles S times
  a step's, chosen as the fewest steps that bring a partition within the memory bound;
- exchange-bus sharing (``lib/poplin/ExchangeEstimator.hpp``): when the rows' parallel split
  is even, the two tiles of a super tile receive the same input elements in the same
  cycles, so the operand broadcast along the rows arrives at twice the rate (Poplibs
  orders tiles so that those pairs are neighbours; the IPU Model's tile order does not).

Each partition's compute and partial-sum cycles are the IPU Model's own (the C++ hook);
only the exchange, the memory bound and the serial steps follow the rules above.
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


#: Poplibs' serial splits considered by ``--poplibs-rules``: 1 to this many steps.
MAX_SERIAL_STEPS = 16


def poplibs_rules_cycles(dtype: str, m: int, k: int, n: int, tiles: int = TILES,
                         max_steps: int = MAX_SERIAL_STEPS,
                         shared_buses: bool = True) -> dict[str, int]:
    """The quickest plan of one [m,k] x [k,n] matmul under the three Poplibs planner rules
    of the module docstring (the third only with ``shared_buses``), every parallel split of
    ``tiles`` tiles and 1 to ``max_steps`` serial steps tried; ties and the memory bound as
    the C++ planner."""
    from popart_unwind.target import IpuModel, MatmulPartition, TileTarget

    model = IpuModel(tiles_per_ipu=tiles)
    target = TileTarget(model)
    size = model.dtype_size(dtype)
    limit = int(model.available_memory_proportion * model.bytes_per_tile)
    rate, sync = model.exchange_bytes_per_cycle, model.sync_cycles
    partial = model.partial_bytes_per_element
    best: tuple | None = None
    for steps in range(1, max_steps + 1):
        rows = -(-m // steps)
        for g_m in range(1, min(rows, tiles) + 1):
            for g_k in range(1, min(k, tiles // g_m) + 1):
                for g_n in range(1, min(n, tiles // (g_m * g_k)) + 1):
                    step = target.matmul_cost(1, rows, k, n, dtype,
                                              MatmulPartition(1, g_m, g_k, g_n))
                    m_b, k_b, n_b = -(-rows // g_m), -(-k // g_k), -(-n // g_n)
                    lhs, rhs, out = m_b * k_b, k_b * n_b, m_b * n_b
                    lhs_received = lhs - lhs // g_n
                    rhs_received = rhs - rhs // g_m
                    shared = 2 if shared_buses and g_m % 2 == 0 else 1
                    exchange = -(-(lhs_received * size * shared + rhs_received * size)
                                 // (rate * shared)) + sync
                    convolving = (lhs + rhs) * size + out * partial
                    reducing = out * partial + (-(-out // g_k)) * (g_k - 1) * partial \
                        if g_k > 1 else 0
                    temp = max(convolving, reducing)
                    cycles = steps * (step.compute_cycles + exchange + step.reduction_cycles)
                    key = (temp > limit, temp if temp > limit else 0, cycles,
                           steps * g_m * g_k * g_n, steps, g_m, g_k, g_n)
                    if best is None or key < best:
                        best = key
    assert best is not None
    return {"cycles": best[2], "fits": not best[0], "serial": best[4],
            "rows": best[5], "inner": best[6], "cols": best[7]}


def matmul_rows(peak: bool, poplibs_rules: bool = False) -> list[dict]:
    rows = []
    for dtype, size, n, tflops in MEASURED_MATMULS:
        measured_us = 2 * size * size * n / (tflops * 1e12) * 1e6
        row = {"dtype": dtype, "m": size, "k": size, "n": n, "measured_tflops": tflops,
               "measured_us": measured_us, "model": matmul_model(dtype, size, size, n, True)}
        if peak:
            row["peak_model"] = matmul_model(dtype, size, size, n, False)
        if poplibs_rules:
            row["poplibs_rules"] = poplibs_rules_cycles(dtype, size, size, n)
            row["poplibs_rules_unshared"] = poplibs_rules_cycles(dtype, size, size, n,
                                                                 shared_buses=False)
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


def print_poplibs_rules(rows: list[dict], markdown: bool) -> None:
    """The ``--poplibs-rules`` table: the quickest plan under those rules, its error."""
    print("The same matmuls planned under three rules of Poplibs' planner the IPU Model "
          "lacks (temporary memory as Poplibs counts it, serial splits of the rows, "
          "exchange-bus sharing)\n")
    def error(cycles: int, row: dict) -> float:
        return cycles / (CLOCKS["Bow"] * 1e3) / row["measured_us"] - 1

    table, errors, unshared_errors = [], [], []
    for r in rows:
        rules, unshared = r["poplibs_rules"], r["poplibs_rules_unshared"]
        errors.append(abs(error(rules["cycles"], r)))
        unshared_errors.append(abs(error(unshared["cycles"], r)))
        plan = (f"{rules['serial']} x ({rules['rows']}, {rules['inner']}, {rules['cols']})"
                + ("" if rules["fits"] else ", over the bound"))
        table.append([r["dtype"], str(r["m"]), str(r["n"]), str(r["model"]["cycles"]),
                      str(rules["cycles"]), plan, _pct(r["error_Bow"]),
                      _pct(error(rules["cycles"], r)), _pct(error(unshared["cycles"], r))])
    print_table(["dtype", "m = k", "n", "model cycles", "under the rules",
                 "serial x (gM, gK, gN)", "model, Bow", "rules, Bow",
                 "rules without shared buses, Bow"], table, markdown)
    for name, found in (("the rules", errors), ("the rules without shared buses", unshared_errors)):
        within = sum(e <= 0.30 for e in found)
        print(f"Under {name}, Bow: {within} of {len(found)} points within ±30 %; "
              f"largest error {max(found) * 100:.0f} %")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--peak", action="store_true",
                        help="also cost each matmul at peak rate alone (the former model)")
    parser.add_argument("--poplibs-rules", action="store_true",
                        help="also plan each measured matmul under three rules of Poplibs' "
                             "planner the IPU Model lacks (slow: a few minutes)")
    parser.add_argument("--bert", action="store_true",
                        help="also model BERT-Large SL128 training (slow)")
    args = parser.parse_args()
    began = time.perf_counter()
    results: dict = {"matmuls": matmul_rows(args.peak, args.poplibs_rules),
                     "elk": elk_rows()}

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
    if args.poplibs_rules:
        print_poplibs_rules(results["matmuls"], args.markdown)
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
