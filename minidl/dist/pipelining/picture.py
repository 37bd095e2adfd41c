"""The measured schedule as a picture, beside the planned one (needs matplotlib, optional).

``draw(timeline, path)`` takes what ``schedule.timeline()`` returns: the left panel is each rank's
forwards and backwards at the times they ran (white is idle: waiting for a neighbour, or done),
the right one the same schedule as planned, every forward and backward one time step long.
"""
from __future__ import annotations

import re

COLORS = {"F": "#4c72b0", "B": "#dd8452"}


def _planned(ideal: str):
    """(rank, kind, mb, step) of each compute action in a ``schedule.table()`` text (whose cells
    are F3, or 2F3 with several stages per rank)."""
    lines = ideal.splitlines()[1:]
    for step, line in enumerate(lines):
        for rank, cell in enumerate(line.split()[1:]):
            if cell != ".":
                _, kind, mb = re.match(r"^(\d*)([FB])(\d+)$", cell).groups()
                yield rank, kind, int(mb), step


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
    for rank, kind, mb, step in _planned(timeline["ideal"]):
        planned.broken_barh([(step, 1)], (rank - 0.4, 0.8), facecolors=COLORS[kind], edgecolor="white")
        planned.text(step + 0.5, rank, f"{kind}{mb}", ha="center", va="center", fontsize=7, color="white")
    measured.set_title(f"measured: bubble {timeline['bubble']:.1%}")
    measured.set_xlabel("ms since the step's start")
    planned.set_title("planned (unit-time forward and backward)")
    planned.set_xlabel("time step")
    measured.set_yticks(ranks, [f"rank {r}" for r in ranks])
    measured.invert_yaxis()
    for kind, color in COLORS.items():
        measured.bar(0, 0, color=color, label={"F": "forward", "B": "backward"}[kind])
    fig.legend(loc="upper right", ncol=2, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
