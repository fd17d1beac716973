"""Memory told to the user: the fullest-tile line under the summary, the report's memory
map and fullest-tile table, and that report and plan file stay byte-identical."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
from cli_runner import run

from popart_unwind.cli import main
from popart_unwind.report.pictures import tile_grid, tile_memory_heatmap

TILES = 8


def test_the_summary_names_our_fullest_tile(model_path):
    status, out, err = run("plan", str(model_path), "--tiles", str(TILES))
    assert (status, err) == (0, "")
    lines = [line for line in out.splitlines() if line.startswith("fullest tile ")]
    assert len(lines) == 1
    assert re.fullmatch(r"fullest tile \d+: [\d.,]+ (B|KiB) of 624 KiB at op \S+ "
                        r"\(largest: .+\)", lines[0]), lines[0]
    assert "over the budget" not in lines[0]


def test_quiet_prints_no_fullest_tile(model_path):
    assert run("plan", str(model_path), "--tiles", str(TILES), "--quiet")[1] == ""


def test_the_report_has_the_memory_map_and_the_fullest_tiles(model_path, out_dir):
    report = out_dir / "report"
    assert run("plan", str(model_path), "--report", str(report), "--tiles", str(TILES),
               "--quiet")[0] == 0
    page = (report / "index.html").read_text()
    section = page.split("<h2>Fullest tile</h2>")[1].split("<h2>")[0]
    image = (report / "memory_map.png").read_bytes()
    assert image.startswith(b"\x89PNG")
    assert base64.b64encode(image).decode() in section  # the map, embedded
    rows = re.findall(r"<tr><td class=\"text\">([^<]+)</td><td class=\"num\">(\d+)</td>",
                      section)
    assert [plan for plan, _ in rows] == ["ours", "PopART baseline"]
    assert all(0 <= int(tile) < TILES for _, tile in rows)


def test_report_and_plan_file_are_byte_identical_across_runs(model_path, out_dir):
    outputs = []
    for name in ("first", "second"):
        folder = out_dir / name
        assert main(["plan", str(model_path), "--report", str(folder), "--out",
                     str(folder / "plan.json"), "--tiles", str(TILES), "--quiet"],
                    stdout=io.StringIO()) == 0
        outputs.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    assert outputs[0] == outputs[1]
    assert "memory_map.png" in outputs[0]


def test_tile_grids():
    assert tile_grid(1472) == (32, 46)
    assert tile_grid(4) == (2, 2)
    rows, columns = tile_grid(1471)  # prime: near-square, last row partly empty
    assert rows * columns >= 1471 > (rows - 1) * columns
    for tiles in range(1, 200):
        rows, columns = tile_grid(tiles)
        assert rows * columns >= tiles > (rows - 1) * columns


def test_the_heatmap_is_deterministic_and_scaled_to_the_budget():
    panels = {"ours": {"always-live": np.arange(12), "peak": np.arange(12) * 2},
              "popart": {"always-live": np.ones(12), "peak": np.full(12, 30)}}
    first = tile_memory_heatmap("t", panels, budget=20, marked={"ours": 11, "popart": 0})
    assert first == tile_memory_heatmap("t", panels, budget=20,
                                        marked={"ours": 11, "popart": 0})
    assert first != tile_memory_heatmap("t", panels, budget=40,
                                        marked={"ours": 11, "popart": 0})
