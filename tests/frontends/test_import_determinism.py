"""Importing one PyTorch model gives one IR, whichever process imports it.

A training step with dropout decomposes to ``bernoulli(expand(empty([])), p)``: the
uninitialised ``empty`` must not bring the allocator's leftover bytes into the IR, where the
canonicalizer would fold them into constants that differ from run to run.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from popart_unwind.frontends.torch_import import exported_program_to_ir  # noqa: E402
from popart_unwind.frontends.torch_trace import trace_forward  # noqa: E402
from popart_unwind.ir import Ir  # noqa: E402

SCRIPT = """\
import sys
import torch
from popart_unwind import transforms
from popart_unwind.ir import Ir
from popart_unwind.options import SessionOptions

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(self.drop(x)))
        return x

torch.manual_seed(0)
ir = Ir.from_torch(Net(), (torch.ones(2, 8),), training=True,
                   options=SessionOptions(enable_unwind_layouts=False))
transforms.run_pipeline(ir)
sys.stdout.write(ir.to_json())
"""


def _fresh_env(hash_seed: str) -> dict[str, str]:
    """The environment for a fresh interpreter; an empty PYTHONPATH entry would put the
    working folder on sys.path, which ``-P`` is there to keep off."""
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    path = [entry for entry in env.pop("PYTHONPATH", "").split(os.pathsep) if entry]
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def test_a_training_step_with_dropout_imports_identically_in_fresh_processes():
    outputs = []
    for hash_seed in ("1", "2024"):
        result = subprocess.run([sys.executable, "-P", "-c", SCRIPT], env=_fresh_env(hash_seed),
                                capture_output=True, text=True, check=True, timeout=300)
        outputs.append(result.stdout)
    assert len(outputs[0]) > 1_000
    assert outputs[0] == outputs[1]


class Empties(torch.nn.Module):
    def forward(self, x):
        return (x, torch.empty(3, 5), x.new_empty((2, 7)), torch.empty_like(x),
                torch.empty_strided((4, 3), (1, 4)), torch.empty(6, dtype=torch.int64))


@pytest.mark.parametrize("decompose", [True, False], ids=["core-aten", "undecomposed"])
def test_uninitialised_tensors_become_constant_zeros(decompose):
    program = trace_forward(Empties(), (torch.ones(2, 3),), decompose=decompose)
    ir = exported_program_to_ir(program)
    ir.verify()
    _, *empties = ir.main_graph.outputs
    expected = [((3, 5), "float32"), ((2, 7), "float32"), ((2, 3), "float32"),
                ((4, 3), "float32"), ((6,), "int64")]
    assert [(t.shape, t.dtype) for t in empties] == expected
    for tensor in empties:
        assert tensor.producer is None and tensor.data is not None
        assert not np.any(tensor.data), tensor.id


def test_dropout_in_a_training_step_reads_zeros():
    class Drop(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.nn.functional.dropout(self.linear(x), 0.5, training=True)

    ir = Ir.from_torch(Drop(), (torch.ones(2, 4),), training=True)
    empties = [t for t in ir.main_graph.tensors if t.id.startswith("empty")]
    assert empties and all(t.data is not None and not np.any(t.data) for t in empties)
