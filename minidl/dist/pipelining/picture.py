"""The measured schedule as a picture, above the planned one (drawn with matplotlib).

``draw(timeline, path, title)`` takes what ``schedule.timeline()`` returns: the upper panel is
each rank's forwards and backwards at the times they ran (white is idle: waiting for a neighbour,
or done), the lower one the same schedule as planned, each action as many time steps long as the
plan says (a full backward two, a forward, input pass or weight pass one). With several stages
per rank, a rank's later stages are lighter and each planned cell names its stage below the action.
The planned cells are computed apart from the drawing (``planned``), so they are checked without
matplotlib, which is imported only here, when a picture is drawn.
"""
from __future__ import annotations

import re
import textwrap
from collections import namedtuple

COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#55a868"}
NAMES = {"F": "forward (F)", "B": "backward (B)", "I": "input gradients (I)", "W": "weight gradients (W)"}
STEP_INCHES = 0.22     # room for a label like "F12" in a one-step cell at the default width
FONT_SIZE = 7

Cell = namedtuple("Cell", "rank stage kind mb start steps label")


def planned(ideal: str) -> list[Cell]:
    """The compute actions of a ``schedule.table()`` text, one ``Cell`` each: on which rank and
    stage, from which time step and for how many (an action lasting n steps fills n rows), and its
    label ("F3"; with several stages per rank, whose cells read 2F3, "F3" over "s2")."""
    rows = [line.split()[1:] for line in ideal.splitlines()[1:]]
    cells = []
    for rank in range(len(rows[0]) if rows else 0):
        step = 0
        while step < len(rows):
            cell, steps = rows[step][rank], 1
            while step + steps < len(rows) and rows[step + steps][rank] == cell and cell != ".":
                steps += 1
            if cell != ".":
                stage, kind, mb = re.match(r"^(\d*)([FBIW])(\d+)$", cell).groups()
                label = f"{kind}{mb}" + (f"\ns{stage}" if stage else "")
                cells.append(Cell(rank, int(stage) if stage else rank, kind, int(mb), step, steps, label))
            step += steps
    return cells


def planned_bubble(cells: list[Cell]) -> float:
    """The idle fraction of the planned time steps, averaged over the ranks."""
    ranks = 1 + max(c.rank for c in cells)
    length = max(c.start + c.steps for c in cells)
    return 1 - sum(c.steps for c in cells) / (length * ranks)


def step_lengths(cells: list[Cell]) -> str:
    """What a time step is, for the kinds the plan holds: "F 1, B 2" (time steps per action)."""
    lengths = {c.kind: c.steps for c in cells}
    return ", ".join(f"{kind} {lengths[kind]}" for kind in COLORS if kind in lengths)


def _shade(color: str, level: float) -> str:
    """``color`` mixed with white by ``level`` (0: itself, 1: white)."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * level):02x}" for c in rgb)


def _stage_shades(stages_by_rank: dict) -> dict:
    """How much lighter each stage is drawn: a rank's first stage full colour, its later ones lighter."""
    return {s: 0.45 * k / max(1, len(held) - 1) for held in stages_by_rank.values() for k, s in enumerate(sorted(held))}


def draw(timeline: dict, path: str, title: str = "", note: str = "") -> str:
    """Write the two panels to ``path`` (PNG or any format matplotlib knows); returns ``path``.
    ``title`` names what ran (the model, the schedule); the ranks, stages and micro-batches are
    added from the timeline. ``note`` is a caption under the panels, for what the picture alone
    would mislead about (how it was measured)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = planned(timeline["ideal"])
    ranks = sorted({c.rank for c in cells})
    stages_by_rank = {r: {c.stage for c in cells if c.rank == r} for r in ranks}
    shades = _stage_shades(stages_by_rank)
    several = any(len(held) > 1 for held in stages_by_rank.values())
    length = max(c.start + c.steps for c in cells)
    width = min(24.0, max(10.0, 2.0 + STEP_INCHES * length))
    caption = textwrap.fill(note, width=int(16 * width))
    caption_inches = 0.14 * (caption.count("\n") + 1.5) if note else 0.0
    fig, (measured, plan) = plt.subplots(2, 1, figsize=(width, 2.0 + 0.9 * len(ranks) + caption_inches))
    for e in timeline["events"]:
        if e["kind"] in COLORS:
            color = _shade(COLORS[e["kind"]], shades.get(e["stage"], 0))
            measured.broken_barh([(e["start"] * 1e3, (e["end"] - e["start"]) * 1e3)], (e["rank"] - 0.4, 0.8),
                                 facecolors=color, edgecolor="white", linewidth=0.3)
    labels = []
    for c in cells:
        plan.broken_barh([(c.start, c.steps)], (c.rank - 0.4, 0.8), facecolors=_shade(COLORS[c.kind], shades[c.stage]),
                         edgecolor="white")
        labels.append((c, plan.text(c.start + c.steps / 2, c.rank, c.label, ha="center", va="center",
                                    fontsize=FONT_SIZE, color="white" if shades[c.stage] < 0.3 else "black")))
    plan.set_xlim(0, length)
    measured.set_title(f"measured: bubble {timeline['bubble']:.1%}", fontsize=10)
    measured.set_xlabel("ms since the step's start")
    cell_text = "; a cell: action and micro-batch over its stage (s2: stage 2), a rank's later stages lighter"
    plan.set_title(f"planned: bubble {planned_bubble(cells):.1%}; time steps per action: {step_lengths(cells)}"
                   f"{cell_text if several else ''}", fontsize=10)
    plan.set_xlabel("time step")
    for ax in (measured, plan):
        ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
        ax.set_ylim(max(ranks) + 0.6, min(ranks) - 0.6)
    for kind, color in COLORS.items():
        if any(c.kind == kind for c in cells):
            measured.bar(0, 0, color=color, label=NAMES[kind])
    stages = 1 + max(c.stage for c in cells)
    micro_batches = 1 + max(c.mb for c in cells)
    facts = f"{len(ranks)} ranks, {stages} stages, m = {micro_batches} micro-batches"
    height = fig.get_figheight()
    fig.suptitle(f"{title}: {facts}" if title else facts, x=0.01, y=1 - 0.05 / height, ha="left", va="top",
                 fontsize=11)
    fig.legend(loc="upper left", bbox_to_anchor=(0.0, 1 - 0.3 / height), ncol=4, fontsize=8, frameon=False)
    if note:
        fig.text(0.01, 0.01, caption, ha="left", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, caption_inches / height, 1, 1 - 0.45 / height))
    _drop_labels_that_do_not_fit(fig, plan, labels)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _drop_labels_that_do_not_fit(fig, ax, labels):
    """Hide each planned label wider than its cell (measured in pixels, as drawn), so that no two
    run together however many time steps the plan has."""
    renderer = fig.canvas.get_renderer()
    for c, text in labels:
        left, right = ax.transData.transform([(c.start, 0), (c.start + c.steps, 0)])[:, 0]
        if text.get_window_extent(renderer).width > 0.9 * (right - left):
            text.set_visible(False)
