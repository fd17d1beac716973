"""PopART's names for the session options it shares with ours, and one line on every option.

A user of PopART knows ``enableOutlining`` and ``autoRecomputation=Standard``; the command
takes those names and values beside ours (``--option``), and ``popart-unwind options``
prints every option with both names. The lines here are the options' short help; the
options class (``options.py``) keeps the long account of each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from popart_unwind.errors import OptionError


@dataclasses.dataclass(frozen=True)
class PopartName:
    """One PopART option and ours: its ``popart`` name, our ``ours`` key, and, for an
    enumeration, PopART's values by ours (None: the value is read as ours is)."""

    popart: str
    ours: str
    values: Mapping[str, str] | None = None
    #: PopART values we do not model, with why.
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)


POPART_NAMES: tuple[PopartName, ...] = (
    PopartName("enableOutlining", "enable_outlining"),
    PopartName("outlineThreshold", "outline_threshold"),
    PopartName("autoRecomputation", "recompute",
               {"None": "none", "Standard": "standard", "NormOnly": "norm_only",
                "RecomputeAll": "recompute_all"},
               {"Pipeline": "pipelined recomputation is PopART's own to its pipeline "
                            "schedule; use enablePipelining with Standard"}),
    PopartName("decomposeGradSum", "decompose_grad_sum"),
    PopartName("virtualGraphMode", "virtual_graph_mode",
               {"Off": "off", "Manual": "manual", "Auto": "auto"},
               {"ExecutionPhases": "execution phases are not modelled"}),
    PopartName("enablePipelining", "enable_pipelining"),
    PopartName("virtualGraphSplitRatios", "virtual_graph_split_ratios"),
    # A matmul and convolution option in PopART (its session's matmulOptions and
    # convolutionOptions pass it to Poplibs), taken here as a session option.
    PopartName("availableMemoryProportion", "available_memory_proportion"),
    PopartName("accumulationFactor", "gradient_accumulation"),
)
_BY_POPART = MappingProxyType({name.popart: name for name in POPART_NAMES})
_BY_OURS = MappingProxyType({name.ours: name for name in POPART_NAMES})

#: One line on each option, by our key.
OPTION_LINES: Mapping[str, str] = MappingProxyType({
    "pipeline": "transforms to run, in order, each once",
    "enable_unwind_layouts": "whether the pipeline ends with the layout planner",
    "unwind_algorithm": "the unwinding solver: greedy0, deferral, restarts, hybrid or exact",
    "unwind_valuations.matmul": "what an element laid out as a matmul operand wants is worth",
    "unwind_valuations.elementwise": "what an elementwise partner's agreeing element is worth",
    "unwind_valuations.bias": "what a bias element beside its output channel is worth",
    "unwind_valuations.call_copy": "what a subgraph copy's agreeing element is worth",
    "unwind_valuations.sliceable": "what an embedding table's sliceable layout is worth",
    "unwind_valuations.scatter_data": "what a scatter's data element beside its output is worth",
    "balance_tile_memory": "spread small layouts over lightly used tiles (same exchange)",
    "spread_statistics_partners": "lay running statistics on lightly used tiles, not with "
                                  "the batch's from tile 0",
    "matmul_plans": "how layers' matmuls are planned: with_layouts, poplibs or alone",
    "rotate_plan_start_tiles": "start each matmul plan where the previous one ended",
    "recompute": "forward ops computed again in the backward pass: none, standard, "
                 "norm_only, recompute_all",
    "memory_weight": "cycles one byte over a tile is worth; > 0 searches PopART's memory "
                     "settings",
    "decompose_grad_sum": "sum a gradient's partials as each exists",
    "serialize_matmuls": "serialize every matmul: <mode>:<factor>, or empty",
    "enable_outlining": "call one subgraph wherever a sequence of ops repeats",
    "outline_threshold": "how much a repeated sequence must be worth to be outlined",
    "virtual_graph_mode": "how ops are placed on IPUs: off, manual or auto",
    "ipus": "IPUs of the machine",
    "virtual_graph_split_ratios": "under auto, each IPU's share of the split",
    "auto_split": "under auto, whose split: memory (ours) or popart",
    "enable_pipelining": "run the IPUs as a pipeline",
    "available_memory_proportion": "share of a tile's memory a matmul plan may use for "
                                   "temporary data (Poplibs', 0 to 1)",
    "loss": "make the model a training step with this loss: nll, l1 or a scalar tensor's "
            "name; empty: as it is",
    "optimizer": "a training step's updates: sgd, sgd_momentum, adam, adamw or lamb",
    "learning_rate": "the optimizer's learning rate",
    "gradient_accumulation": "micro-batches each weight's accumulator sums before an update",
    "loss_scaling": "the factor the loss's gradient starts from (PopART's lossScaling)",
    "canonicalize_max_iterations": "the canonicalizer's cap on passes",
    "canonicalize_max_rewrites": "the canonicalizer's cap on rewrites",
    "canonicalize_test_convergence": "refuse a canonicalization that reaches its cap",
    "check_transform_conditions": "check each transform's assumptions and guarantees",
    "allow_unknown_ops": "import unknown op types as opaque barriers, with a warning",
})


def popart_name(ours: str) -> str | None:
    """PopART's name for our option ``ours``, or None when PopART has none."""
    entry = _BY_OURS.get(ours)
    return entry.popart if entry is not None else None


def popart_names() -> tuple[str, ...]:
    return tuple(_BY_POPART)


def from_popart(key: str, text: str) -> tuple[str, str]:
    """``(key, text)`` in our terms: a PopART name and value become ours; anything else is
    returned as it came. PopART's enumeration values are read as PopART writes them (any
    case, with or without the type's name: ``RecomputationType.Standard``)."""
    entry = _BY_POPART.get(key)
    if entry is None:
        return key, text
    if entry.values is None:
        return entry.ours, text
    value = text.strip().rpartition(".")[2]
    by_lower = {popart.lower(): ours for popart, ours in entry.values.items()}
    if value.lower() in by_lower:
        return entry.ours, by_lower[value.lower()]
    refused = {popart.lower(): why for popart, why in entry.refused.items()}
    if value.lower() in refused:
        raise OptionError(f"option {key}={text} is not taken: {refused[value.lower()]}")
    raise OptionError(f"option {key} takes PopART's values {', '.join(entry.values)}; got "
                      f"{text!r}")
