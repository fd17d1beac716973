"""Regenerate docs/images/: the examples of poprithms' unwinding notes
(``popart_unwind.unwind.examples``), solved with Greedy0 and drawn with
``popart_unwind.unwind.draw``.

Run from anywhere: ``python docs/make_figures.py [OUTPUT_DIR]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from popart_unwind.unwind import examples
from popart_unwind.unwind.draw import draw

ALGO = "greedy0"  # named, not the default, so the figures do not move with the default

FIGURES = {
    "unwind_basic.png": (examples.basic, "Sink tied to a Source, feeding a Barrier"),
    "unwind_matmul.png": (
        examples.matmul,
        "out = matmul(X.dimShuffle(1 0), concat(Y, Z.reverse(1)))",
    ),
    "unwind_unbroadcast_add.png": (
        examples.unbroadcast_add,
        "Out = matmul(A, B) + C (matmul a Barrier)",
    ),
    "unwind_broadcast_add.png": (
        lambda: examples.broadcast_add(2.0, (20, 20, 6, 3), (6, 1)),
        "Bias add: (6, 1) bias + (20, 20, 6, 3)",
    ),
    "unwind_call_copies.png": (
        examples.call_copies,
        "Call(A, B) + Call(C, D) through one subgraph",
    ),
}


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (build, title) in FIGURES.items():
        graph, _ = build()
        solution = graph.solve(ALGO)
        written = draw(solution, out_dir / name, title=f"{title} — {ALGO}")
        print(f"{written}: score {solution.score():g} of {solution.upper_bound():g}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "images")
