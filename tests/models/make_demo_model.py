"""Build the graph ``popart-unwind demo`` plans: one training step of a small GPT-2.

The demo must run without PyTorch and without files, so the package ships the step as the
PyTorch front end imports it (``Ir.from_torch(..., training=True)``: forward, the model's
own cross-entropy of the next tokens, backward and an SGD update of every weight), written
as the IR's stable JSON and gzipped. The weights' values are left out: a plan depends on
their shapes and types only, and the model's 2.7 M parameters would make the file 11 MB. The
constants (masks, fills, shape operands) keep their values, which the transforms read.

The model is transformers' ``GPT2LMHeadModel`` with its LM head tied to the token
embedding (one table, gathered from and multiplied by), 2 layers of width 256 with 4
heads, a 4,096-token vocabulary, batch 4 and sequence 128: small enough to plan in seconds,
large enough that every tensor spreads over a GC200's 1,472 tiles. Rebuild after changing
the front end or this file (needs the ``models`` extra)::

    python tests/models/make_demo_model.py            # rewrites the packaged file
    python tests/models/make_demo_model.py --check    # exit 1 if it would change it
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_models  # this folder's model builder

#: The transformers configuration of the demo's model (GPT-2's shape, demo sizes).
CONFIG = dict(n_embd=256, n_layer=2, n_head=4, vocab_size=4096, n_positions=128,
              bos_token_id=4095, eos_token_id=4095)
BATCH, SEQUENCE = 4, 128
PACKAGED = (Path(__file__).resolve().parents[2] / "popart_unwind" / "report"
            / "demo_gpt2_training.json.gz")


def demo_module() -> tuple[object, tuple[object, ...]]:
    """The demo's training-step module and its example inputs (token ids, attention mask,
    labels: the ids themselves, which the model shifts)."""
    import torch
    import transformers

    config = transformers.GPT2Config(**CONFIG)
    config._attn_implementation = "eager"
    config.use_cache = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(make_models.SEED)
        model = transformers.GPT2LMHeadModel(config)
    names = make_models.input_names("gpt2", "training")
    module = make_models._first_output_class()(model, names).eval()
    generator = torch.Generator().manual_seed(make_models.SEED)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQUENCE), generator=generator)
    return module, (ids, torch.ones(BATCH, SEQUENCE, dtype=torch.long), ids)


def demo_bytes() -> bytes:
    """The packaged file's bytes: the step's IR as JSON, weights by shape only, gzipped
    with no timestamp (the same input gives the same bytes)."""
    from popart_unwind.ir import Ir
    from popart_unwind.ir.tensor import TensorType

    module, args = demo_module()
    ir = Ir.from_torch(module, args, training=True)
    text = ir.to_json(include_data=lambda t: t.tensor_type != TensorType.VARIABLE)
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare with the packaged file (exit 1 if it differs)")
    parser.add_argument("--out", type=Path, default=PACKAGED, help="where to write it")
    options = parser.parse_args(argv)
    data = demo_bytes()
    if options.check:
        same = options.out.exists() and options.out.read_bytes() == data
        print(f"{options.out}: {'up to date' if same else 'would change'}")
        return 0 if same else 1
    handle, temporary = tempfile.mkstemp(dir=options.out.parent, suffix=".tmp")
    with os.fdopen(handle, "wb") as file:
        file.write(data)
    os.replace(temporary, options.out)
    print(f"{options.out}: {len(data):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
