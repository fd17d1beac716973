"""``--option KEY=VALUE``: every session option settable from the command line, parsed by
its field's type; bad keys and values refused in one line (exit 2) before any work."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import typing
from pathlib import Path

import pytest
from cli_runner import run
from test_cli_errors import assert_refused, outputs

from popart_unwind.errors import OptionError
from popart_unwind.options import (
    SessionOptions,
    UnwindValuations,
    default_text,
    option_rows,
    option_types,
    parse_option_value,
    with_options,
)

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


@pytest.mark.parametrize("text, value", [("true", True), ("1", True), ("yes", True),
                                         ("ON", True), ("false", False), ("0", False),
                                         ("no", False), ("Off", False)])
def test_bools(text, value):
    assert parse_option_value("check_transform_conditions", text) is value


def test_ints_floats_strings_and_lists():
    assert parse_option_value("canonicalize_max_rewrites", "2_000") == 2000
    assert parse_option_value("unwind_valuations.matmul", "2.5") == 2.5
    assert parse_option_value("unwind_algorithm", "exact") == "exact"
    assert parse_option_value("pipeline", "InferShapes, Prune") == ("InferShapes", "Prune")


@pytest.mark.parametrize("key, text, expected", [
    ("check_transform_conditions", "maybe", "is a bool"),
    ("canonicalize_max_iterations", "1.5", "is an int"),
    ("canonicalize_max_iterations", "ten", "is an int"),
    ("unwind_valuations.bias", "nan", "is a float"),
    ("unwind_valuations.bias", "high", "is a float"),
    ("pipeline", " , ", "list of names"),
    ("unwind_algorithm", "", "needs a value"),
])
def test_bad_values_name_the_option(key, text, expected):
    with pytest.raises(OptionError, match=expected) as caught:
        parse_option_value(key, text)
    assert key in str(caught.value)


def test_a_misspelt_key_gets_the_closest_names():
    with pytest.raises(OptionError, match="did you mean unwind_algorithm"):
        parse_option_value("unwind_algoritm", "exact")
    with pytest.raises(OptionError, match=r"did you mean unwind_valuations\.matmul"):
        parse_option_value("unwind_valuations.matmull", "1")
    with pytest.raises(OptionError, match="options: pipeline, "):  # nothing close: all
        parse_option_value("zzz", "1")


def test_the_last_value_of_a_repeated_key_wins_and_nested_fields_keep_the_rest():
    chosen = with_options(SessionOptions(), ["unwind_algorithm=exact",
                                             "unwind_algorithm=greedy0",
                                             "unwind_valuations.bias=7",
                                             "enable_unwind_layouts=no"])
    assert chosen.unwind_algorithm == "greedy0"
    assert chosen.unwind_valuations == dataclasses.replace(UnwindValuations(), bias=7.0)
    assert chosen.enable_unwind_layouts is False
    assert with_options(SessionOptions(), []) == SessionOptions()


def test_every_field_is_a_key():
    types = option_types()
    hints = typing.get_type_hints(SessionOptions)
    for field in dataclasses.fields(SessionOptions):
        if dataclasses.is_dataclass(hints[field.name]):
            assert all(f"{field.name}.{inner.name}" in types
                       for inner in dataclasses.fields(hints[field.name]))
        else:
            assert field.name in types


def test_the_docs_list_exactly_the_keys():
    """docs/cli.md's table of session options: every key once, in the class's order, with
    its type and default, generated here from the options class (the message shows the
    rows the page should start with when they drift)."""
    section = PAGE.split("## Session options (`--option`)")[1].split("\n## ")[0]
    listed = re.findall(r"^\| `([\w.]+)` \| (\w+) \| `([^`]*)` \|", section, re.M)
    expected = [(key, kind.__name__, default_text(key))
                for key, kind in option_types().items()]
    rows = "\n".join(f"| `{k}` | {t} | `{d}` |" for k, t, d in expected)
    assert listed == expected, f"docs/cli.md should list:\n{rows}"


def test_an_option_reaches_the_planner(model_path, out_dir):
    plan = out_dir / "plan.json"
    status, _, err = run("plan", str(model_path), "--out", str(plan), "--tiles", "8",
                         "--quiet", "--baseline", "none", "--option",
                         "unwind_algorithm=exact", "--option", "unwind_algorithm=greedy0")
    assert (status, err) == (0, "")
    assert json.loads(plan.read_text())["planner"]["algorithm"] == "greedy0"


def test_the_available_memory_proportion_reaches_the_machine(model_path, out_dir):
    plan = out_dir / "plan.json"
    assert run("plan", str(model_path), "--out", str(plan), "--tiles", "8", "--quiet",
               "--option", "available_memory_proportion=0.25")[0] == 0
    assert json.loads(plan.read_text())["target"]["available_memory_proportion"] == 0.25


def _one_op_model(tmp_path, node, out_shape=(8, 8)):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [8, 16]),
                      helper.make_tensor_value_info("b", TensorProto.FLOAT, [16, 8])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, list(out_shape))])
    path = tmp_path / "one.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_a_per_op_memory_proportion_bounds_its_matmul(tmp_path, out_dir):
    """PopART's Builder writes ``__available_memory_proportion`` on an op; a matmul's is
    read (its plan records it), without a warning."""
    from onnx import helper

    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="mm",
                            __available_memory_proportion=0.3)
    plan = out_dir / "plan.json"
    status, _, err = run("plan", str(_one_op_model(tmp_path, node)), "--out", str(plan),
                         "--tiles", "8", "--quiet")
    assert status == 0 and "__available_memory_proportion" not in err
    [entry] = json.loads(plan.read_text())["ops"].values()  # ours, and PopART's beside it
    records = [entry["plan"], entry["popart"]["plan"]]
    assert all(r["available_memory_proportion"] == pytest.approx(0.3) for r in records)


def test_a_per_op_memory_proportion_elsewhere_is_said_to_be_unread(tmp_path, out_dir):
    from onnx import helper

    node = helper.make_node("Add", ["a", "a"], ["c"], name="add",
                            __available_memory_proportion=0.3)
    status, _, err = run("plan", str(_one_op_model(tmp_path, node, (8, 16))), "--out",
                         str(out_dir / "plan.json"), "--tiles", "8", "--quiet")
    assert status == 0
    assert "__available_memory_proportion" in err and "'add'" in err


def test_a_matmul_without_a_plan_says_its_proportion_is_unread(tmp_path, out_dir):
    """A product whose batch axes broadcast is no grouped matmul: the planner computes it
    without a plan, so its proportion bounds nothing, and the command says so."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"], name="bmm",
                          __available_memory_proportion=0.3)], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4, 8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 8, 4])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 4, 4])])
    path = tmp_path / "bmm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    status, _, err = run("plan", str(path), "--out", str(out_dir / "plan.json"),
                         "--tiles", "8", "--quiet")
    assert status == 0
    assert "__available_memory_proportion" in err and "'bmm'" in err


def test_algo_overrides_the_option(model_path, out_dir):
    plan = out_dir / "plan.json"
    assert run("plan", str(model_path), "--out", str(plan), "--tiles", "8", "--quiet",
               "--baseline", "none", "--option", "unwind_algorithm=greedy0",
               "--algo", "exact")[0] == 0
    assert json.loads(plan.read_text())["planner"]["algorithm"] == "exact"


@pytest.mark.parametrize("assignment, words", [
    ("unwind_algoritm=exact", ("unwind_algoritm", "did you mean unwind_algorithm")),
    ("check_transform_conditions=maybe", ("check_transform_conditions", "bool")),
    ("unwind_algorithm=fastest", ("unwind_algorithm", "fastest", "greedy0")),
    ("pipeline=InferShapes,Nope", ("pipeline", "Nope", "Canonicalize")),
    ("canonicalize_max_iterations", ("KEY=VALUE",)),
])
def test_bad_options_are_refused_in_one_line(model_path, out_dir, assignment, words):
    assert_refused(*run("plan", str(model_path), *outputs(out_dir), "--option", assignment),
                   out_dir, *words)


def test_demo_takes_options_too(out_dir):
    assert_refused(*run("demo", *outputs(out_dir), "--option", "no_such=1"), out_dir,
                   "no_such")
    out = io.StringIO()
    from popart_unwind.cli import main
    assert main(["demo", "--tiles", "16", "--quiet", "--option",
                 "unwind_algorithm=greedy0"], stdout=out) == 0


def test_plan_help_names_the_solver_sessions_use_by_default(capsys):
    from popart_unwind.options import SessionOptions

    assert run("plan", "--help")[0] == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse prints help itself
    assert f"(default: the session option, {SessionOptions().unwind_algorithm})" in shown


@pytest.mark.parametrize("popart, ours", [
    ("enableOutlining=true", {"enable_outlining": True}),
    ("autoRecomputation=Standard", {"recompute": "standard"}),
    ("autoRecomputation=RecomputationType.NormOnly", {"recompute": "norm_only"}),
    ("virtualGraphMode=Manual", {"virtual_graph_mode": "manual"}),
    ("decomposeGradSum=1", {"decompose_grad_sum": True}),
    ("availableMemoryProportion=0.3", {"available_memory_proportion": 0.3}),
    ("outlineThreshold=2.5", {"outline_threshold": 2.5}),
])
def test_popart_names_and_values_set_our_options(popart, ours):
    chosen = with_options(SessionOptions(), [popart])
    assert {key: getattr(chosen, key) for key in ours} == ours


@pytest.mark.parametrize("assignment, words", [
    ("autoRecomputation=Pipeline", "not taken"),
    ("virtualGraphMode=ExecutionPhases", "not taken"),
    ("autoRecomputation=Sometimes", "None, Standard, NormOnly, RecomputeAll"),
    ("enableOutlinin=true", "did you mean enableOutlining"),
])
def test_popart_values_we_do_not_take_are_refused(assignment, words):
    with pytest.raises(OptionError, match=words):
        with_options(SessionOptions(), [assignment])


def test_the_options_command_lists_every_option_with_popart_names():
    status, out, err = run("options")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["option", "PopART", "type", "default"]
    for key in option_types():
        assert any(line.split()[0] == key for line in lines[1:]), key
    recompute = next(line for line in lines if line.startswith("recompute "))
    assert "autoRecomputation" in recompute and "str" in recompute and "none" in recompute
    assert all(row[4] for row in option_rows()), "every option has its line"
