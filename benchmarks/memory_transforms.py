"""What each memory transform does to the training steps: peak tile memory, exchange, cycles.

For each model and each setting (``--settings``; a setting is a list of session options,
``none`` the pipeline as it is), the training step is planned as ``benchmarks/models.py``
plans it (ours and PopART's heuristic, on the same transformed graph) and the table gives,
per plan: the liveness peak of the fullest tile, the part of it that is always live, the
exchanged bytes and the step's cycles, each setting beside the model's first setting.

    python benchmarks/memory_transforms.py --sizes tiny
    python benchmarks/memory_transforms.py --sizes real --models gpt2 bert \\
        --settings none recompute=standard recompute=recompute_all

Graphs run one per fresh process, as in ``benchmarks/models.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models as suite  # benchmarks/models.py, beside this file

DEFAULT_SETTINGS = ("none", "decompose_grad_sum=true", "recompute=norm_only",
                    "recompute=standard", "recompute=recompute_all",
                    "serialize_matmuls=output_channels:2", "enable_outlining=true")
COLUMNS = ("model", "setting", "peak KiB o/P", "o peak ÷ none", "always-live KiB o/P",
           "exchange MB o/P", "o exchange ÷ none", "cycles k o/P", "o cycles ÷ none",
           "fits o/P", "o÷P peak")


def options_of(setting: str) -> tuple[str, ...]:
    return () if setting == "none" else tuple(setting.split(","))


def cells(row: dict[str, Any], first: dict[str, Any] | None) -> list[str]:
    name = f"{row['model']}-{row['size']}"
    if "failed" in row:
        return [name, row["setting"], row["failed"], *[""] * (len(COLUMNS) - 3)]
    ours, popart = row["costs"]["ours"], row["costs"]["popart"]

    def both(figure: str, scale: float, digits: int) -> str:
        return f"{ours[figure] / scale:,.{digits}f} / {popart[figure] / scale:,.{digits}f}"

    def against_first(figure: str) -> str:
        if first is None or "failed" in first:
            return "-"
        return f"{ours[figure] / first['costs']['ours'][figure]:.3f}"

    return [name, row["setting"], both("peak_tile_bytes", 1024, 1),
            against_first("peak_tile_bytes"), both("always_live_max_tile_bytes", 1024, 1),
            both("exchange_bytes", 1e6, 2), against_first("exchange_bytes"),
            both("cycles", 1e3, 1), against_first("cycles"),
            f"{'yes' if ours['fits'] else 'no'} / {'yes' if popart['fits'] else 'no'}",
            f"{ours['peak_tile_bytes'] / popart['peak_tile_bytes']:.3f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny")
    parser.add_argument("--models", nargs="+", default=[",".join(suite.MODELS)])
    parser.add_argument("--settings", nargs="+", default=list(DEFAULT_SETTINGS),
                        help="each: none, or session options KEY=VALUE joined by commas")
    parser.add_argument("--tiles", type=int, default=1472)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    print(f"machine: {suite.machine()}; {args.tiles} tiles", flush=True)
    rows = []
    for size in suite._names(args.sizes, suite.SIZES, "sizes"):
        for model in suite._names(" ".join(args.models), suite.MODELS, "models"):
            first = None
            for setting in args.settings:
                job = suite.make_job(model, size, "training", tiles=args.tiles,
                                     options=options_of(setting))
                row = {**suite.run_job(job, args.timeout), "setting": setting}
                rows.append(row)
                print("  ".join(cells(row, first)), file=sys.stderr, flush=True)
                first = row if first is None else first
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    table, firsts = [], {}
    for row in rows:
        key = (row["model"], row["size"])
        table.append(cells(row, firsts.get(key)))
        firsts.setdefault(key, row)
    suite.print_table(COLUMNS, table, args.markdown)


if __name__ == "__main__":
    main()
