"""When our plan does not fit: the memory settings tried, and the one kept.

"Out of memory on tile N" is what stops IPU users, and what fixes it is usually one of
PopART's memory transforms. With ``SessionOptions.memory_weight`` above 0 and our plan's
peak tile memory over the tile's bytes, the session plans the model again with each
setting of ``MEMORY_SETTINGS`` on top of the user's options (recomputation, serialized
matmuls, both, plans starting where the last ended), costs our plan of each (cycles,
exchange and memory only: ``evaluate(..., explain=False)``), and keeps the one of least

    cycles + memory_weight × (peak tile bytes − bytes per tile, if positive)

the plan as given among them. The weight is what one byte over the budget is worth in
cycles: 0 turns the search off, a large one takes the fastest setting that fits when one
does. The PopART baseline is then planned on the graph kept, so the comparison stays like
for like. The search imports the model once more and costs one pipeline, plan and costing
of our plan per setting, the settings side by side in forked children, one per core
(``report/forked.py``: the transforms every setting runs first alike run once, before the
children part; where the system cannot fork, one after another, each imported afresh);
settings that need a loss (recomputation) are skipped for a graph without one, and a
setting the model cannot take (an error planning it) is recorded with its reason and
never kept.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Collection
from typing import Any

from popart_unwind.cost.walk import CostReport, evaluate
from popart_unwind.errors import PopartUnwindError
from popart_unwind.ir import Ir
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.options import SessionOptions, with_options
from popart_unwind.report import forked
from popart_unwind.report.session import leading_transforms, machine_for
from popart_unwind.transforms import registry

#: The session's transforms less the planner (``report.session.transform``): the graph
#: given, and the names of the transforms already run on it, to the graph the PopART
#: baseline plans.
Transform = Callable[[Ir, Collection[str]], Ir]

#: The settings tried, each a list of ``--option`` assignments, cheapest first as
#: measured on the benchmark models (benchmarks/RESULTS.md, memory_transforms).
MEMORY_SETTINGS: tuple[tuple[str, ...], ...] = (
    ("rotate_plan_start_tiles=true",),
    ("recompute=norm_only",),
    ("recompute=standard",),
    ("serialize_matmuls=output_channels:2",),
    ("serialize_matmuls=output_channels:4",),
    ("recompute=standard", "serialize_matmuls=output_channels:4"),
)
AS_GIVEN = "as given"
#: The transforms that read an option a setting sets (ExplicitRecompute ``recompute``,
#: SerializeMatMuls ``serialize_matmuls``; only the planner reads
#: ``rotate_plan_start_tiles``). The transforms every setting runs first, before any of
#: these, read none of the settings' options: a forked search runs them once, before the
#: settings part (``tests/report/test_memory_settings_read.py`` holds the package's
#: sources to it; ``tests/models/test_memory_search.py`` the forked search to the
#: sequential one, which runs each setting's whole pipeline).
SETTING_READERS = frozenset({"ExplicitRecompute", "SerializeMatMuls"})


@dataclasses.dataclass(frozen=True)
class Trial:
    """Our plan under one setting."""

    setting: str
    peak_tile_bytes: int
    cycles: int
    exchange_bytes: int
    fits: bool
    score: float
    #: Why the setting could not be planned ("" when it was): it is then never kept.
    failed: str = ""

    def entry(self) -> dict[str, Any]:
        entry = dataclasses.asdict(self)
        if not self.failed:
            del entry["failed"]
        else:
            entry["score"] = None  # JSON has no infinity
        return entry


@dataclasses.dataclass(frozen=True)
class MemorySearch:
    """The settings tried (the plan as given first) and the one kept."""

    weight: float
    bytes_per_tile: int
    trials: tuple[Trial, ...]
    kept: str

    def entry(self) -> dict[str, Any]:
        """The plan file's ``memory_search``."""
        return {"memory_weight": self.weight, "bytes_per_tile": self.bytes_per_tile,
                "kept": self.kept, "trials": [trial.entry() for trial in self.trials]}

    def line(self) -> str:
        """One line for the terminal summary."""
        first = self.trials[0]
        kept = next(trial for trial in self.trials if trial.setting == self.kept)
        over = first.peak_tile_bytes - self.bytes_per_tile
        text = (f"memory: as given, ours peaks {_kib(first.peak_tile_bytes)} of "
                f"{_kib(self.bytes_per_tile)} ({_kib(over)} over); "
                f"{len(self.trials) - 1} memory settings tried")
        if kept is first:
            return text + "; none is worth its cycles at memory_weight " \
                          f"{self.weight:g}, the plan is kept as given"
        fits = "fits" if kept.fits else \
            f"{_kib(kept.peak_tile_bytes - self.bytes_per_tile)} over"
        return (text + f"; kept {kept.setting}: {_kib(kept.peak_tile_bytes)} ({fits}), "
                f"{kept.cycles / first.cycles:.3f} × the cycles")


def _kib(count: int) -> str:
    return f"{count / 1024:,.1f} KiB"


def score(report: CostReport, weight: float, bytes_per_tile: int) -> float:
    """Cycles plus the weight times the bytes over the budget."""
    return report.cycles + weight * max(0, report.peak_tile_bytes - bytes_per_tile)


def search_memory_settings(load: Callable[[], Ir], first: CostReport, model: IpuModel,
                           transform: Transform,
                           progress: Callable[[str, int, int], None] | None = None,
                           parallel: bool = True
                           ) -> tuple[tuple[Ir, Ir] | None, MemorySearch]:
    """Plan the model under each setting; ``load`` imports it afresh (with the session's
    options, as the plan as given was imported) and ``first`` costs our plan as given.
    Returns the transformed graph of the setting kept with the graph its PopART baseline
    plans (``transform``'s two answers; None: the plan as given) and the search's
    record.

    With ``parallel`` (and where the system can fork) the model is imported once and the
    settings are planned side by side, each in a child process forked from the import
    (``report/forked.py``), as many at a time as this process has cores; the kept
    setting's graphs are then made again here from the same import. Otherwise each
    setting imports the model afresh, one after another. Both give the same trials
    (``tests/models/test_memory_search.py``)."""
    probe = load()
    options = probe.options
    weight, budget = options.memory_weight, model.bytes_per_tile
    settings = [s for s in MEMORY_SETTINGS
                if probe.final_loss_id is not None or not _needs_loss(s)]
    if parallel and forked.available() and len(settings) > 1:
        return _search_forked(probe, first, model, transform, settings, progress)
    trials = [_trial(AS_GIVEN, first, weight, budget)]
    best, best_graph = trials[0], None  # only the best graph so far is kept in memory
    for step, setting in enumerate(settings):
        name = ", ".join(setting)
        if progress is not None:
            progress(name, step, len(settings))
        ir = probe if step == 0 else load()
        probe = None
        try:
            trial, baseline = _plan_setting(ir, options, setting, model, transform)
        except PopartUnwindError as error:  # one setting the model cannot take
            trials.append(_failed(name, error))
            continue
        trials.append(trial)
        if trials[-1].score < best.score:  # the earliest among equals
            best, best_graph = trials[-1], (ir, baseline)
        del ir, baseline
    return best_graph, MemorySearch(weight, budget, tuple(trials), best.setting)


def _search_forked(ir: Ir, first: CostReport, model: IpuModel,
                   transform: Transform, settings: list[tuple[str, ...]],
                   progress: Callable[[str, int, int], None] | None
                   ) -> tuple[tuple[Ir, Ir] | None, MemorySearch]:
    """``search_memory_settings`` with each setting planned in a child forked from ``ir``
    (imported, then given here only the transforms every setting runs first alike,
    ``shared_transforms``, until the search has ended)."""
    options = ir.options
    weight, budget = options.memory_weight, model.bytes_per_tile

    shared = shared_transforms(options, settings)
    registry.run_pipeline(ir, shared)  # what every setting runs first, run once

    def job(setting: tuple[str, ...]) -> Callable[[], Trial]:
        def plan() -> Trial:
            try:
                return _plan_setting(ir, options, setting, model, transform, shared)[0]
            except PopartUnwindError as error:  # one setting the model cannot take
                return _failed(", ".join(setting), error)
        return plan

    def started(index: int, done: int) -> None:
        if progress is not None:
            progress(", ".join(settings[index]), done, len(settings))

    trials = [_trial(AS_GIVEN, first, weight, budget)]
    best = trials[0]
    kept: tuple[str, ...] | None = None
    answers = forked.run_forked([job(s) for s in settings], forked.usable_cores(), started)
    for setting, (trial, raised) in zip(settings, answers, strict=True):
        forked.raise_again(raised)  # as if raised here, in the settings' order
        trials.append(trial)
        if trial.score < best.score:  # the earliest among equals
            best, kept = trial, setting
    search = MemorySearch(weight, budget, tuple(trials), best.setting)
    if kept is None:
        return None, search
    with warnings.catch_warnings():  # raised already, by the child that planned it
        warnings.simplefilter("ignore")
        ir.options = with_options(options, kept)
        baseline = transform(ir, shared)
    return (ir, baseline), search


def shared_transforms(options: SessionOptions, settings: list[tuple[str, ...]]) -> list[str]:
    """The transforms every setting's pipeline runs first, alike, before any transform
    that reads a setting's option (``SETTING_READERS``): run on the model as imported,
    they give each setting the same graph."""
    pipelines = [leading_transforms(with_options(options, s)) for s in settings]
    shared = []
    for position, name in enumerate(leading_transforms(options)):
        if name in SETTING_READERS or any(
                pipeline[position:position + 1] != [name] for pipeline in pipelines):
            break
        shared.append(name)
    return shared


def _plan_setting(ir: Ir, options: SessionOptions, setting: tuple[str, ...], model: IpuModel,
                  transform: Transform, done: Collection[str] = ()) -> tuple[Trial, Ir]:
    """Our plan of ``ir`` (imported, and transformed by ``done`` only) under ``setting`` on
    top of ``options``, costed: its trial and the graph its PopART baseline would plan."""
    from popart_unwind.transforms.unwind_layouts import plan_ir

    ir.options = with_options(options, setting)
    baseline = transform(ir, done)
    target = TileTarget(machine_for(ir, model))
    plan = plan_ir(ir, target, write=False)
    report = evaluate(ir, target, mappings={(p.graph_id, p.tensor_id): p.tiles
                                            for p in plan.tensors},
                      op_plans=plan.op_plans, explain=False)
    weight, budget = options.memory_weight, model.bytes_per_tile
    return _trial(", ".join(setting), report, weight, budget), baseline


def _failed(name: str, error: PopartUnwindError) -> Trial:
    return Trial(name, 0, 0, 0, False, float("inf"), str(error))


def _needs_loss(setting: tuple[str, ...]) -> bool:
    return any(assignment.startswith("recompute=") for assignment in setting)


def _trial(setting: str, report: CostReport, weight: float, budget: int) -> Trial:
    return Trial(setting, int(report.peak_tile_bytes), int(report.cycles),
                 int(report.exchange_bytes), bool(report.fits), score(report, weight, budget))
