"""Whether this machine has the memory to plan a model, asked before the work starts.

Planning keeps tile arrays per element of the tensors it plans (the solver's realization,
then three plans — ours, PopART's, linear — and the cost model's walk over each), so its
memory grows with the model's producer-less elements: 16–20 bytes of resident memory per
planned element on large tensors (``benchmarks/size_limits.py``; RESULTS.md). The check
takes a lower bound, 12 bytes per element over a fixed base, so that it refuses only models
that cannot fit, naming the estimate, instead of ending deep in the work in an
out-of-memory error. The memory available is the kernel's ``MemAvailable`` and, inside a
control group with a limit, what is left under the limit; where neither can be read the
check passes.
"""

from __future__ import annotations

from pathlib import Path

from popart_unwind.errors import ResourceError
from popart_unwind.ir import Ir

#: Resident bytes per planned element, at the least (measured 16–20 on large tensors).
BYTES_PER_PLANNED_ELEMENT = 12
#: What the process holds besides the plan's arrays (interpreter, numpy, the IR), at least.
BASE_BYTES = 150 * 2**20
#: Where Linux tells the memory available, and a control group's (v2) limit and usage.
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")


def planned_elements(ir: Ir) -> int:
    """Elements of every producer-less tensor of known shape, over all graphs."""
    return sum(tensor.nelms() for graph in ir.graphs for tensor in graph.producerless_tensors()
               if tensor.shape is not None)


def estimated_bytes(ir: Ir) -> int:
    """A lower bound on the resident memory planning ``ir`` takes."""
    return BASE_BYTES + BYTES_PER_PLANNED_ELEMENT * planned_elements(ir)


def available_bytes(meminfo: Path = MEMINFO, cgroup: Path = CGROUP) -> int | None:
    """Memory this process may still take: the least of the kernel's MemAvailable and what a
    control group's limit leaves; None when neither can be read."""
    found = []
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text().strip())
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_planning_memory(ir: Ir, available: int | None = None) -> None:
    """ResourceError when planning ``ir`` needs more memory than is available (``available``
    bytes, or :func:`available_bytes`)."""
    available = available if available is not None else available_bytes()
    if available is None:
        return
    needed = estimated_bytes(ir)
    if needed > available:
        raise ResourceError(
            f"planning this model needs at least {_size(needed)} of memory "
            f"({planned_elements(ir):,} planned elements at {BYTES_PER_PLANNED_ELEMENT} bytes "
            f"each, plus {_size(BASE_BYTES)}) and {_size(available)} are available; "
            f"nothing was planned")


def _size(num_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.1f} {unit}"
    return f"{num_bytes:,} bytes"
