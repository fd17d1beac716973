"""Our unwinding solvers beside poprithms' Greedy0 on the block chain, timed in one run.

poprithms is built from its public source (Release, -O3) into ``--build-dir``, together with
``benchmarks/poprithms/block_chain.cpp``, which builds the graph of ``unwind_blocks.build``
with poprithms' own API and times only the solve. For each block count and variant the
rounds alternate — poprithms, then each of our solvers — every run in a fresh process, so
neither side profits from the other's warm caches; the table shows each side's fastest
round and the ratio ours ÷ poprithms. The scores must be equal, or the script stops. Both
sides time the solve alone, with the solution left in C++: ours keeps its sink paths in
the solver's C++ core until they are asked for (converting them to Python objects takes
about as long again on this chain; ``benchmarks/unwind_blocks.py`` prints that time), and
scores them there.

    python benchmarks/beside_poprithms.py --source PATH [--blocks 1000 10000] [--rounds 2]

PATH is a poprithms source tree or a bare git clone of it (``--commit`` picks the commit;
7396145c by default). Building needs cmake, a C++17 compiler and Boost (Debian:
libboost-dev libboost-filesystem-dev libboost-system-dev libboost-serialization-dev); it
takes about 90 s once, and is reused while the build folder is there. Run it on an idle
machine: a busy second core slows the Python side far more than the C++ one.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVER_SOURCE = HERE / "poprithms" / "block_chain.cpp"
DEFAULT_COMMIT = "7396145c967e913ff7c538656f75b3305ebfe350"

#: Solves one block chain with our solver in a fresh interpreter; prints "seconds score".
OURS = """
import gc, sys, time
sys.path.insert(0, {here!r})
from unwind_blocks import build
graph = build({blocks}, {variant}, 1)
gc.collect()
start = time.perf_counter()
solution = graph.solve({solver!r})
seconds = time.perf_counter() - start
print(seconds, solution.symbolic_score())
"""


def run(command: list[str], **kwargs) -> str:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode:
        sys.exit(f"{' '.join(command[:3])} ... failed:\n{done.stderr[-2000:]}")
    return done.stdout


def source_tree(source: Path, commit: str, build_dir: Path) -> Path:
    """``source`` itself if it is a source tree; else ``commit`` extracted from the git
    clone ``source`` into ``build_dir/src``."""
    if (source / "CMakeLists.txt").exists():
        return source
    tree = build_dir / "src"
    stamp = tree / "COMMIT"
    if stamp.exists() and stamp.read_text().strip() == commit:
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "--git-dir", str(source), "archive", commit],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    stamp.write_text(commit)
    return tree


def build_driver(tree: Path, build_dir: Path) -> Path:
    """poprithms' unwind library and the block-chain driver, built unless already there."""
    driver = build_dir / "block_chain"
    if driver.exists() and driver.stat().st_mtime >= DRIVER_SOURCE.stat().st_mtime:
        return driver
    objects = build_dir / "cmake"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    print(f"building poprithms from {tree} (about 90 s) ...", flush=True)
    run(["cmake", "-S", str(tree), "-B", str(objects), *generator, "-Wno-dev",
         "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O3 -DNDEBUG",
         "-DBUILD_TESTING=OFF", "-DPOPRITHMS_BUILD_MOCKS=OFF", "-DPOPRITHMS_WERROR=OFF",
         # Debian's Boost is shared, built for the shared runtime
         "-DBUILD_SHARED_LIBS=OFF", "-DBoost_USE_STATIC_LIBS=OFF",
         "-DBoost_USE_STATIC_RUNTIME=OFF"])
    run(["cmake", "--build", str(objects), "--target", "poprithms-memory-unwind",
         "-j", str(os.cpu_count() or 1)])
    libraries = objects / "poprithms" / "poprithms"
    run(["g++", "-std=c++17", "-O3", "-DNDEBUG",
         "-I", str(tree / "poprithms" / "poprithms" / "include"), str(DRIVER_SOURCE),
         "-o", str(driver), "-L", str(libraries), "-lpoprithms-memory-unwind",
         f"-Wl,-rpath,{libraries}"])
    return driver


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    seconds, score = run(command, cwd=cwd).split()
    return float(seconds), float(score)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True,
                        help="a poprithms source tree, or a bare git clone of it")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--build-dir", type=Path,
                        default=Path("/tmp/popart-unwind-beside-poprithms"))
    parser.add_argument("--blocks", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--variants", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--solvers", nargs="+", default=["hybrid", "deferral", "greedy0"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.build_dir.mkdir(parents=True, exist_ok=True)
    driver = build_driver(source_tree(args.source, args.commit, args.build_dir),
                          args.build_dir)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; poprithms {args.commit[:8]}")
    header = ["blocks", "variant", "poprithms s", *(f"{s} s" for s in args.solvers),
              *(f"{s} ÷ poprithms" for s in args.solvers), "score"]
    rows = []
    for blocks in args.blocks:
        for variant in args.variants:
            best: dict[str, float] = {}
            scores: dict[str, float] = {}
            for _ in range(args.rounds):
                sides = {"poprithms": [str(driver), str(blocks), str(variant)]}
                for solver in args.solvers:
                    code = OURS.format(here=str(HERE), blocks=blocks, variant=variant,
                                       solver=solver)
                    sides[solver] = [sys.executable, "-c", code]
                for side, command in sides.items():
                    seconds, score = timed(command, args.build_dir)
                    best[side] = min(best.get(side, seconds), seconds)
                    scores[side] = score
            if len(set(scores.values())) != 1:
                sys.exit(f"blocks {blocks}, variant {variant}: the scores differ: {scores}")
            rows.append([f"{blocks:,}", str(variant), f"{best['poprithms']:.3f}",
                         *(f"{best[s]:.3f}" for s in args.solvers),
                         *(f"{best[s] / best['poprithms']:.2f}" for s in args.solvers),
                         f"{scores['poprithms']:,.0f}"])
            print("  ".join(rows[-1]), flush=True)
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" ---: " for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
