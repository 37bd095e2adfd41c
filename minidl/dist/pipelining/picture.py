"""The measured schedule as a picture, beside the planned one (needs matplotlib, optional).

``draw(timeline, path)`` takes what ``schedule.timeline()`` returns: the left panel is each rank's
forwards and backwards at the times they ran (white is idle: waiting for a neighbour, or done),
the right one the same schedule as planned, a forward, input pass or weight pass one time step
long and a full backward two.
"""
from __future__ import annotations

import re

COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#55a868"}
NAMES = {"F": "forward", "B": "backward", "I": "input gradients (I)", "W": "weight gradients (W)"}


def _planned(ideal: str):
    """(rank, kind, mb, step, steps) of each compute action in a ``schedule.table()`` text (whose
    cells are F3, or 2F3 with several stages per rank; an action lasting n steps fills n rows)."""
    rows = [line.split()[1:] for line in ideal.splitlines()[1:]]
    for rank in range(len(rows[0]) if rows else 0):
        step = 0
        while step < len(rows):
            cell, steps = rows[step][rank], 1
            while step + steps < len(rows) and rows[step + steps][rank] == cell and cell != ".":
                steps += 1
            if cell != ".":
                _, kind, mb = re.match(r"^(\d*)([FBIW])(\d+)$", cell).groups()
                yield rank, kind, int(mb), step, steps
            step += steps


def draw(timeline: dict, path: str, title: str = "") -> str:
    """Write the two panels to ``path`` (PNG or any format matplotlib knows); returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({e["rank"] for e in timeline["events"]})
    fig, (measured, planned) = plt.subplots(1, 2, figsize=(12, 1.0 + 0.5 * len(ranks)), sharey=True)
    for e in timeline["events"]:
        if e["kind"] in COLORS:
            measured.broken_barh([(e["start"] * 1e3, (e["end"] - e["start"]) * 1e3)], (e["rank"] - 0.4, 0.8),
                                 facecolors=COLORS[e["kind"]], edgecolor="white", linewidth=0.3)
    for rank, kind, mb, step, steps in _planned(timeline["ideal"]):
        planned.broken_barh([(step, steps)], (rank - 0.4, 0.8), facecolors=COLORS[kind], edgecolor="white")
        planned.text(step + steps / 2, rank, f"{kind}{mb}", ha="center", va="center", fontsize=7, color="white")
    measured.set_title(f"measured: bubble {timeline['bubble']:.1%}")
    measured.set_xlabel("ms since the step's start")
    planned.set_title("planned (a backward two time steps, the rest one)")
    planned.set_xlabel("time step")
    measured.set_yticks(ranks, [f"rank {r}" for r in ranks])
    measured.invert_yaxis()
    kinds = {e["kind"] for e in timeline["events"]}
    for kind, color in COLORS.items():
        if kind in kinds:
            measured.bar(0, 0, color=color, label=NAMES[kind])
    fig.legend(loc="upper right", ncol=4, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
