"""How ``popart-unwind plan`` scales with the number of inputs of one Concat.

Each case is an ONNX model made here: k inputs of [4, 8] float32 joined by one Concat on
axis 0. ``direct``: the inputs are the Concat's operands; ``add``: each input first goes
through an Add with one shared [8] bias (k Adds reading the bias, k elementwise results
joined); ``matmul``: the Concat's result is multiplied by a [8, 16] weight, so the matmul's
layout of its operand is unwound into every input; ``split``: the Concat's result is split
again into k outputs of [4, 8], each through a Relu (every input reaches the Split, whose
outputs each hold one input's elements). The command runs end to end in a
fresh process per case (interpreter start and imports included, PopART baseline and
linear plan compared, no output files), and the table gives its wall time, the time per
thousand inputs, and its peak RSS:

    python benchmarks/concat_scaling.py
    python benchmarks/concat_scaling.py --inputs 100 1000 3000 6000 --kinds add

A Concat planned in time linear in k keeps the time per thousand inputs flat as k grows.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KINDS = ("direct", "add", "matmul", "split")
SHAPE = [4, 8]


def concat_model(count: int, kind: str) -> onnx.ModelProto:
    """k inputs of [4, 8] concatenated on axis 0, directly or each through an Add."""
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, SHAPE)
              for i in range(count)]
    nodes, joined = [], [f"x{i}" for i in range(count)]
    if kind == "add":
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, SHAPE[1:]))
        nodes = [helper.make_node("Add", [f"x{i}", "bias"], [f"a{i}"]) for i in range(count)]
        joined = [f"a{i}" for i in range(count)]
    nodes.append(helper.make_node("Concat", joined, ["y"], axis=0))
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [SHAPE[0] * count, *SHAPE[1:]])
    weights = []
    if kind == "matmul":
        weights = [numpy_helper.from_array(np.zeros((SHAPE[1], 16), np.float32), "w")]
        nodes.append(helper.make_node("MatMul", ["y", "w"], ["z"]))
        output = helper.make_tensor_value_info("z", TensorProto.FLOAT, [SHAPE[0] * count, 16])
    outputs = [output]
    if kind == "split":
        weights = [numpy_helper.from_array(np.full(count, SHAPE[0], np.int64), "sizes")]
        nodes.append(helper.make_node("Split", ["y", "sizes"], [f"s{i}" for i in range(count)],
                                      axis=0))
        nodes += [helper.make_node("Relu", [f"s{i}"], [f"r{i}"]) for i in range(count)]
        outputs = [helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT, SHAPE)
                   for i in range(count)]
    graph = helper.make_graph(nodes, f"concat_{kind}_{count}", inputs, outputs,
                              initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="concat-scaling")


def command() -> list[str]:
    """The installed console script beside this interpreter, else the same entry point."""
    script = Path(sys.executable).with_name("popart-unwind")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from popart_unwind.cli import main; "
            "sys.exit(main())"]


def run(count: int, kind: str, folder: Path) -> dict:
    path = folder / f"concat_{kind}_{count}.onnx"
    onnx.save(concat_model(count, kind), str(path))
    began = time.perf_counter()
    child = subprocess.Popen([*command(), "plan", str(path), "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - began
    error = child.stderr.read().decode().strip() if child.stderr else ""
    child.wait()
    if os.waitstatus_to_exitcode(status):
        return {"failed": error.splitlines()[-1:] or ["exit status"]}
    return {"seconds": seconds, "rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", nargs="+", type=int, default=[100, 1000, 3000])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print("| inputs k | kind | plan s (end to end) | s per 1,000 inputs | peak RSS MiB |")
    print("| ---: | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.kinds:
            for count in args.inputs:
                row = run(count, kind, Path(folder))
                if "failed" in row:
                    print(f"| {count:,} | {kind} | failed: {row['failed']} | | |", flush=True)
                    continue
                print(f"| {count:,} | {kind} | {row['seconds']:.2f} | "
                      f"{row['seconds'] * 1000 / count:.2f} | {row['rss_mib']:,.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
