"""Build real model graphs (BERT, GPT-2, ViT, ResNet, T5, Llama) and export them as ONNX.

Tests and benchmarks need graphs with the shape of real networks, but the repository must not
hold large generated files and nothing may be downloaded from a model hub. So models are
built here from transformers' configuration classes with seeded random weights, in two sizes:
``tiny`` (a few hundred thousand parameters; fast enough for CI) and ``real`` (the published
width and layer count: the default configuration of each class, e.g. BERT-base, ResNet-50,
and a 135 M-parameter Llama). Each model carries its task head, as trained and served:
BERT's masked-LM head, GPT-2's and Llama's LM heads, T5's conditional generation (encoder,
decoder and LM head), ViT's and ResNet's classification heads. The LM heads of BERT, GPT-2,
T5 and Llama share their weight with the token embedding (tied embeddings, as Llama 3.2 1B
has them), so one table is both gathered from and multiplied by. Each is wrapped to take
positional tensors and return its first output (the logits), with ``use_cache=False`` and
eager attention, and text models get an explicit attention mask (tracing then has no
data-dependent branch on it). A training step's module also takes labels and returns the
model's own loss, as its trainer computes it: cross-entropy of the next tokens (GPT-2,
Llama), of every token (BERT's masked-LM head), of the decoder's targets (T5) or of the
class (ViT, ResNet).

Use as a module::

    module, args = tiny_model("bert")        # a torch.nn.Module and its example inputs
    path = build("bert", kind="training")    # ONNX file, built once into the cache

or as a script (progress on stderr, built paths on stdout)::

    python tests/models/make_models.py                     # all six, tiny
    python tests/models/make_models.py --size real bert --kind forward --out /tmp/models

Files go to ``$POPART_UNWIND_MODEL_CACHE`` or ``~/.cache/popart-unwind/models``. A file's
name carries a hash of the configuration, the example input shapes and the torch,
transformers, onnx and onnxscript versions, so a stale file is never reused. Generated files
are never committed. Needs the ``models`` extra: pip install '.[models]'.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach a hub

MODEL_NAMES = ("bert", "gpt2", "vit", "resnet", "t5", "llama")
DEFAULT_NAMES = MODEL_NAMES
KINDS = ("forward", "training")
SIZES = ("tiny", "real")
SEED = 0
LEARNING_RATE = 0.01
FORMAT_VERSION = 4  # bump when the way files are built changes
CACHE_ENV = "POPART_UNWIND_MODEL_CACHE"

# The ONNX exporter has no form for the convolution backward op, so training steps of
# convolutional models (ResNet; ViT's patch embedding) do not export to ONNX.
ONNX_TRAINING_UNSUPPORTED = frozenset({"resnet", "vit"})


def log(message: str) -> None:
    """A progress line on stderr (stdout is kept for the paths of built files)."""
    print(f"[make_models] {message}", file=sys.stderr, flush=True)


class _Spec(NamedTuple):
    config_class: str
    model_class: str
    inputs: tuple[str, ...]  # keyword names of the model's forward, in positional order
    tiny: dict[str, Any]
    real: dict[str, Any]
    model_kwargs: dict[str, Any]


_TEXT = ("input_ids", "attention_mask")
_SPECS: dict[str, _Spec] = {
    "bert": _Spec(
        "BertConfig", "BertForMaskedLM", _TEXT,
        tiny=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=512, vocab_size=1000),
        real={}, model_kwargs={},
    ),
    "gpt2": _Spec(
        "GPT2Config", "GPT2LMHeadModel", _TEXT,
        # the special tokens moved into the tiny vocabulary (GPT-2's are its last token)
        tiny=dict(n_embd=128, n_layer=2, n_head=2, vocab_size=1000, n_positions=128,
                  bos_token_id=999, eos_token_id=999),
        real={}, model_kwargs={},
    ),
    "vit": _Spec(
        "ViTConfig", "ViTForImageClassification", ("pixel_values",),
        tiny=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=512, image_size=32, patch_size=8, num_labels=10),
        real=dict(num_labels=1000), model_kwargs={},  # ImageNet-1k, as published
    ),
    "resnet": _Spec(
        "ResNetConfig", "ResNetForImageClassification", ("pixel_values",),
        tiny=dict(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                  num_labels=10),
        real=dict(num_labels=1000), model_kwargs={},  # ImageNet-1k, as published
    ),
    "t5": _Spec(
        "T5Config", "T5ForConditionalGeneration", (*_TEXT, "decoder_input_ids"),
        tiny=dict(d_model=64, d_kv=16, d_ff=256, num_layers=2, num_heads=4, vocab_size=1000),
        real={}, model_kwargs={},
    ),
    "llama": _Spec(
        "LlamaConfig", "LlamaForCausalLM", _TEXT,
        tiny=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                  max_position_embeddings=256, tie_word_embeddings=True),
        # a 135 M-parameter configuration (the shape of SmolLM-135M)
        real=dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                  num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                  max_position_embeddings=2048, tie_word_embeddings=True),
        model_kwargs={},
    ),
}

# (batch, sequence length) for text models; (batch, image side) for vision models
_INPUT_SIZES = {"tiny": {"text": (2, 16), "vision": (2, 32)},
                "real": {"text": (1, 128), "vision": (1, 224)}}


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}") from None


def _check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")


def make_config(name: str, size: str = "tiny") -> Any:
    """The transformers configuration for ``name`` at ``size`` (eager attention, no cache)."""
    import transformers

    _check_size(size)
    spec = _spec(name)
    overrides = dict(spec.tiny if size == "tiny" else spec.real)
    config = getattr(transformers, spec.config_class)(**overrides)
    config._attn_implementation = "eager"  # fused attention breaks some exports
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def example_inputs(name: str, config: Any, size: str = "tiny",
                   kind: str = "forward") -> tuple[Any, ...]:
    """Seeded example inputs, in the order the wrapped module takes them; a training step
    also takes the labels its model's own loss compares with (``input_names``)."""
    import torch

    spec = _spec(name)
    generator = torch.Generator().manual_seed(SEED)
    if spec.inputs[0] == "pixel_values":
        batch, side = _INPUT_SIZES[size]["vision"]
        pixels = torch.randn(batch, config.num_channels, side, side, generator=generator)
        if kind == "forward":
            return (pixels,)
        return pixels, torch.randint(0, config.num_labels, (batch,), generator=generator)
    batch, length = _INPUT_SIZES[size]["text"]
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    inputs: tuple[Any, ...] = (ids, mask)
    if name == "t5":
        inputs += (torch.randint(0, config.vocab_size, (batch, length), generator=generator),)
    if kind == "forward":
        return inputs
    # causal LMs shift the labels themselves, BERT's MLM head predicts every token, T5's
    # decoder predicts its next tokens: each model's own loss, as its trainer computes it
    labels = inputs[2][:, 1:] if name == "t5" else ids
    if name == "t5":
        labels = torch.cat([labels, torch.full((batch, 1), config.eos_token_id)], dim=1)
    return (*inputs, labels)


def input_names(name: str, kind: str = "forward") -> tuple[str, ...]:
    """The keyword names of the wrapped module's inputs, in order."""
    names = _spec(name).inputs
    return names if kind == "forward" else (*names, "labels")


def _first_output_class() -> type:
    import torch

    class FirstOutput(torch.nn.Module):
        """Calls a transformers model with positional tensors and returns its first output.

        Exporters and tracers work on positional tensor inputs and tensor outputs; a
        transformers model takes keyword arguments and returns a ModelOutput.
        """

        def __init__(self, model: torch.nn.Module, input_names: Sequence[str]) -> None:
            super().__init__()
            self.model = model
            self.input_names = tuple(input_names)

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(self.input_names, inputs, strict=True)))[0]

    return FirstOutput


def _make(name: str, size: str, kind: str = "forward") -> tuple[Any, tuple[Any, ...]]:
    import torch
    import transformers

    _check_kind(kind)
    spec = _spec(name)
    config = make_config(name, size)
    with torch.random.fork_rng(devices=[]):  # seeded, without disturbing the caller's RNG
        torch.manual_seed(SEED)
        model = getattr(transformers, spec.model_class)(config, **spec.model_kwargs)
    module = _first_output_class()(model, input_names(name, kind)).eval()
    return module, example_inputs(name, config, size, kind)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")


def tiny_model(name: str, kind: str = "forward") -> tuple[Any, tuple[Any, ...]]:
    """A tiny configuration of ``name``: ``(module, example_args)``, in eval mode. The
    module returns the model's first output: the logits (or last hidden state), or, for
    ``kind="training"``, the model's own loss of its labels (the last input), which a
    training step differentiates."""
    return _make(name, "tiny", kind)


def real_model(name: str, kind: str = "forward") -> tuple[Any, tuple[Any, ...]]:
    """The default (real-size) configuration of ``name``: ``(module, example_args)``, as
    ``tiny_model`` gives them."""
    return _make(name, "real", kind)


def versions() -> dict[str, str]:
    """Versions of the packages whose output the files depend on."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "transformers", "onnx", "onnxscript"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "missing"
    return found


def cache_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``cache``, else ``$POPART_UNWIND_MODEL_CACHE``, else the default."""
    if cache is None:
        cache = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "popart-unwind" / "models"
    return Path(cache).expanduser()


def cache_key(name: str, kind: str, size: str) -> str:
    """A hash of everything a built file depends on; it goes into the file name."""
    config = make_config(name, size)
    module_inputs = example_inputs(name, config, size, kind)
    described = {
        "format": FORMAT_VERSION, "name": name, "kind": kind, "size": size,
        "config": json.loads(config.to_json_string(use_diff=False)),
        "model_kwargs": _spec(name).model_kwargs,
        "inputs": [[list(t.shape), str(t.dtype)] for t in module_inputs],
        "seed": SEED, "learning_rate": LEARNING_RATE if kind == "training" else None,
        "versions": versions(),
    }
    # transformers' own version string is in the config; drop it so the key has one source
    described["config"].pop("transformers_version", None)
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _export_onnx(name: str, kind: str, size: str, path: Path) -> None:
    import torch

    from popart_unwind.frontends.torch_trace import trace_training_step

    module, args = _make(name, size, kind)
    names = list(input_names(name, kind))
    with contextlib.redirect_stdout(sys.stderr):  # the exporter reports on stdout
        if kind == "forward":
            onnx_program = torch.onnx.export(
                module, args, dynamo=True, optimize=False, input_names=names,
                output_names=["output"],
            )
        else:
            # undecomposed: the exporter's own decompositions keep ops it has ONNX forms for
            # (core ATen turns Llama's empty_like into empty_permuted, which it lacks)
            program = trace_training_step(module, args, learning_rate=LEARNING_RATE,
                                          decompose=False)
            trained = [n for n, p in module.named_parameters() if p.requires_grad]
            onnx_program = torch.onnx.export(
                program, args, dynamo=True, optimize=False, input_names=names,
                output_names=["loss", *(f"{n}.updated" for n in trained)],
            )
        _optimize_keeping_parameters(onnx_program)
        # weights beside the graph for real sizes: keeps the protobuf small
        onnx_program.save(str(path), external_data=size == "real")


#: The names exporters give the dynamic axes of ``export_with_dynamic_axes``'s files.
BATCH, SEQUENCE = "batch", "sequence"


def dynamic_axes(name: str) -> dict[str, dict[int, str]]:
    """Each forward input's dynamic axes, as users export them: batch and sequence for
    text, the batch for images."""
    return {input_name: {0: BATCH} if input_name == "pixel_values" else {0: BATCH, 1: SEQUENCE}
            for input_name in input_names(name)}


def export_with_dynamic_axes(name: str, path: Path, *, dynamo: bool) -> Path:
    """Export the tiny forward model ``name`` with dynamic axes (``dynamic_axes``): by the
    TorchScript exporter (``dynamo=False``) or by ``torch.export`` (``dynamo=True``, the
    axes as ``dynamic_shapes``), as users export them, without our optimizer settings."""
    import torch

    module, args = tiny_model(name)
    names = list(input_names(name))
    axes = dynamic_axes(name)
    with contextlib.redirect_stdout(sys.stderr):  # the exporters report on stdout
        if not dynamo:
            torch.onnx.export(module, args, str(path), dynamo=False, input_names=names,
                              output_names=["output"], dynamic_axes=axes)
            return path
        dims = {BATCH: torch.export.Dim(BATCH, min=1, max=64),
                SEQUENCE: torch.export.Dim(SEQUENCE, min=2, max=120)}
        shapes = tuple({axis: dims[label] for axis, label in axes[n].items()} for n in names)
        program = torch.onnx.export(module, args, dynamo=True, input_names=names,
                                    output_names=["output"], dynamic_shapes=(shapes,))
        program.save(str(path))
    return path


def _optimize_keeping_parameters(onnx_program: Any) -> None:
    """Run the exporter's optimizer without letting it touch parameters and buffers.

    To the optimizer, initializers are constants: it would fold weight transposes into new
    anonymous constants, fold BatchNorm into the preceding convolution, fold parts of a
    training step's update, and merge parameters whose random initial values happen to be
    equal (every LayerNorm's ones and zeros). Each would change which producer-less tensors
    the graph has. Listed as graph inputs while it runs, they are left alone; afterwards they
    are plain initializers again, named after the module's parameters and buffers. It still
    removes the exporter's shape-computation noise (Constant, Concat, Cast nodes).
    """
    graph = onnx_program.model.graph
    protected = [value for value in graph.initializers.values() if value not in graph.inputs]
    graph.inputs.extend(protected)
    quiet = logging.getLogger("onnx_ir.passes.common.initializer_deduplication")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # it warns once per input that it left them alone
    try:
        onnx_program.optimize()
    finally:
        quiet.setLevel(level)
        for value in protected:
            graph.inputs.remove(value)


@contextlib.contextmanager
def _staging(folder: Path) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=folder))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build(name: str, kind: str = "forward", size: str = "tiny",
          cache: str | os.PathLike[str] | None = None, *, force: bool = False) -> Path:
    """Return the ONNX file of ``name`` (``kind`` forward or training), building it if needed.

    The file is exported in a staging folder and moved into place with its external data,
    so an interrupted build leaves no half-written file under the final name.
    """
    _spec(name)
    _check_size(size)
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    folder = cache_dir(cache)
    path = folder / f"{name}-{size}-{kind}-{cache_key(name, kind, size)}.onnx"
    if path.exists() and not force:
        log(f"{path.name}: cached")
        return path
    log(f"{name} {size} {kind}: exporting ...")
    start = time.perf_counter()
    with _staging(folder) as staging:
        _export_onnx(name, kind, size, staging / path.name)
        for produced in sorted(staging.iterdir()):  # the graph and its external data, if any
            os.replace(produced, folder / produced.name)
    megabytes = sum(f.stat().st_size for f in folder.glob(path.name + "*")) / 2**20
    log(f"{path.name}: built in {time.perf_counter() - start:.1f} s ({megabytes:.1f} MB)")
    return path


def _summary(exc: Exception) -> str:
    """One line saying why an export failed (the exporter's own summary when it has one)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # colour codes
    _, found, summary = text.partition("## Exception summary")
    lines = [line.strip() for line in (summary if found else text).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:400] if lines else ''}"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(DEFAULT_NAMES),
                        help=f"models among {', '.join(MODEL_NAMES)} (default: "
                             f"{' '.join(DEFAULT_NAMES)}; 'all' for every one)")
    parser.add_argument("--kind", choices=[*KINDS, "both"], default="both")
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--out", help=f"cache folder (default: ${CACHE_ENV} or "
                                      f"~/.cache/popart-unwind/models)")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the requested files; 1 if one failed that is not a known exporter limit."""
    options = _parse(argv)
    names = list(MODEL_NAMES) if options.names == ["all"] else options.names
    kinds = list(KINDS) if options.kind == "both" else [options.kind]
    unexpected = 0
    for name in names:
        for kind in kinds:
            known_gap = kind == "training" and name in ONNX_TRAINING_UNSUPPORTED
            try:
                print(build(name, kind, options.size, options.out, force=options.force))
            except Exception as exc:
                label = "not supported by the exporter" if known_gap else "FAILED"
                log(f"{name} {options.size} {kind}: {label}: {_summary(exc)}")
                unexpected += not known_gap
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
