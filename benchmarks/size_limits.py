"""What ``popart-unwind plan`` costs on models that stress size: many inputs to one op, and
large tensors. Each case is an ONNX model generated here (random-free: zeros or ones),
planned by the command in a fresh process, which reports its wall time and peak RSS:

    python benchmarks/size_limits.py
    python benchmarks/size_limits.py --cases concat3000 matmul8192

Cases: ``concatK`` — K inputs of [4, 8] concatenated, then a Relu (the plan file holds K
tensors of 1,472 tile lists each); ``matmulN`` — two [N, N] float32 inputs multiplied
(2·N² planned elements); ``mlpL`` — L Linear layers of width 4,096 over a batch of 512
(weights as initializers); ``vgg19`` — VGG-19's layers (the ONNX model zoo's shape, zero
weights, batch 1 at 224 x 224). The table gives seconds, peak RSS and bytes of RSS per
planned element (the producer-less tensors' elements).
"""

from __future__ import annotations

import argparse
import json
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

CASES = ("concat1000", "concat3000", "matmul4096", "matmul8192", "mlp8", "vgg19")


def concat_model(count: int) -> tuple[onnx.ModelProto, int]:
    nodes = [helper.make_node("Concat", [f"x{i}" for i in range(count)], ["c"], axis=0),
             helper.make_node("Relu", ["c"], ["y"])]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [4, 8])
              for i in range(count)]
    graph = helper.make_graph(nodes, "concat", inputs, [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [4 * count, 8])])
    return _model(graph), 32 * count


def matmul_model(size: int) -> tuple[onnx.ModelProto, int]:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "matmul",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [size, size])
         for name in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])])
    return _model(graph), 2 * size * size


def mlp_model(layers: int, width: int = 4096, batch: int = 512) -> tuple[onnx.ModelProto, int]:
    nodes, weights, current = [], [], "x"
    for index in range(layers):
        weight = np.zeros((width, width), np.float32)
        weights.append(numpy_helper.from_array(weight, f"w{index}"))
        nodes.append(helper.make_node("MatMul", [current, f"w{index}"], [f"h{index}"]))
        nodes.append(helper.make_node("Relu", [f"h{index}"], [f"r{index}"]))
        current = f"r{index}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [batch, width])],
        initializer=weights)
    return _model(graph), layers * width * width + batch * width


#: VGG-19's convolution widths by stage (torchvision's configuration "E"); a max-pool
#: closes each stage.
VGG19_STAGES = ((64, 64), (128, 128), (256, 256, 256, 256), (512, 512, 512, 512),
                (512, 512, 512, 512))


def vgg19_model() -> tuple[onnx.ModelProto, int]:
    """VGG-19 as the ONNX model zoo has it (16 3x3 convolutions with biases and ReLUs, five
    max-pools, three fully connected layers; 143.7 M parameters), batch 1 at 224 x 224,
    every weight zero (the layouts do not depend on the values)."""
    nodes, weights, current, channels, count = [], [], "x", 3, 0

    def weight(name: str, shape: tuple[int, ...]) -> str:
        nonlocal count
        weights.append(numpy_helper.from_array(np.zeros(shape, np.float32), name))
        count += int(np.prod(shape))
        return name

    for stage, widths in enumerate(VGG19_STAGES):
        for layer, width in enumerate(widths):
            name = f"conv{stage + 1}_{layer + 1}"
            nodes.append(helper.make_node(
                "Conv", [current, weight(f"{name}.w", (width, channels, 3, 3)),
                         weight(f"{name}.b", (width,))], [name], pads=[1, 1, 1, 1],
                kernel_shape=[3, 3]))
            nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"]))
            current, channels = f"{name}.relu", width
        nodes.append(helper.make_node("MaxPool", [current], [f"pool{stage + 1}"],
                                      kernel_shape=[2, 2], strides=[2, 2]))
        current = f"pool{stage + 1}"
    nodes.append(helper.make_node("Flatten", [current], ["flat"]))
    current, features = "flat", channels * 7 * 7
    for index, width in enumerate((4096, 4096, 1000)):
        name = f"fc{index + 6}"
        nodes.append(helper.make_node("Gemm", [current, weight(f"{name}.w", (width, features)),
                                               weight(f"{name}.b", (width,))], [name],
                                      transB=1))
        current, features = name, width
        if width != 1000:
            nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"]))
            current = f"{name}.relu"
    graph = helper.make_graph(
        nodes, "vgg19", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        [1, 3, 224, 224])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, 1000])],
        initializer=weights)
    return _model(graph), count + 3 * 224 * 224


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="size-limits")


def build(case: str) -> tuple[onnx.ModelProto, int]:
    if case == "vgg19":
        return vgg19_model()
    for prefix, make in (("concat", concat_model), ("matmul", matmul_model), ("mlp", mlp_model)):
        if case.startswith(prefix):
            return make(int(case[len(prefix):]))
    raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")


#: Runs the command in-process and prints its status, seconds and peak RSS as JSON. The peak
#: is the kernel's high-water mark of this process's own memory (``VmHWM``, which starts
#: afresh at exec); ``ru_maxrss`` would carry over the RSS of the process that forked it,
#: here the one holding the generated model.
CHILD = """
import io, json, resource, sys, time
from popart_unwind.cli import main
began = time.perf_counter()
status = main(sys.argv[1:], stdout=io.StringIO(), stderr=sys.stderr)
seconds = time.perf_counter() - began
try:
    with open("/proc/self/status") as status_file:
        line = next(l for l in status_file if l.startswith("VmHWM:"))
    rss_mib = int(line.split()[1]) / 1024
except (OSError, StopIteration):
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"status": status, "seconds": seconds, "rss_mib": rss_mib}))
"""


def run(case: str, folder: Path) -> dict:
    model, elements = build(case)
    path = folder / f"{case}.onnx"
    onnx.save(model, str(path), save_as_external_data=model.ByteSize() > 2**30)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "plan", str(path), "--out",
                           str(folder / f"{case}.json"), "--quiet"],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        return {"case": case, "failed": done.stderr.strip().splitlines()[-1:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(case=case, elements=elements, wall_s=time.perf_counter() - began)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print("| case | planned elements | plan s | peak RSS MiB | RSS bytes per element |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        for case in args.cases:
            row = run(case, Path(folder))
            if "failed" in row:
                print(f"| {case} | failed: {row['failed']} | | | |", flush=True)
                continue
            print(f"| {case} | {row['elements']:,} | {row['seconds']:.2f} | "
                  f"{row['rss_mib']:,.0f} | {row['rss_mib'] * 2**20 / row['elements']:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
