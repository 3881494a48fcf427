"""Draws a vgen trace (Chrome / Perfetto trace JSON from `vgen ... --trace FILE` or
GET /v1/trace) as an SVG timeline: one row per track, grouped by process (stages, devices,
jobs), one box per span coloured by its name, instants as ticks. Standard library only.

    python -m vgen_trace.picture run.trace.json docs/perf/batch16.svg [--title TEXT]
"""
from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

PALETTE = {
    "preprocess": "#8ecae6", "denoise": "#219ebc", "denoise step": "#023047", "decode": "#ffb703",
    "encode": "#fb8500", "lookup": "#adb5bd", "queued": "#e9ecef",
}
ROW, GAP, LEFT, RIGHT, TOP = 14, 2, 190, 20, 40


def colour(name: str) -> str:
    if name.startswith("queued"):
        return PALETTE["queued"]
    if name.startswith("retry"):
        return "#d00000"
    return PALETTE.get(name, "#6a4c93")


def load(path: Path):
    trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    processes, tracks, order = {}, {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e["name"] == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            tracks[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["name"] == "thread_sort_index":
            order[(e["pid"], e["tid"])] = e["args"]["sort_index"]
    spans = [e for e in events if e.get("ph") in ("X", "i")]
    return processes, tracks, order, spans


def draw(trace_file: Path, out: Path, title: str, width: int = 1400) -> dict:
    processes, tracks, order, spans = load(trace_file)
    if not spans:
        raise SystemExit(f"{trace_file}: no spans")
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e.get("dur", 0) for e in spans)
    scale = (width - LEFT - RIGHT) / max(t1 - t0, 1.0)
    used = sorted({(e["pid"], e["tid"]) for e in spans}, key=lambda k: (k[0], order.get(k, k[1])))
    rows, y, parts = {}, TOP, []
    last_pid = None
    for key in used:
        if key[0] != last_pid:
            y += 6
            parts.append(f'<text x="4" y="{y + 10}" font-weight="bold">{html.escape(processes.get(key[0], str(key[0])))}</text>')
            y += ROW + GAP
            last_pid = key[0]
        rows[key] = y
        parts.append(f'<text x="12" y="{y + ROW - 3}">{html.escape(tracks.get(key, str(key)))}</text>')
        y += ROW + GAP
    height = y + 40
    for e in spans:
        ry = rows[(e["pid"], e["tid"])]
        x = LEFT + (e["ts"] - t0) * scale
        tip = html.escape(f'{e["name"]} {e.get("dur", 0) / 1000:.1f} ms {json.dumps(e.get("args", {}))}')
        if e["ph"] == "i":
            parts.append(f'<rect x="{x - 1:.1f}" y="{ry}" width="2" height="{ROW}" fill="{colour(e["name"])}"><title>{tip}</title></rect>')
            continue
        w = max(e["dur"] * scale, 0.5)
        parts.append(f'<rect x="{x:.1f}" y="{ry}" width="{w:.1f}" height="{ROW}" fill="{colour(e["name"])}" '
                     f'stroke="#fff" stroke-width="0.3"><title>{tip}</title></rect>')
        batch = e.get("args", {}).get("batch")
        if batch is not None and w > 14:
            parts.append(f'<text x="{x + 2:.1f}" y="{ry + ROW - 3}" fill="#fff" font-size="9">{batch}</text>')
    # Time axis, one tick per second (or per 100 ms for short traces).
    span_s = (t1 - t0) / 1e6
    step = 1.0 if span_s > 2 else 0.1
    k = 0.0
    while k <= span_s + 1e-9:
        x = LEFT + k * 1e6 * scale
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{y}" stroke="#ddd" stroke-width="0.5"/>')
        parts.append(f'<text x="{x:.1f}" y="{TOP - 8}" font-size="9" text-anchor="middle">{k:g} s</text>')
        k += step
    legend_x = LEFT
    for name in ["queued", "preprocess", "denoise", "denoise step", "decode", "encode"]:
        parts.append(f'<rect x="{legend_x}" y="{y + 14}" width="12" height="10" fill="{colour(name)}"/>'
                     f'<text x="{legend_x + 16}" y="{y + 23}">{name}</text>')
        legend_x += 110
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="10"><rect width="100%" height="100%" fill="#fff"/>'
           f'<text x="4" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>' + "".join(parts) + "</svg>\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg)
    return {"tracks": len(used), "spans": len(spans), "seconds": span_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("svg", type=Path)
    ap.add_argument("--title", default="vgen trace")
    a = ap.parse_args(argv)
    print(json.dumps(draw(a.trace, a.svg, a.title)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
