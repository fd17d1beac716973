"""``--ipus``: a model placed by its ``__ipu_number`` attributes, or split by PopART's
AutoVirtualGraph, planned on several IPUs; one IPU exactly as without the flag."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

from popart_unwind.report.plan_file import validate_plan

TILES = 16
WIDTH = 16


def chain(path: Path, placement: list[int] | None, layers: int = 4) -> Path:
    """x -> (MatMul, Add bias, Relu) per layer, each node of layer k carrying
    ``__ipu_number = placement[k]`` when given."""
    nodes, weights, h = [], [], "x"
    for k in range(layers):
        weights += [nh.from_array(np.full((WIDTH, WIDTH), 0.1, np.float32), f"w{k}"),
                    nh.from_array(np.zeros(WIDTH, np.float32), f"b{k}")]
        placed = {"__ipu_number": placement[k]} if placement else {}
        nodes += [oh.make_node("MatMul", [h, f"w{k}"], [f"m{k}"], name=f"mm{k}", **placed),
                  oh.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"], name=f"add{k}", **placed),
                  oh.make_node("Relu", [f"a{k}"], [f"r{k}"], name=f"relu{k}", **placed)]
        h = f"r{k}"
    graph = oh.make_graph(nodes, "chain",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [8, WIDTH])],
                          [oh.make_tensor_value_info(h, TensorProto.FLOAT, [8, WIDTH])],
                          weights)
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), path)
    return path


def test_one_ipu_is_byte_identical_to_no_flag(tmp_path):
    model = chain(tmp_path / "plain.onnx", None)
    for name, extra in (("none.json", ()), ("one.json", ("--ipus", "1"))):
        status, _, err = run("plan", str(model), "--tiles", str(TILES), "--quiet",
                             "--out", str(tmp_path / name), *extra)
        assert (status, err) == (0, "")
    assert (tmp_path / "none.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def test_a_placed_model_is_planned_on_the_ipus_it_names(tmp_path):
    model = chain(tmp_path / "placed.onnx", [0, 0, 1, 1])
    status, out, err = run("plan", str(model), "--tiles", str(TILES), "--out",
                           str(tmp_path / "plan.json"), "--report", str(tmp_path / "report"))
    assert status == 0, err
    layer = 4 * (WIDTH * WIDTH + WIDTH)  # bytes of a layer's weight and bias
    assert f"IPU 0: w0 … b1 (4 weights, {2 * layer:,} B)" in out  # in the order read
    assert f"IPU 1: w2 … b3 (4 weights, {2 * layer:,} B)" in out
    assert "of IPU " in out  # the fullest tile named on its IPU
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<h3>IPUs</h3>" in page and "w2 … b3" in page.replace("<wbr>", "")
    document = json.loads((tmp_path / "plan.json").read_text())
    validate_plan(document)
    assert document["target"]["ipus"] == 2
    ipus = {key: entry["ipu"] for key, entry in document["tensors"].items()}
    assert ipus == {"x": 0, "w0": 0, "b0": 0, "w1": 0, "b1": 0, "w2": 1, "b2": 1, "w3": 1,
                    "b3": 1}
    for name in ("ours", "popart", "linear"):
        summary = document["summary"][name]
        assert summary["ipu_copy_bytes"] == 8 * WIDTH * 4
        assert len(summary["per_ipu"]) == 2
    assert "IPU 1 peak tile memory" in out and "IPU-copy bytes" in out


def test_an_unplaced_model_is_split_by_ours_and_the_baseline_by_popart(tmp_path):
    model = chain(tmp_path / "plain.onnx", None)
    status, _, err = run("plan", str(model), "--tiles", str(TILES), "--ipus", "4", "--quiet",
                         "--out", str(tmp_path / "plan.json"))
    assert status == 0, err
    document = json.loads((tmp_path / "plan.json").read_text())
    assert [document["tensors"][f"w{k}"]["ipu"] for k in range(4)] == [0, 1, 2, 3]
    for plan in ("ours", "popart"):
        assert document["summary"][plan]["ipu_copy_bytes"] == 3 * 8 * WIDTH * 4


def test_bad_ipu_counts_are_one_line_and_exit_2(tmp_path):
    placed = chain(tmp_path / "placed.onnx", [0, 0, 2, 2])
    plain = chain(tmp_path / "plain.onnx", None, layers=1)
    out = tmp_path / "plan.json"
    cases = [
        (("plan", str(plain), "--ipus", "0"), "--ipus must be a positive integer"),
        (("plan", str(placed), "--ipus", "2", "--out", str(out)),
         "op MatMul#"),
        (("plan", str(plain), "--ipus", "4", "--out", str(out)),
         "too few for 4 IPUs"),
    ]
    for argv, message in cases:
        status, _, err = run(*argv, "--tiles", str(TILES))
        assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    status, _, err = run("plan", str(placed), "--ipus", "2", "--tiles", str(TILES))
    assert "is placed on IPU 2 (__ipu_number), but the machine has 2 IPUs" in err


def test_a_split_plan_is_byte_identical_under_other_hash_seeds(tmp_path):
    model = chain(tmp_path / "plain.onnx", None)
    plans = []
    for seed in ("0", "4242"):
        out = tmp_path / f"plan{seed}.json"
        argv = ["plan", str(model), "--ipus", "4", "--tiles", str(TILES), "--quiet",
                "--out", str(out)]
        code = f"from popart_unwind.cli import main; raise SystemExit(main({argv!r}))"
        subprocess.run([sys.executable, "-P", "-c", code], check=True, timeout=300,
                       env=dict(os.environ, PYTHONHASHSEED=seed))
        plans.append(out.read_bytes())
    assert plans[0] == plans[1] and b'"per_ipu"' in plans[0]


def test_a_factory_places_its_model_by_blocks(tmp_path, monkeypatch):
    """``module:factory`` returning ``(module, args, blocks)``: PopTorch's BeginBlock."""
    pytest.importorskip("torch")
    (tmp_path / "blocked.py").write_text(
        "import torch\n\n\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(),\n"
        "                              torch.nn.Linear(16, 16), torch.nn.ReLU())\n"
        "    return net, (torch.randn(4, 16),), {'0': 0, '2': 1}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    status, out, err = run("plan", "blocked:make", "--tiles", str(TILES), "--out",
                           str(tmp_path / "plan.json"))
    assert status == 0, err
    document = json.loads((tmp_path / "plan.json").read_text())
    assert document["target"]["ipus"] == 2
    assert {key: entry["ipu"] for key, entry in document["tensors"].items()
            if key.endswith("weight")} == {"0.weight": 0, "2.weight": 1}
    assert "IPU 1: 2 (2 weights" in out


def test_the_sentence_says_apart_what_the_layouts_and_the_split_save(tmp_path):
    """On several IPUs the copies between them are the split's, not the layouts': the
    sentence gives the layouts' exchange and cycles on the IPUs (the step's cycles less the
    copies) apart from the split's copies and peak, each to the plan file's figure."""
    model = chain(tmp_path / "plain.onnx", None, layers=6)
    status, out, err = run("plan", str(model), "--tiles", str(TILES), "--ipus", "3",
                           "--out", str(tmp_path / "plan.json"),
                           "--report", str(tmp_path / "report"))
    assert status == 0, err
    summary = json.loads((tmp_path / "plan.json").read_text())["summary"]
    ours, popart = summary["ours"], summary["popart"]
    sentence = out.splitlines()[0]
    layouts, split = sentence.split("; its split between the IPUs ")
    assert layouts.startswith("Against PopART's heuristic on 3 IPUs, ours' layouts ")

    def said(part: str, difference: int, fewer: str, more: str, same: str) -> None:
        if difference == 0:
            assert same in part
        else:
            text = fewer if difference > 0 else more
            assert text.format(f"{abs(difference):,}") in part

    said(layouts, popart["exchange_bytes"] - ours["exchange_bytes"],
         "exchange {} fewer byte", "exchange {} more byte", "exchange bytes")
    on_ipus = {name: s["cycles"] - s["ipu_copy_cycles"] for name, s in summary.items()}
    said(layouts, on_ipus["popart"] - on_ipus["ours"], "take {} fewer cycle",
         "take {} more cycle", "cycles on the IPUs")
    said(split, popart["ipu_copy_bytes"] - ours["ipu_copy_bytes"], "copies {} fewer byte",
         "copies {} more byte", "IPU-copy bytes")
    said(split, popart["ipu_copy_cycles"] - ours["ipu_copy_cycles"],
         "takes {} fewer cycle", "takes {} more cycle", "copy cycles")
    said(split, popart["peak_tile_bytes"] - ours["peak_tile_bytes"], "peaks {} B lower",
         "peaks {} B higher", "peak tile memory")
    assert "IPU" not in sentence.split(" on 3 IPUs")[1].split(";")[0].replace(
        "on the IPUs", "")  # the layouts' part names no copy
    page = (tmp_path / "report" / "index.html").read_text()
    assert html.escape(sentence) in page
    # one IPU: the old sentence, without a split
    status, out, _ = run("plan", str(model), "--tiles", str(TILES))
    assert out.startswith("Against PopART's heuristic, ours ") and "split" not in out
