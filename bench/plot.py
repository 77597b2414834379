"""Overhead plot: ratios to untraced per workload, one panel per section, drawn by gnuplot.

    plot(panels, "bench/results.png", gnuplot="/usr/bin/gnuplot") -> (path or None, message)

Each panel is (title, groups, series, {(group, series): ratio}); groups are
workloads or benchmarks along the x axis, series the configurations drawn as
clustered bars, on a logarithmic y axis with a dashed line at 1 (untraced).
The data files and the gnuplot script are written next to the PNG in a
``<name>_plot/`` directory, so the figure can be re-drawn or restyled by hand
(``gnuplot bench/results_plot/plot.gp``).  Without gnuplot nothing is drawn
and the reason is returned.
"""

from __future__ import annotations

import math
import os
import subprocess


def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_data(path, groups, series, ratios):
    with open(path, "w") as f:
        f.write("group " + " ".join(_quote(s) for s in series) + "\n")
        for g in groups:
            cells = []
            for s in series:
                v = ratios.get((g, s))
                cells.append("?" if v is None or not math.isfinite(v) or v <= 0 else "{:.4f}".format(v))
            f.write(_quote(g) + " " + " ".join(cells) + "\n")


# Bar colours, given to configurations in order of first appearance, so that a
# configuration keeps its colour across panels.
PALETTE = ("#9e9e9e", "#2ca02c", "#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#8c564b",
           "#17becf", "#e377c2", "#bcbd22", "#393b79", "#637939")


def script(panels, png, data_files, title):
    values = [v for _, _, _, r in panels for v in r.values() if v and v > 0]
    top = max(values + [2.0]) * 1.6
    bottom = min(values + [1.0]) / 1.25
    height = 330 * len(panels) + 60
    lines = [
        "set terminal pngcairo size 1400,{} font 'sans,10' noenhanced".format(height),
        "set output {}".format(_quote(png)),
        "set datafile missing '?'",
        "set style data histograms",
        "set style histogram clustered gap 1",
        "set style fill solid 0.85 border -1",
        "set boxwidth 0.9",
        "set logscale y",
        "set yrange [{:.3f}:{:.3f}]".format(bottom, top),
        "set ytics (0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 10, 15, 20, 30, 50, 100)",
        "set grid ytics",
        "set ylabel '× untraced (log scale)'",
        "set key outside right top vertical",
        "set lmargin at screen 0.06",
        "set rmargin at screen 0.80",
        "set xtics nomirror",
        "set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dashtype 2 linewidth 1.5 front",
        "set multiplot layout {},1 title {}".format(len(panels), _quote(title)),
    ]
    colours = {}
    for _, _, series, _ in panels:
        for name in series:
            colours.setdefault(name, PALETTE[len(colours) % len(PALETTE)])
    for (ptitle, _, series, _), data in zip(panels, data_files):
        lines.append("set title {}".format(_quote(ptitle)))
        parts = []
        for i, name in enumerate(series):
            parts.append("{} using {}{} title columnheader({}) linecolor rgb {}".format(
                _quote(data) if i == 0 else "''", i + 2, ":xtic(1)" if i == 0 else "", i + 2,
                _quote(colours[name])))
        lines.append("plot " + ", \\\n     ".join(parts))
    lines.append("unset multiplot")
    return "\n".join(lines) + "\n"


def plot(panels, png, gnuplot, title="Ocular: overhead vs untraced"):
    """Draw the panels that have data into png; return (png or None, message)."""
    panels = [p for p in panels if p[1] and p[2] and p[3]]
    if not panels:
        return None, "no ratios to plot"
    if not gnuplot:
        return None, "gnuplot not found (apt-get install gnuplot-nox, or bench/setup_env.sh --gnuplot)"
    png = os.path.abspath(png)
    workdir = os.path.splitext(png)[0] + "_plot"
    os.makedirs(workdir, exist_ok=True)
    data_files = []
    for i, (_, groups, series, ratios) in enumerate(panels):
        path = os.path.join(workdir, "panel{}.dat".format(i + 1))
        write_data(path, groups, series, ratios)
        data_files.append(path)
    gp = os.path.join(workdir, "plot.gp")
    with open(gp, "w") as f:
        f.write(script(panels, png, data_files, title))
    proc = subprocess.run([gnuplot, gp], capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(png):
        return None, "gnuplot failed (exit {}): {}".format(
            proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1])
    return png, "wrote " + png
