"""Session options: which transforms run, and how layouts are unwound.

Modelled on PopART's ``SessionOptions`` (one flat object of settings handed to the session,
each with a default); docs/transforms.md says field by field which PopART setting each one
corresponds to and which are ours alone.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Iterable
from typing import Any

from popart_unwind.errors import OptionError
from popart_unwind.option_names import OPTION_LINES, from_popart, popart_name, popart_names
from popart_unwind.validation import check_proportion

#: The transform pipeline, in order (each transform is applied once).
#: The optimizers of a training step's updates (``popart_unwind.training.optimizers``).
OPTIMIZER_CHOICES = ("sgd", "sgd_momentum", "adam", "adamw", "lamb")

DEFAULT_PIPELINE: tuple[str, ...] = ("InferShapes", "Canonicalize", "Prune", "MergeDuplicateOps",
                                     "SerializeMatMuls")


@dataclasses.dataclass(frozen=True)
class UnwindValuations:
    """Values of the ValuedPairs the planner builds (the v's of poprithms' unwinding notes),
    per kind of agreement.

    Defaults rank what costs most on the IPU when missed: a matmul operand in the wrong
    layout is rearranged by exchange before every use; elementwise partners disagreeing
    cost one copy; a bias off its channel's tiles costs a broadcast exchange.
    """

    matmul: float = 10.0
    elementwise: float = 1.0
    bias: float = 2.0
    call_copy: float = 1.0
    sliceable: float = 4.0
    #: the zeros a scatter fills against the sliceable layout: below ``elementwise``, so
    #: that it decides only where no reader ties them
    scatter_data: float = 0.5


#: The values of ``SessionOptions.matmul_plans``.
MATMUL_PLAN_CHOICES = ("with_layouts", "poplibs", "alone")

#: The modes of ``SessionOptions.serialize_matmuls`` (PopART's serialization modes).
SERIALIZE_MODES = ("input_channels", "output_channels", "reducing_dim")


def parse_serialization(text: str) -> tuple[str, int] | None:
    """``"<mode>:<factor>"`` as (mode, factor); ``""`` (serialize nothing) as None."""
    if not text:
        return None
    mode, colon, factor = text.partition(":")
    if not colon or mode not in SERIALIZE_MODES or not factor.strip().isdigit() \
            or int(factor) < 1:
        raise OptionError(f"option serialize_matmuls must be \"\" or \"<mode>:<factor>\" "
                          f"with mode one of {', '.join(SERIALIZE_MODES)} and a factor of "
                          f"1 or more; got {text!r}")
    return mode, int(factor)


#: The values of ``SessionOptions.virtual_graph_mode`` (PopART's ``VirtualGraphMode``, less
#: its execution phases).
VIRTUAL_GRAPH_MODES = ("off", "manual", "auto")

#: The values of ``SessionOptions.auto_split``: ours, or PopART's AutoVirtualGraph.
AUTO_SPLITS = ("memory", "popart")

#: The values of ``SessionOptions.recompute`` (PopART's ``RecomputationType``).
RECOMPUTE_CHOICES = ("none", "standard", "norm_only", "recompute_all")


#: Poplibs' default share of a tile's memory a matmul or convolution plan may use for
#: temporary data (``availableMemoryProportion``, lib/poplin/ConvOptions.hpp), which the IPU
#: Model takes too.
AVAILABLE_MEMORY_PROPORTION = 0.6


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """Settings of one planning session (PopART: ``popart.SessionOptions``)."""

    #: Transforms to run, in order, each once (PopART fixes the order in ``Ir::prepare``
    #: and switches transforms on with flags; here the order itself is the setting).
    #: ``UnwindLayouts`` is appended when ``enable_unwind_layouts`` is set.
    pipeline: tuple[str, ...] = DEFAULT_PIPELINE
    #: Run the layout planner (a flag in the manner of PopART's ``enableOutlining``).
    enable_unwind_layouts: bool = True
    #: The unwind solver: ``greedy0``, ``deferral``, ``restarts``, ``hybrid`` (default) or
    #: ``exact``.
    unwind_algorithm: str = "hybrid"
    unwind_valuations: UnwindValuations = UnwindValuations()
    #: Spread small layouts over lightly used tiles when the plan is realized (ours alone;
    #: docs/planner.md, "Tile memory"): the elements of a broadcast operand (a bias, a
    #: norm's scale) read by the same tiles are spread over those tiles in runs, the least
    #: loaded first, instead of each going to the lowest tile reading it most; a lookup's
    #: indices that nothing else lays out go to the least loaded tiles of their IPU. Every
    #: reader receives an element once, so each op reading it exchanges the same bytes;
    #: the solution's score is unchanged. Off, each element lies on a tile reading it
    #: most, and indices from tile 0 (Poplibs' rules).
    balance_tile_memory: bool = True
    #: Lay a producer-less tensor that only statistics lay out (a batch norm's running mean
    #: and variance, tied to the batch's, which Poplibs maps from tile 0) on the least
    #: loaded tiles instead (ours alone; docs/planner.md, "Running statistics"): every
    #: layer's running statistics no longer stack on the lowest tiles for the whole
    #: program, and their update receives the batch's statistics once per step. Off, they
    #: lie where the batch's statistics lie.
    spread_statistics_partners: bool = True
    #: How the matmuls of a training step's fully connected layers, and its convolution
    #: layers, are planned (docs/planner.md, "Matmul plans"): ``with_layouts`` (default)
    #: weighs a joint plan of the layer's passes against separate ones on the passes'
    #: cycles plus the rearrangements their layouts leave, never taking one that receives
    #: more bytes than Poplibs' plans of the layer; ``poplibs`` chooses as Poplibs
    #: does with ``fullyConnectedPass`` (what the PopART baseline does; convolutions
    #: alone); ``alone`` plans every matmul and convolution by itself (Poplibs without the
    #: option).
    matmul_plans: str = "with_layouts"
    #: Start each matmul and convolution plan where the previous one's tiles ended
    #: (docs/planner.md, "Plan start tiles") instead of at tile 0, as Poplibs does without
    #: dithering: the plans that use few tiles, and what is laid out where they lie, no
    #: longer stack on the lowest tiles.
    rotate_plan_start_tiles: bool = False
    #: Which forward ops of a training step are computed again in the backward pass
    #: instead of keeping their results live (PopART's ``autoRecomputation`` with
    #: ``explicitRecomputation``; docs/transforms.md, "ExplicitRecompute"): ``none``,
    #: ``standard`` (checkpoints at the forward's low-memory points), ``norm_only``
    #: (norms) or ``recompute_all``. Anything but ``none`` adds ExplicitRecompute to the
    #: pipeline, after the transforms that merge duplicate ops.
    recompute: str = "none"
    #: When our plan's peak tile memory is over a tile's bytes, what one byte over is
    #: worth in cycles: the command then plans the model again under each of PopART's
    #: memory settings (recomputation, serialized matmuls, rotated plan starts) and keeps
    #: the setting of least cycles + this weight × the bytes over (docs/cli.md, "Memory
    #: search"). 0 (the default) plans the model as given.
    memory_weight: float = 0.0
    #: Turn each sum of more than two gradient partials in a training step's backward pass
    #: into a chain of additions run as soon as each partial exists, so partials die early
    #: (PopART's ``decomposeGradSum``; docs/transforms.md, "DecomposeGradSum").
    decompose_grad_sum: bool = False
    #: Serialize every MatMul that carries no ``__serialize_matmul_mode`` attribute of its
    #: own: ``"<mode>:<factor>"`` with mode ``input_channels``, ``output_channels`` or
    #: ``reducing_dim`` (PopART's ``Builder::setSerializeMatMul``, for every matmul), ``""``
    #: for none (docs/transforms.md, "SerializeMatMuls").
    serialize_matmuls: str = ""
    #: Call one subgraph wherever a sequence of ops repeats (PopART's ``enableOutlining``;
    #: docs/transforms.md, "SubgraphOutline"): a model's identical layers become calls of
    #: one subgraph, whose code the IPU then holds once. Adds SubgraphOutline to the end
    #: of the pipeline.
    enable_outlining: bool = False
    #: How much a sequence's ops must be worth together to be outlined (PopART's
    #: ``outlineThreshold``; a matmul or convolution is worth 1000, another op 0.1).
    outline_threshold: float = 1.0
    #: How ops are placed on IPUs (PopART's ``virtualGraphMode``; docs/multi-ipu.md):
    #: ``off`` (one IPU), ``manual`` (the model's placement: ONNX ``__ipu_number``
    #: attributes, PopART's Builder ``virtualGraph``) or ``auto`` (AutoVirtualGraph splits
    #: the main graph over ``ipus`` IPUs as PopART does). Anything but ``off`` adds
    #: InterIpuCopy (and, for ``auto``, AutoVirtualGraph before it) to the pipeline.
    virtual_graph_mode: str = "off"
    #: IPUs of the machine (PopART: the device's IPU count), each of the IPU Model's tiles.
    ipus: int = 1
    #: Under ``auto``, each IPU's share of the split's cost (PopART's
    #: ``virtualGraphSplitRatios``); empty: equal shares.
    virtual_graph_split_ratios: tuple[float, ...] = ()
    #: Under ``auto``, whose split: ``memory`` (SplitByMemory: each IPU's bytes balanced, a
    #: tied head with its table) or ``popart`` (AutoVirtualGraph, PopART's rule; the
    #: PopART baseline's split always).
    auto_split: str = "memory"
    #: Run the IPUs as a pipeline (PopART's ``enablePipelining``; docs/multi-ipu.md): each
    #: IPU's ops form pipeline stages (InferPipelineStages) and a tensor read again in a
    #: later stage of its IPU is kept in a stash (Pipeline). Needs ``ipus`` > 1 (the
    #: transforms refuse it otherwise).
    enable_pipelining: bool = False
    #: The share of a tile's memory a matmul or convolution plan may hold as temporary data
    #: (PopART's ``availableMemoryProportion`` matmul and convolution option, 0.6 by default
    #: as in Poplibs): plans, ours and the PopART baseline's, take the quickest partition
    #: within it, or the one of least temporary memory when none is (0: always).
    #: Per-op ``__available_memory_proportion`` attributes are not read.
    available_memory_proportion: float = AVAILABLE_MEMORY_PROPORTION
    #: Make a forward model one training step as PopART's ``TrainingSession`` does
    #: (docs/training.md): the loss, ``nll`` (softmax and negative log-likelihood over the
    #: first output, against a labels input it adds), ``l1`` (the first output's absolute
    #: values summed) or the name of a scalar tensor of the model; the backward pass is built
    #: from each op's gradient rule and every weight gets its optimizer's update. Empty (the
    #: default): the model is planned as it is. Adds Autodiff to the pipeline.
    loss: str = ""
    #: The weight updates of a training step: ``sgd`` (PopART's default, ConstSGD),
    #: ``sgd_momentum``, ``adam``, ``adamw`` or ``lamb`` (their states in float32).
    optimizer: str = "sgd"
    #: The optimizer's learning rate (its value does not change a plan).
    learning_rate: float = 0.01
    #: Micro-batches whose gradients each weight's accumulator sums before one update
    #: (PopART's ``accumulationFactor``); 1: no accumulator.
    gradient_accumulation: int = 1
    #: The factor the loss's gradient starts from and the update divides out (PopART's
    #: ``lossScaling``, an optimizer setting there).
    loss_scaling: float = 1.0
    #: Canonicalizer caps (MLIR's: iterations and rewrites), and whether reaching the
    #: iteration cap without a fixpoint is an error.
    canonicalize_max_iterations: int = 10
    canonicalize_max_rewrites: int = 100_000
    canonicalize_test_convergence: bool = False
    #: Check each transform's declared assumptions, guarantees and preserved conditions
    #: around it (a debugging aid, like PopART's ``opxAliasChecking``/``opxModifyChecking``).
    check_transform_conditions: bool = False
    #: Import op types the registry does not know (or of domains it does not model) as
    #: opaque barriers, with an ``UnknownOpsWarning``, instead of refusing the model.
    allow_unknown_ops: bool = False

    def __post_init__(self) -> None:
        # Accept any sequence of names (a list from a config file, say) but keep the
        # options hashable and immutable; a bare string is left for the registry to refuse.
        if not isinstance(self.pipeline, str | tuple):
            object.__setattr__(self, "pipeline", tuple(self.pipeline))
        for name, choices in (("matmul_plans", MATMUL_PLAN_CHOICES),
                              ("recompute", RECOMPUTE_CHOICES), ("auto_split", AUTO_SPLITS)):
            if getattr(self, name) not in choices:
                raise OptionError(f"option {name} must be one of {', '.join(choices)}; "
                                  f"got {getattr(self, name)!r}")
        parse_serialization(self.serialize_matmuls)
        self._check_placement()
        for name in ("outline_threshold", "memory_weight"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value < float("inf")):
                raise OptionError(f"option {name} must be a finite number >= 0; got "
                                  f"{value!r}")
        check_proportion(self.available_memory_proportion,
                         "option available_memory_proportion", OptionError)
        self._check_training()

    def _check_training(self) -> None:
        if self.optimizer not in OPTIMIZER_CHOICES:
            raise OptionError(f"option optimizer must be one of {', '.join(OPTIMIZER_CHOICES)}"
                              f"; got {self.optimizer!r}")
        accumulation = self.gradient_accumulation
        if isinstance(accumulation, bool) or not isinstance(accumulation, int) \
                or accumulation < 1:
            raise OptionError(f"option gradient_accumulation must be an int of at least 1; "
                              f"got {accumulation!r}")
        for name in ("learning_rate", "loss_scaling"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 < value < float("inf")):
                raise OptionError(f"option {name} must be a finite number > 0; got {value!r}")
        if not isinstance(self.loss, str):
            raise OptionError(f"option loss must be a name; got {self.loss!r}")

    def _check_placement(self) -> None:
        if self.virtual_graph_mode not in VIRTUAL_GRAPH_MODES:
            raise OptionError(f"option virtual_graph_mode must be one of "
                              f"{', '.join(VIRTUAL_GRAPH_MODES)}; got "
                              f"{self.virtual_graph_mode!r}")
        if isinstance(self.ipus, bool) or not isinstance(self.ipus, int) or self.ipus < 1:
            raise OptionError(f"option ipus must be an int of at least 1; got {self.ipus!r}")
        if self.ipus > 1 and self.virtual_graph_mode == "off":
            raise OptionError(f"option ipus is {self.ipus}, but virtual_graph_mode is off: "
                              f"set it to manual (the model's placement) or auto")
        if self.ipus > 1 and self.enable_outlining:
            raise OptionError("enable_outlining on more than one IPU is not modelled: "
                              "a subgraph would be called from several IPUs")
        try:
            ratios = tuple(float(r) for r in self.virtual_graph_split_ratios)
        except (TypeError, ValueError):
            ratios = (-1.0,)
        if not all(0.0 < r < float("inf") for r in ratios):
            raise OptionError(f"option virtual_graph_split_ratios must be positive numbers, "
                              f"one per IPU; got {self.virtual_graph_split_ratios!r}")
        if ratios and self.virtual_graph_mode == "auto" and len(ratios) != self.ipus:
            raise OptionError(f"option virtual_graph_split_ratios gives {len(ratios)} "
                              f"ratios for {self.ipus} IPUs; give one per IPU")
        object.__setattr__(self, "virtual_graph_split_ratios", ratios)


# -- options set by name from text (the command line's ``--option KEY=VALUE``) -----------
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def option_types() -> dict[str, type]:
    """Every settable option by name, with the type its text is parsed as: SessionOptions'
    own fields, and a nested options class's fields as ``outer.inner``
    (``unwind_valuations.matmul``). Sequence fields are typed ``tuple`` (text: names
    separated by commas)."""
    return _fields_of(SessionOptions, "")


def default_text(key: str) -> str:
    """The default of option ``key`` as ``--option`` would write it."""
    value: object = SessionOptions()
    for part in key.split("."):
        value = getattr(value, part)
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def option_rows() -> list[tuple[str, str, str, str, str]]:
    """Every option as (our key, PopART's name or "", type, default, one line), in the
    options class's order: what ``popart-unwind options`` prints."""
    return [(key, popart_name(key) or "", kind.__name__, default_text(key),
             OPTION_LINES.get(key, ""))
            for key, kind in option_types().items()]


def _fields_of(cls: type, prefix: str) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    found: dict[str, type] = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            found.update(_fields_of(hint, f"{prefix}{field.name}."))
        else:
            found[prefix + field.name] = typing.get_origin(hint) or hint
    return found


def parse_option_value(name: str, text: str) -> Any:
    """``text`` as the value of option ``name``; OptionError names the option and what it
    expected (bool: true/false/1/0/yes/no/on/off; int; float; str; tuple: a,b,c)."""
    types = option_types()
    if name not in types:
        raise OptionError(_unknown(name, types))
    kind = types[name]
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise OptionError(f"option {name} is a bool; got {text!r} "
                          f"(use true/false, 1/0, yes/no or on/off)")
    if kind is int or kind is float:
        try:
            value = kind(text.replace("_", "") if kind is int else text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            raise OptionError(f"option {name} is {'an int' if kind is int else 'a float'}; "
                              f"got {text!r}")
        return value
    if kind is tuple:
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:
            raise OptionError(f"option {name} is a list of names separated by commas; "
                              f"got {text!r}")
        return items
    if not text:
        raise OptionError(f"option {name} needs a value")
    return text


def _unknown(name: str, types: dict[str, type]) -> str:
    close = difflib.get_close_matches(name, [*types, *popart_names()], n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else \
        f"; options: {', '.join(types)}"
    return f"unknown option {name!r}{hint}"


def split_assignment(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> (key, value), the key stripped."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise OptionError(f"option {text!r} must be KEY=VALUE")
    return key.strip(), value.strip()


def with_options(options: SessionOptions, assignments: Iterable[str]) -> SessionOptions:
    """``options`` with each ``KEY=VALUE`` applied in order (a key given twice: the last
    value wins, as with a repeated command-line flag). KEY is ours or PopART's name for the
    option, with PopART's values (``option_names.py``)."""
    values: dict[str, Any] = {}
    for text in assignments:
        key, value = from_popart(*split_assignment(text))
        values[key] = parse_option_value(key, value)
    nested: dict[str, dict[str, Any]] = {}
    flat: dict[str, Any] = {}
    for key, value in values.items():
        outer, dot, inner = key.partition(".")
        if dot:
            nested.setdefault(outer, {})[inner] = value
        else:
            flat[key] = value
    for outer, inner_values in nested.items():
        flat[outer] = dataclasses.replace(getattr(options, outer), **inner_values)
    return dataclasses.replace(options, **flat)
