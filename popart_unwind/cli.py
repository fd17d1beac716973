"""The ``popart-unwind`` command: ``plan`` a model, run the ``demo``, print the version.

Errors from the library are typed (``popart_unwind.errors``); the command turns each (and
every unreadable input or unwritable output) into one line on stderr and exit status 2,
having written nothing: every output is staged under a temporary name and renamed into
place only when all of them are ready. docs/cli.md is the user's guide.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from popart_unwind.errors import ModelImportError, PopartUnwindError
from popart_unwind.report.terminal_text import printable
from popart_unwind.version import __version__

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
#: A run stopped by a signal exits with 128 + the signal's number (130 for SIGINT, 143 for
#: SIGTERM), as shells report it.
EXIT_SIGNAL_BASE = 128
DEFAULT_TILES = 1472


class UsageError(PopartUnwindError, ValueError):
    """The command line itself is wrong (unknown option, bad value)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit 2 like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


#: The most tiles ``--tiles`` accepts. Graphcore's IPUs have 1,216 (Mk1) or 1,472 (Mk2
#: GC200, Bow) tiles; the bound leaves room for what-if models ten times larger while the
#: per-tile vectors the cost model keeps for each live tensor stay small, instead of running
#: out of memory deep into planning (10**8 tiles: 3.9 GB and a MemoryError).
MAX_TILES_PER_IPU = 16_384


def _positive(option: str, text: str) -> int:
    """``text`` as a positive whole number, or the one-line usage error of ``option``."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{option} must be a positive integer, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    return _positive("--gradient-accumulation", text)


def _positive_float(text: str) -> float:
    """``text`` as a finite number > 0 (``--loss-scaling``)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"--loss-scaling must be a finite number > 0, got "
                                         f"{text!r}")
    return value


def _tiles(text: str) -> int:
    value = _positive("--tiles", text)
    if value > MAX_TILES_PER_IPU:
        raise argparse.ArgumentTypeError(
            f"--tiles must be at most {MAX_TILES_PER_IPU:,} (one IPU; a GC200 has 1,472), "
            f"got {value:,}")
    return value


def _ipus(text: str) -> int:
    from popart_unwind.report.session import MAX_IPUS

    value = _positive("--ipus", text)
    if value > MAX_IPUS:
        raise argparse.ArgumentTypeError(f"--ipus must be at most {MAX_IPUS:,} (a Bow "
                                         f"Pod1024), got {value:,}")
    return value


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D1,D2,...``: a graph input's name (it may itself hold '=') and its shape."""
    name, equals, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        shape = ()
    if not equals or not name or not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"--input-shape takes NAME=D1,D2,... with positive whole dimensions (e.g. "
            f"input_ids=1,128), got {text!r}")
    return name, shape


def _dim(text: str) -> tuple[str, int]:
    """``NAME=VALUE``: a symbolic dimension's name (an ONNX ``dim_param``) and its size."""
    name, equals, value = text.rpartition("=")
    try:
        size = int(value)
    except ValueError:
        size = 0
    if not equals or not name or size < 1:
        raise argparse.ArgumentTypeError(
            f"--dim takes NAME=VALUE with a positive whole size (e.g. batch=2), got {text!r}")
    return name, size


def _no_nul(option: str, text: str) -> str:
    """``text`` unless it holds a NUL byte, which no path can (the system calls would raise
    a bare ValueError)."""
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{option} {text!r} holds a NUL byte, which no path "
                                         f"can hold")
    return text


def _path(option: str) -> Any:
    def convert(text: str) -> Path:
        return Path(_no_nul(option, text))
    return convert


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="PLAN.json", type=_path("--out"),
                        help="write the plan (tile mappings, methods, summary) as JSON")
    parser.add_argument("--report", metavar="DIR", type=_path("--report"),
                        help="write an HTML report with pictures into this folder")
    parser.add_argument("--tiles", metavar="N", type=_tiles, default=DEFAULT_TILES,
                        help=f"tiles of the IPU Model (default {DEFAULT_TILES}, a GC200)")
    parser.add_argument("--ipus", metavar="N", type=_ipus, default=None,
                        help="IPUs of the machine, each of --tiles tiles (default: as many "
                             "as the model's placement names, else 1); a model without "
                             "placement is split by ours (the PopART baseline by "
                             "AutoVirtualGraph's)")
    parser.add_argument("--pipeline", action="store_true",
                        help="run the IPUs as a pipeline (stages, stashes; with --ipus 2 "
                             "or more, or a model placed on several IPUs)")
    parser.add_argument("--algo", metavar="NAME", default=None,
                        help="unwinding solver: " + ", ".join(_algorithms())
                        + f" (default: the session option, {_default_algorithm()})")
    parser.add_argument("--baseline", choices=("popart", "linear", "none"), default="popart",
                        help="compare with PopART's heuristic and linear mapping (popart, "
                             "the default), with linear mapping only, or with nothing")
    parser.add_argument("--option", metavar="KEY=VALUE", action="append", default=[],
                        dest="options",
                        help="set a session option (repeatable; the last value of a key "
                             "wins); docs/cli.md lists the keys")
    said = parser.add_mutually_exclusive_group()
    said.add_argument("--quiet", action="store_true",
                      help="no progress and no summary table (errors still go to stderr)")
    said.add_argument("--verbose", action="store_true",
                      help="also print every line the model's code and libraries printed, "
                           "logged or warned while it loaded (else summed up in one line)")


def _add_safety_options(parser: argparse.ArgumentParser, model_options: bool) -> None:
    """The options that lift a refusal, each for one thing only (docs/cli.md)."""
    parser.add_argument("--force", action="store_true",
                        help="replace an earlier report folder this tool made (nothing else)")
    if model_options:
        parser.add_argument("--allow-unknown-ops", action="store_true",
                            help="plan op types the tool does not know (misspelled, custom "
                                 "domains) as barriers, with a warning, instead of refusing "
                                 "the model")


def _algorithms() -> list[str]:
    from popart_unwind.unwind.solvers import SOLVERS

    return sorted(SOLVERS)


def _default_algorithm() -> str:
    """The solver a session uses unless told otherwise (what the plan file records)."""
    from popart_unwind.options import SessionOptions

    return SessionOptions().unwind_algorithm


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="popart-unwind",
        description="Plan tile layouts of producer-less tensors for tile-based accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"popart-unwind {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    plan = commands.add_parser("plan", help="plan the layouts of a model",
                               description="Plan the tile layouts of MODEL: an ONNX file, or "
                               "module:factory where factory() returns (torch module, "
                               "example_args).")
    plan.add_argument("model", metavar="MODEL", type=lambda text: _no_nul("MODEL", text),
                      help="model.onnx or module:factory")
    _add_common(plan)
    plan.add_argument("--training", action="store_true",
                      help="plan one training step (forward, backward, update): an ONNX "
                           "model's with --loss, as PopART builds it; a PyTorch model's with "
                           "its first output summed as the loss")
    plan.add_argument("--loss", metavar="nll|l1|TENSOR",
                      help="the loss of an ONNX model's training step: nll (softmax and "
                           "negative log-likelihood over the first output, against a labels "
                           "input it adds), l1 (the first output's absolute values summed) "
                           "or the name of a scalar tensor of the model")
    plan.add_argument("--optimizer", metavar="NAME",
                      help="the weight updates of a training step: sgd (the default, "
                           "PopART's ConstSGD), sgd_momentum, adam, adamw or lamb")
    plan.add_argument("--gradient-accumulation", metavar="N", type=_positive_int,
                      help="micro-batches each weight's gradient accumulator sums before "
                           "one update (PopART's accumulationFactor)")
    plan.add_argument("--loss-scaling", metavar="F", type=_positive_float,
                      help="the factor the loss's gradient starts from (PopART's "
                           "lossScaling)")
    plan.add_argument("--onnx-out", metavar="PATH", type=_path("--onnx-out"),
                      help="write a copy of the ONNX model with the plan in its metadata")
    plan.add_argument("--input-shape", metavar="NAME=D1,D2,...", type=_input_shape,
                      action="append", default=[], dest="input_shapes",
                      help="the shape of an ONNX graph input whose dimensions the model "
                           "leaves symbolic, e.g. input_ids=1,128 (repeatable)")
    plan.add_argument("--dim", metavar="NAME=VALUE", type=_dim, action="append", default=[],
                      dest="dims",
                      help="the size of a symbolic dimension (an ONNX dim_param such as "
                           "batch or sequence) in every graph input that has it, e.g. "
                           "sequence=128 (repeatable)")
    _add_safety_options(plan, model_options=True)
    demo = commands.add_parser("demo", help="plan the embedded example (no files needed)",
                               description="Plan one training step of a small GPT-2 (tied "
                               "LM head, shipped with the package) and show how it compares "
                               "with PopART's heuristic.")
    _add_common(demo)
    _add_safety_options(demo, model_options=False)
    commands.add_parser("options", help="list every session option (--option KEY=VALUE)",
                        description="Every session option --option takes: our name, "
                        "PopART's name where PopART has the option (taken too, with "
                        "PopART's values), its type, its default and what it does.")
    return parser


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Run the command; returns the exit status (0 success, 2 bad input).

    Warnings raised while it runs (by the tool or the libraries it drives) are held back:
    a failed run prints only its one error line; a run that succeeds then prints each
    warning as one ``popart-unwind: warning:`` line, leaving out the libraries' notices
    of their own deprecations, which are not the user's to act on."""
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = _main(argv, stdout, stderr)
    if status == EXIT_OK:
        _print_warnings(caught, stderr)
    return status


#: Warnings about a library's own future, not about the user's model or command.
LIBRARY_NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def _print_warnings(caught: list[warnings.WarningMessage], stderr: TextIO) -> None:
    from popart_unwind.errors import IgnoredAttributeWarning, OutputWarning, UnknownOpsWarning

    shown: set[str] = set()
    for warning in caught:
        ours = issubclass(warning.category,
                          UnknownOpsWarning | OutputWarning | IgnoredAttributeWarning)
        if not ours and issubclass(warning.category, LIBRARY_NOTICES):
            continue
        text = _one_line(warning.message)
        if not ours:
            module = Path(warning.filename).stem
            text = f"{text} ({warning.category.__name__} from {module})"
        if text not in shown:
            shown.add(text)
            print(f"popart-unwind: warning: {text}", file=stderr)


def _main(argv: Sequence[str] | None, stdout: TextIO, stderr: TextIO) -> int:
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help and --version
            return int(done.code or 0)
        if args.command is None:
            parser.print_help(stdout)
            return EXIT_OK
        if args.command == "options":
            _print_options(stdout)
            return EXIT_OK
        return _run(args, stdout, stderr)
    except (PopartUnwindError, OSError) as error:
        if args is not None and getattr(args, "verbose", False):  # what the model's code
            _say_library_output(args, stderr)  # said before it failed
        print(f"popart-unwind: error: {_one_line(error)}", file=stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("popart-unwind: error: ran out of memory while planning (the model is too "
              "large for this machine); nothing was written", file=stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("popart-unwind: interrupted; nothing was written", file=stderr)
        return EXIT_INTERRUPTED
    except BaseException as stop:
        from popart_unwind.report.interrupts import Terminated

        if not isinstance(stop, Terminated):
            raise
        print(f"popart-unwind: stopped by {stop}; nothing was written", file=stderr)
        return EXIT_SIGNAL_BASE + stop.signum


def _print_options(stdout: TextIO) -> None:
    """The session options as an aligned table, one line each."""
    from popart_unwind.options import option_rows

    rows = [("option", "PopART", "type", "default", "what it does"), *option_rows()]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)]
        stdout.write("  ".join([*cells, row[4]]).rstrip() + "\n")


def _one_line(error: BaseException) -> str:
    """The error as one line; an OSError the tool did not word itself says what failed and
    on which file, without Python's ``[Errno N]``."""
    if isinstance(error, OSError) and not isinstance(error, PopartUnwindError) \
            and error.strerror:
        files = [f for f in (error.filename, error.filename2) if f is not None]
        text = error.strerror + (f": {', '.join(map(str, files))}" if files else "")
    else:
        text = str(error)
    text = printable(" ".join(text.split()))  # a model's words never reach the terminal raw
    return text or type(error).__name__


def _run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from popart_unwind.machine import IpuModel
    from popart_unwind.report.model_input import is_factory

    started = time.perf_counter()
    if args.algo is not None and args.algo not in _algorithms():
        raise UsageError(f"unknown --algo {args.algo!r}; choose from {', '.join(_algorithms())}")
    model = IpuModel(tiles_per_ipu=args.tiles)
    args.options = [*args.options, *_training_assignments(args)]
    _check_options(args.options)
    onnx_out = getattr(args, "onnx_out", None)
    if onnx_out is not None and is_factory(args.model):
        raise UsageError("--onnx-out needs an ONNX model; MODEL is module:factory")
    run, title = _plan_safely(args, model, onnx_out, stderr)
    _say_library_output(args, stderr)
    if not args.quiet:
        from popart_unwind.report.summary import (
            ops_without_rule_line,
            print_summary,
            verdict,
        )

        sentence = verdict(run.summaries())
        if sentence is not None:
            _say(stdout, sentence)
        print_summary(run.summaries(), model.bytes_per_tile, stdout, title)
        _print_fullest_tile(run, model.bytes_per_tile, stdout)
        if run.memory_search is not None:
            _say(stdout, run.memory_search.line())
        if run.ops_without_rule:
            _say(stdout, ops_without_rule_line(run.ops_without_rule))
        written = [str(p) for p in (args.out, onnx_out, args.report) if p is not None]
        planning = run.plan.timings.get("total", 0.0)
        _say(stdout, f"{len(run.decisions)} tensors planned in {planning:.1f} s; import, "
                     f"transforms, baselines and costing included, the run took "
                     f"{time.perf_counter() - started:.1f} s"
                     + (f"; wrote {', '.join(written)}" if written else ""))
    return EXIT_OK


def _print_fullest_tile(run: Any, budget: int, stdout: TextIO) -> None:
    """Under the summary: on several IPUs, which layers each holds under our plan; then
    our plan's fullest tile and what fills it."""
    from popart_unwind.report.summary import fullest_tile_line, ipu_holdings_lines

    several = run.model.ipus > 1
    if several:
        for line in ipu_holdings_lines(run.weights_by_ipu(), run.model.ipus):
            _say(stdout, line)
    fullest = run.costs["ours"].fullest_tile
    if fullest is not None:
        _say(stdout, fullest_tile_line(fullest, budget,
                                       run.model.tiles_per_ipu if several else None))


def _say(stdout: TextIO, line: str) -> None:
    """One line of the summary, its tensor and op names (the model's words) escaped."""
    stdout.write(printable(line) + "\n")


def _plan_safely(args: argparse.Namespace, model: Any, onnx_out: Path | None,
                 stderr: TextIO) -> tuple[Any, str]:
    """Check every output before any work, plan, and move the outputs into place only when
    all of them are ready; an error or a signal (SIGTERM, SIGINT) leaves nothing behind."""
    from popart_unwind.report.atomic import OutputTransaction
    from popart_unwind.report.interrupts import signals_raise

    files, report = _output_targets(args, onnx_out)
    transaction = OutputTransaction(files, report)

    def stuck(signum: int) -> None:
        """The main thread is held in compiled code: end the run from here."""
        if not transaction.abandon():
            return  # the outputs are being moved into place: that finishes first
        print(f"popart-unwind: stopped by {signal.Signals(signum).name}; nothing was "
              f"written", file=stderr, flush=True)
        os._exit(EXIT_SIGNAL_BASE + signum)

    with signals_raise(stuck), transaction as outputs:
        run, title = _plan(args, model, onnx_out, outputs, stderr)
        outputs.commit()
    return run, title


def _output_targets(args: argparse.Namespace, onnx_out: Path | None) -> tuple[list, Any]:
    """The checked output targets (docs/cli.md, *What is refused*)."""
    from popart_unwind.report.model_input import input_files
    from popart_unwind.report.output_targets import check_outputs

    named = [(option, path) for option, path in (("--out", args.out), ("--onnx-out", onnx_out))
             if path is not None]
    if not named and args.report is None:
        return [], None
    inputs = [] if args.command == "demo" else input_files(args.model)
    return check_outputs(named, args.report, inputs, force=args.force)


def _plan(args: argparse.Namespace, model: Any, onnx_out: Path | None, outputs: Any,
          stderr: TextIO) -> tuple[Any, str]:
    """Every stage, then every output written into its temporary; returns the session's
    PlanRun and the title of the summary and report."""
    from popart_unwind.errors import OutputError
    from popart_unwind.report.demo_model import DEMO_TITLE
    from popart_unwind.report.onnx_annotate import annotated_bytes, load_for_annotation
    from popart_unwind.report.plan_file import build_plan_document, compact_plan, write_plan
    from popart_unwind.report.planning_memory import (
        check_planning_memory,
        return_freed_memory_if_large,
    )
    from popart_unwind.report.progress import StageProgress
    from popart_unwind.report.session import (
        cost_plans,
        placed_options,
        plan_ours,
        plan_session,
        transform,
    )

    demo = args.command == "demo"
    title = DEMO_TITLE if demo else f"popart-unwind plan {args.model}"
    with StageProgress(stderr, enabled=not args.quiet) as progress:
        with progress.stage("import"):
            ir = _import(args)  # an UnknownOpsWarning is printed when the run succeeds
            proto = None
            if onnx_out is not None:
                proto = load_for_annotation(Path(args.model), onnx_out)
            ir.options = session_options(ir.options, args.options)
            ir.options = placed_options(ir, args.ipus, args.pipeline)
        return_freed_memory_if_large(ir)
        # the model as imported, for the memory search: a copy instead of a second import
        imported = ir.copy(exact=True) if ir.options.memory_weight > 0 else None
        with progress.stage("transforms"):
            baseline_ir = transform(ir)
        check_planning_memory(ir)
        search = None
        if ir.options.memory_weight <= 0:
            run = plan_session(ir, model, args.algo, args.baseline, progress, baseline_ir)
        else:  # the baselines wait for the memory search: they plan the graph it keeps
            run = cost_plans(plan_ours(ir, model, args.algo, progress), "none", progress)
            if not run.costs["ours"].fits:
                from popart_unwind.report.memory_search import search_memory_settings

                def load() -> Any:
                    nonlocal imported
                    if imported is not None:
                        again, imported = imported, None
                        return again
                    again = _import(args)
                    again.options = session_options(again.options, args.options)
                    again.options = placed_options(again, args.ipus, args.pipeline)
                    return again

                with progress.stage("memory search"):
                    kept, search = search_memory_settings(load, run.costs["ours"], model,
                                                          transform, progress.update)
                if kept is not None:
                    run = plan_ours(kept[0], model, args.algo, progress)
                    baseline_ir = kept[1]
            # the search's workers forked already: the plans' walks run so too
            run = cost_plans(run, args.baseline, progress, baseline_ir,
                             side_by_side=search is not None)
        from popart_unwind.report.session import step_kind

        document = build_plan_document(run.model, run.decisions, run.summaries(),
                                       {**ir.metadata, "kind": step_kind(ir)},
                                       run.planner(), run.ops_without_rule, run.planned_ops)
        if search is not None:
            document["memory_search"] = search.entry()
        run.memory_search = search
        with progress.stage("report"):
            for target in outputs.files:
                if target.option == "--out":
                    outputs.put_written(target, lambda stream: write_plan(document, stream))
                elif proto is not None:
                    outputs.put(target, annotated_bytes(proto, compact_plan(document)))
            if args.report is not None:
                from popart_unwind.report.html import write_report

                # the page is titled by the model's file name, never its path
                page_title = title if demo else Path(str(args.model)).name
                try:
                    write_report(run, outputs.report_folder, page_title, progress.update)
                except OSError as error:  # a full disk names the option, not a temporary
                    raise OutputError(f"cannot write --report {args.report}: "
                                      f"{error.strerror or error}") from None
    return run, title


#: The training flags and the session options they set.
_TRAINING_FLAGS = (("loss", "--loss"), ("optimizer", "--optimizer"),
                   ("gradient_accumulation", "--gradient-accumulation"),
                   ("loss_scaling", "--loss-scaling"))


def _training_assignments(args: argparse.Namespace) -> list[str]:
    """The ``--option`` settings the training flags stand for, after checking they go
    together: each needs --training; an ONNX model's training step needs --loss, a PyTorch
    model's takes none (its loss is its first output, summed)."""
    from popart_unwind.report.model_input import is_factory

    if args.command != "plan":
        return []
    given = [(key, flag, getattr(args, key)) for key, flag in _TRAINING_FLAGS
             if getattr(args, key) is not None]
    if given and not args.training:
        raise UsageError(f"{given[0][1]} applies to a training step: add --training")
    if not args.training:
        return []
    factory = is_factory(args.model)
    if factory and args.loss is not None:
        raise UsageError("--loss applies to ONNX models; a PyTorch model's training step "
                         "takes its first output, summed, as the loss")
    if not factory and args.loss is None:
        raise UsageError("--training on an ONNX model needs --loss: nll, l1 or the name of "
                         "a scalar tensor the model computes")
    if args.optimizer is not None:
        from popart_unwind.options import OPTIMIZER_CHOICES

        if args.optimizer not in OPTIMIZER_CHOICES:
            raise UsageError(f"unknown --optimizer {args.optimizer!r}; choose from "
                             f"{', '.join(OPTIMIZER_CHOICES)}")
    return [f"{key}={value}" for key, _, value in given]


def _check_options(assignments: Sequence[str]) -> None:
    """Refuse a bad ``--option`` before any work (the model's own options are applied to
    after import, by :func:`session_options`)."""
    from popart_unwind.options import SessionOptions

    session_options(SessionOptions(), assignments)


def session_options(options: Any, assignments: Sequence[str]) -> Any:
    """``options`` with the ``--option KEY=VALUE`` settings applied, names validated as
    the session would (the solver and transform registries) before any work is done."""
    from popart_unwind.errors import OptionError
    from popart_unwind.options import with_options
    from popart_unwind.transforms import registry

    if not assignments:
        return options
    chosen = with_options(options, assignments)
    if chosen.unwind_algorithm not in _algorithms():
        raise OptionError(f"option unwind_algorithm: unknown solver "
                          f"{chosen.unwind_algorithm!r}; choose from {', '.join(_algorithms())}")
    known = registry.names()
    for name in chosen.pipeline:
        if name not in known:
            raise OptionError(f"option pipeline: unknown transform {name!r}; choose from "
                              f"{', '.join(known)}")
    return chosen


def _import(args: argparse.Namespace) -> Any:
    if args.command == "demo":
        from popart_unwind.report.demo_model import build_demo_ir

        return build_demo_ir()
    from popart_unwind.options import SessionOptions
    from popart_unwind.report.model_input import load_model
    from popart_unwind.training.optimizers import optimizer_of

    chosen = session_options(SessionOptions(), args.options)
    allow = args.allow_unknown_ops or chosen.allow_unknown_ops  # --option allow_unknown_ops
    # a PyTorch step's updates as an ONNX one's: --optimizer and the rest (sgd by default)
    optimizer = optimizer_of(chosen) if args.training else None
    shapes: dict[str, tuple[int, ...]] = {}
    for name, shape in args.input_shapes:
        if shapes.get(name, shape) != shape:
            raise ModelImportError(f"--input-shape gives input {name!r} two shapes, "
                                   f"{list(shapes[name])} and {list(shape)}")
        shapes[name] = shape
    dims: dict[str, int] = {}
    for name, size in args.dims:
        if dims.get(name, size) != size:
            raise ModelImportError(f"--dim gives dimension {name!r} two sizes, {dims[name]} "
                                   f"and {size}")
        dims[name] = size
    from popart_unwind.report.library_output import captured

    with captured() as args.library_output:
        return load_model(args.model, args.training, allow, shapes, dims, optimizer)


def _say_library_output(args: argparse.Namespace, stderr: TextIO) -> None:
    """What the model's code and libraries said while it loaded (``report/library_output``):
    nothing with --quiet, each line with --verbose, else one line."""
    output = getattr(args, "library_output", None)
    if output is None or args.quiet:
        return
    if args.verbose:
        for line in output.lines():
            print(f"popart-unwind: {printable(line)}", file=stderr)
        return
    summary = output.summary()
    if summary is not None:
        print(f"popart-unwind: note: {summary}", file=stderr)


def command() -> NoReturn:
    """The ``popart-unwind`` program: ``main`` on the process's arguments, then the end
    of the process. What the run made is frozen first (``gc.freeze``), its outputs
    written and closed by then, so that the interpreter's collections at exit do not walk
    it all once more (0.75 of the 9.7 CPU s of the tiny GPT-2 training step's memory
    search); ``main`` itself, which a caller may run within its own process, leaves the
    collector alone."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    command()
