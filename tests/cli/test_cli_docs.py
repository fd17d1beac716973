"""docs/cli.md stays in step with the command: every option is documented, and the plan
file example has exactly the keys the command writes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from popart_unwind.cli import build_parser, main
from popart_unwind.report.plan_file import SUMMARY_KEYS, TENSOR_FIELDS

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def options(command: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {flag for action in sub._actions for flag in action.option_strings
            if flag.startswith("--") and flag != "--help"}


def test_every_option_is_documented():
    for command in ("plan", "demo"):
        for flag in options(command):
            assert f"`{flag}" in PAGE, flag


def test_plan_example_has_the_keys_the_command_writes(model_path, out_dir):
    example = json.loads(re.search(r"```json\n(.*?)```", PAGE, re.S).group(1))
    plan = out_dir / "plan.json"
    assert main(["plan", str(model_path), "--out", str(plan), "--tiles", "4", "--quiet",
                 "--baseline", "linear"], stdout=io.StringIO()) == 0
    written = json.loads(plan.read_text())
    assert set(example) == set(written)
    assert set(example["target"]) == set(written["target"])
    assert set(example["planner"]) == set(written["planner"])
    assert set(example["summary"]["linear"]) == set(SUMMARY_KEYS)
    assert set(example["tensors"]["w"]) == set(TENSOR_FIELDS)
    for field in ("shape", "dtype", "graph"):  # the page's tensor is the tests' weight
        assert example["tensors"]["w"][field] == written["tensors"]["w"][field]
