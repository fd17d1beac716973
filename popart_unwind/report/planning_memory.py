"""Whether this machine has the memory to plan a model, asked before the work starts, and
how the process gives freed memory back (and a forked worker, which ends after one job,
keeps it for its next arrays).

Planning keeps tile arrays per element of the tensors it plans while it works on them (the
solver's realization, the baselines, the cost model's walk over each plan), so its memory
grows with the model's producer-less elements; plans are kept as Poplar's intervals between
stages, and weights stay in the model file. Measured (``benchmarks/size_limits.py``;
RESULTS.md): 2.9 to 10.5 bytes of resident memory per planned element on large models. The
check takes a lower bound, 1 byte per element over a fixed base, so that it refuses only
models that cannot fit, naming the estimate, instead of ending deep in the work in an
out-of-memory error. The memory available is the kernel's ``MemAvailable`` and, inside a
control group with a limit, what is left under the limit; where neither can be read the
check passes.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from popart_unwind.errors import ResourceError
from popart_unwind.ir import Ir

#: Resident bytes per planned element, at the least (measured 2.9–10.5 on large models).
BYTES_PER_PLANNED_ELEMENT = 1
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


#: glibc's ``mallopt`` parameter for the size above which an allocation is a mapping of its
#: own, and the size set here.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 4 * 2**20


#: glibc's ``mallopt`` parameter for the free bytes at the heap's top above which the heap
#: shrinks; and what a process that does one job and ends sets (``keep_freed_memory``):
#: arrays up to glibc's largest mmap threshold on 64-bit systems come from the heap, which
#: keeps up to 512 MiB free.
_M_TRIM_THRESHOLD = -1
KEEP_MMAP_THRESHOLD_BYTES = 32 * 2**20
KEEP_TRIM_THRESHOLD_BYTES = 512 * 2**20


#: Planned elements from which the command gives freed arrays back (``return_freed_memory``):
#: below it the heap glibc keeps is small, and the fresh mappings cost time for nothing (the
#: demo's 6.9 million elements: 15 to 40 % more CPU time, the same peak, 200 MiB).
GIVE_BACK_FROM_ELEMENTS = 1 << 25


def return_freed_memory_if_large(ir: Ir) -> bool:
    """``return_freed_memory`` when ``ir`` plans at least ``GIVE_BACK_FROM_ELEMENTS``
    elements (asked after the import, before the work that makes tile arrays); whether it
    did."""
    if planned_elements(ir) < GIVE_BACK_FROM_ELEMENTS:
        return False
    return_freed_memory()
    return True


def return_freed_memory() -> None:
    """Make every allocation above ``MMAP_THRESHOLD_BYTES`` a mapping of its own, given back
    to the system when freed. glibc raises that threshold each time a large mapping is
    freed (up to 32 MB), so the tile arrays of the next stages came from the heap and stayed
    in the process after use: planning VGG-19 peaks at 786 MiB with this, 971 MiB without
    (for about 8 % more time: fresh mappings are zeroed pages; on a small model such as the
    demo far more, hence ``return_freed_memory_if_large``). Does nothing where the C
    library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def keep_freed_memory() -> None:
    """Keep freed memory in the heap for the next arrays: for a process that does one job
    and ends (a forked worker of the memory search), which gives everything back at once.
    Arrays freed and made again then reuse the same pages instead of fresh mappings the
    system zeroes and faults in page by page (real GPT-2's memory search: 5.4–5.8 M page
    faults → 3.3 M, about 4 CPU s less system time; its peak, a worker's, 2.31 → 2.36
    GB). Does nothing where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, KEEP_MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD_BYTES)
