"""The planner's own memory and time at size: ``popart-unwind plan`` on each case in a
fresh process, its peak RSS (the kernel's high-water mark of that process, as
``size_limits.py`` reads it) and wall time, and the children's user and system seconds
(``resource.getrusage(RUSAGE_CHILDREN)``):

    python benchmarks/memory_at_size.py
    python benchmarks/memory_at_size.py --cases matmul8192 light_vgg19 --markdown

Cases: ``matmul8192`` — two [8192, 8192] float32 graph inputs multiplied; ``light_vgg19``
— ONNX's light model zoo VGG-19 as the onnx wheel ships it (a 9 KB file whose 143 M
weights are ConstantOfShape fills); ``adds10000`` — 10,000 Adds side by side, each of two
[4, 8] graph inputs; ``chain10000`` — one [4, 8] input through a chain of 10,000
elementwise ops (Relu and Add of a [4, 8] weight, alternating); ``nestedifN`` — N
``If``s nested in each other's then branches around one ``Relu`` of a [4, 8] input read
from the outermost scope (each else branch an Identity of it), every If on the one
boolean graph input.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from size_limits import CHILD, matmul_model

CASES = ("matmul8192", "light_vgg19", "adds10000", "chain10000", "nestedif30")
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="memory-at-size")


def adds_model(count: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Add", [f"a{i}", f"b{i}"], [f"y{i}"]) for i in range(count)]
    inputs = [helper.make_tensor_value_info(f"{side}{i}", TensorProto.FLOAT, [4, 8])
              for i in range(count) for side in "ab"]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [4, 8])
               for i in range(count)]
    return _model(helper.make_graph(nodes, "adds", inputs, outputs))


def chain_model(count: int) -> onnx.ModelProto:
    nodes, current = [], "x"
    for index in range(count):
        out = f"h{index}"
        nodes.append(helper.make_node("Relu", [current], [out]) if index % 2 == 0 else
                     helper.make_node("Add", [current, "w"], [out]))
        current = out
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 8])
              for name in ("x", "w")]
    return _model(helper.make_graph(
        nodes, "chain", inputs, [helper.make_tensor_value_info(current, TensorProto.FLOAT,
                                                               [4, 8])]))


def nested_if_model(depth: int) -> onnx.ModelProto:
    """``depth`` Ifs, each the only node of its parent's then branch, the innermost then
    branch a Relu of the outer scope's ``x``."""
    def value(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 8])

    then = helper.make_graph([helper.make_node("Relu", ["x"], ["r0"])], "then0", [],
                             [value("r0")])
    for level in range(1, depth + 1):
        otherwise = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{level}"])],
                                      f"else{level}", [], [value(f"e{level}")])
        node = helper.make_node("If", ["cond"], [f"r{level}"], then_branch=then,
                                else_branch=otherwise)
        if level == depth:
            break
        then = helper.make_graph([node], f"then{level}", [], [value(f"r{level}")])
    inputs = [helper.make_tensor_value_info("cond", TensorProto.BOOL, []), value("x")]
    return _model(helper.make_graph([node], "nested_if", inputs, [value(f"r{depth}")]))


def model_path(case: str, folder: Path) -> Path:
    if case.startswith("light_"):
        return LIGHT / f"{case}.onnx"
    if case.startswith("matmul"):
        model = matmul_model(int(case[len("matmul"):]))[0]
    elif case.startswith("adds"):
        model = adds_model(int(case[len("adds"):]))
    elif case.startswith("chain"):
        model = chain_model(int(case[len("chain"):]))
    elif case.startswith("nestedif"):
        model = nested_if_model(int(case[len("nestedif"):]))
    else:
        raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    path = folder / f"{case}.onnx"
    onnx.save(model, str(path))
    return path


def run(case: str, folder: Path) -> dict:
    path = model_path(case, folder)
    if not path.is_file():
        return {"case": case, "failed": f"no {path.name} in this onnx wheel"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "plan", str(path), "--out",
                           str(folder / f"{case}.json"), "--quiet"],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        return {"case": case, "failed": " ".join(done.stderr.strip().splitlines()[-1:])}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(case=case, wall_s=wall,
                  cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    header = ("case", "wall s", "CPU s", "peak RSS MiB")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("| --- | ---: | ---: | ---: |")
    else:
        print(f"{header[0]:<14}{header[1]:>10}{header[2]:>10}{header[3]:>15}")
    with tempfile.TemporaryDirectory() as folder:
        for case in args.cases:
            row = run(case, Path(folder))
            if "failed" in row:
                print(f"{case}: failed: {row['failed']}", flush=True)
                continue
            cells = (case, f"{row['wall_s']:.1f}", f"{row['cpu_s']:.1f}",
                     f"{row['rss_mib']:,.0f}")
            if args.markdown:
                print("| " + " | ".join(cells) + " |", flush=True)
            else:
                print(f"{cells[0]:<14}{cells[1]:>10}{cells[2]:>10}{cells[3]:>15}", flush=True)


if __name__ == "__main__":
    main()
