"""A corpus of bad inputs, as a new user would try them: bad models of every kind, output
paths that would destroy something, bad options. Each must exit 2 with exactly one line on
stderr, no traceback, and leave the folder exactly as it was (every entry, hidden ones
included, with the same content)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bad_inputs import BAD_MODEL_FILES, snapshot
from cli_runner import run

#: Output options each bad model is tried with: none of them may appear.
OUTPUT_SETS = {
    "out": ("--out", "out/plan.json"),
    "all": ("--out", "out/plan.json", "--report", "out/report", "--onnx-out",
            "out/annotated.onnx"),
    "report-quiet": ("--report", "out/report", "--quiet"),
}




def assert_refused(root: Path, argv: tuple[str, ...], *words: str) -> str:
    """Run ``argv``; check the refusal and that ``root`` is unchanged; return the line."""
    before = snapshot(root)
    status, out, err = run(*argv)
    assert status == 2, (status, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("popart-unwind: error: "), err
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0x202A <= ord(c) <= 0x202E
                   for c in lines[0]), lines[0]  # a model's words reach the terminal escaped
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert snapshot(root) == before
    return lines[0]


@pytest.mark.parametrize("outputs", sorted(OUTPUT_SETS))
@pytest.mark.parametrize("case", sorted(BAD_MODEL_FILES))
def test_bad_models_are_refused_and_nothing_is_written(world, case, outputs):
    make, word = BAD_MODEL_FILES[case]
    model = make(world)
    assert_refused(world, ("plan", str(model), "--tiles", "8", *OUTPUT_SETS[outputs]), word)


#: name -> (arguments after ``plan model/linear.onnx --tiles 8``, words of the error)
BAD_OUTPUTS = {
    "out-is-the-model": (("--out", "model/linear.onnx"), "input model"),
    "out-is-the-model-by-dots": (("--out", "model/../model/linear.onnx"), "input model"),
    "out-is-the-model-by-absolute-path": (("--out", "{root}/model/linear.onnx"),
                                          "input model"),
    "out-is-a-symlink-to-the-model": (("--out", "link.onnx"), "input model"),
    "out-is-a-hard-link-to-the-model": (("--out", "hard.onnx"), "input model"),
    "onnx-out-is-the-model": (("--onnx-out", "model/linear.onnx"), "input model"),
    "onnx-out-is-a-hard-link-to-the-model": (("--onnx-out", "hard.onnx"), "input model"),
    "out-is-a-folder": (("--out", "out"), "is a folder"),
    "out-is-dev-null": (("--out", "/dev/null"), "character device"),
    "out-is-a-fifo": (("--out", "fifo"), "FIFO"),
    "out-is-a-symlink-loop": (("--out", "loop"), "symbolic link loop"),
    "out-in-a-missing-folder": (("--out", "nowhere/plan.json"), "does not exist"),
    "out-through-a-file": (("--out", "file.txt/plan.json"), "not a folder"),
    "out-in-an-unwritable-folder": (("--out", "/proc/self/plan.json"), "/proc/self"),
    "out-is-empty": (("--out", ""), "--out"),
    "out-and-onnx-out-are-one-file": (("--out", "out/a.json", "--onnx-out", "out/a.json"),
                                      "same file"),
    "out-and-onnx-out-are-hard-links": (("--out", "existing.json", "--onnx-out",
                                         "existing-hard.json"), "same file"),
    "report-is-a-foreign-folder": (("--report", "notes"), "did not make"),
    "report-is-a-foreign-folder-even-with-force": (("--report", "notes", "--force"),
                                                   "did not make"),
    "report-is-an-earlier-report-without-force": (("--report", "old_report"), "--force"),
    "report-holds-a-users-file": (("--report", "spoiled_report", "--force"), "notes.txt"),
    "report-is-the-current-folder": (("--report", "."), "current folder"),
    "report-is-the-current-folder-by-path": (("--report", "{root}"), "current folder"),
    "report-holds-the-current-folder": (("--report", ".."), "current folder"),
    "report-is-the-root": (("--report", "/"), "current folder"),
    "report-holds-the-model": (("--report", "model"), "input model"),
    "report-is-a-file": (("--report", "file.txt"), "not a folder"),
    "report-is-dev-null": (("--report", "/dev/null"), "character device"),
    "report-is-a-fifo": (("--report", "fifo"), "FIFO"),
    "report-is-a-symlink-loop": (("--report", "loop"), "symbolic link loop"),
    "report-in-a-missing-folder": (("--report", "nowhere/report"), "does not exist"),
    "report-is-empty": (("--report", ""), "--report"),
    "out-in-a-subfolder-of-the-report": (("--report", "out/r", "--out", "out/r/sub/p.json"),
                                         "subfolder"),
    "out-is-the-report-folder": (("--report", "out/r", "--out", "out/r"), "--report folder"),
    "out-is-the-report-marker": (("--report", "out/r", "--out",
                                  "out/r/.popart-unwind-report"), "marker"),
    "report-in-an-unwritable-folder": (("--report", "/proc/self/report"), "/proc/self"),
    "out-holds-a-nul-byte": (("--out", "out/plan\0.json"), "--out"),
    "onnx-out-holds-a-nul-byte": (("--onnx-out", "out/a\0.onnx"), "--onnx-out"),
    "report-holds-a-nul-byte": (("--report", "out/r\0"), "--report"),
    "out-name-too-long": (("--out", "out/" + "p" * 300), "--out"),
    "report-name-too-long": (("--report", "r" * 300), "--report"),
}


@pytest.mark.parametrize("case", sorted(BAD_OUTPUTS))
def test_bad_output_paths_are_refused_before_any_work(world, case):
    arguments, word = BAD_OUTPUTS[case]
    arguments = tuple(a.format(root=world) for a in arguments)
    assert_refused(world, ("plan", "model/linear.onnx", "--tiles", "8", *arguments), word)


@pytest.mark.parametrize("arguments,word", [
    (("--out", "/dev/null"), "character device"),
    (("--report", "notes"), "did not make"),
    (("--report", "old_report"), "--force"),
    (("--report", "."), "current folder"),
    (("--out", "out"), "is a folder"),
], ids=["dev-null", "foreign-report", "earlier-report", "current-folder", "out-folder"])
def test_bad_demo_outputs_are_refused(world, arguments, word):
    assert_refused(world, ("demo", "--tiles", "8", *arguments), word)


#: name -> (arguments after ``plan``, words of the error)
BAD_OPTIONS = {
    "tiles-0": (("model/linear.onnx", "--tiles", "0"), "--tiles"),
    "tiles-negative": (("model/linear.onnx", "--tiles", "-1"), "--tiles"),
    "tiles-words": (("model/linear.onnx", "--tiles", "many"), "--tiles"),
    "tiles-fraction": (("model/linear.onnx", "--tiles", "1.5"), "--tiles"),
    "tiles-above-the-bound": (("model/linear.onnx", "--tiles", "16385"), "at most 16,384"),
    "tiles-huge": (("model/linear.onnx", "--tiles", "100000000"), "at most 16,384"),
    "tiles-empty": (("model/linear.onnx", "--tiles", ""), "--tiles"),
    "tiles-missing-value": (("model/linear.onnx", "--tiles"), "--tiles"),
    "unknown-algo": (("model/linear.onnx", "--algo", "magic"), "magic"),
    "unknown-baseline": (("model/linear.onnx", "--baseline", "best"), "--baseline"),
    "unknown-option": (("model/linear.onnx", "--colour"), "--colour"),
    "misspelled-option": (("model/linear.onnx", "--allow-unkown-ops"), "--allow-unkown-ops"),
    "no-model": ((), "MODEL"),
    "out-without-value": (("model/linear.onnx", "--out"), "--out"),
    "force-with-a-value": (("model/linear.onnx", "--force=yes"), "--force"),
    "training-with-onnx": (("model/linear.onnx", "--training", "--out", "out/p.json"),
                           "--training"),
    "two-models": (("model/linear.onnx", "model/linear.onnx"), "unrecognized"),
    "onnx-out-with-a-factory": (("some_module:make", "--onnx-out", "out/a.onnx"),
                                "--onnx-out"),
    "missing-factory-module": (("no_such_module_here:make", "--out", "out/p.json"),
                               "no_such_module_here"),
    "ipus-beyond-any-machine": (("model/linear.onnx", "--ipus", "1025"), "at most 1,024"),
    "ipus-option-beyond-any-machine": (("model/linear.onnx", "--option", "ipus=5000",
                                        "--option", "virtual_graph_mode=auto",
                                        "--out", "out/p.json"), "5,000 IPUs"),
    "model-path-holds-a-nul-byte": (("model/linear\0.onnx", "--out", "out/p.json"), "NUL"),
    "factory-is-sys-exit": (("sys:exit", "--out", "out/p.json"), "sys.exit"),
    "factory-calls-sys-exit": (("factories:exits", "--out", "out/p.json"), "sys.exit(0)"),
    "factory-raises": (("factories:fails", "--out", "out/p.json"), "broken"),
    "factory-module-exits-on-import": (("exits_on_import:make", "--out", "out/p.json"),
                                       "sys.exit(3)"),
    "versions-stay-refused-with-allow-unknown-ops": (
        ("{opset999}", "--allow-unknown-ops", "--out", "out/p.json"), "opset 999"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options_are_refused(world, case):
    arguments, word = BAD_OPTIONS[case]
    if "{opset999}" in arguments:
        model = BAD_MODEL_FILES["opset-999"][0](world)
        arguments = tuple(str(model) if a == "{opset999}" else a for a in arguments)
    assert_refused(world, ("plan", *arguments, "--tiles", "8")
                   if "--tiles" not in arguments else ("plan", *arguments), word)


@pytest.mark.parametrize("arguments,word", [
    (("bogus-command",), "bogus-command"),
    (("demo", "--allow-unknown-ops"), "--allow-unknown-ops"),
    (("demo", "--tiles", "0"), "--tiles"),
    (("demo", "model/linear.onnx"), "unrecognized"),
], ids=["unknown-command", "demo-has-no-model-options", "demo-tiles-0", "demo-with-a-model"])
def test_bad_commands_are_refused(world, arguments, word):
    assert_refused(world, arguments, word)


def test_the_corpus_is_large():
    cases = (len(BAD_MODEL_FILES) * len(OUTPUT_SETS) + len(BAD_OUTPUTS) + len(BAD_OPTIONS)
             + 5 + 4)
    assert cases >= 100


def test_relative_and_absolute_spellings_of_the_model_are_one_input(world):
    """The input check compares resolved paths: an absolute --out names the model too."""
    line = assert_refused(world, ("plan", str(world / "model" / "linear.onnx"), "--tiles",
                                  "8", "--out", os.path.relpath(world / "hard.onnx")),
                          "input model")
    assert "hard.onnx" in line
