"""A pipeline schedule as data: each rank's list of actions, checked before anything runs.

Stage s runs on rank s % ranks: one stage per rank, or several (interleaved schedules).

An action is a forward (F) or backward (B) of one micro-batch on a stage, or the transfer around
it: RECV_F/SEND_F carry a stage's output to the next stage, RECV_B/SEND_B the gradient of that
output back. Zero-bubble schedules split B in two (``autograd.split_backward``): I, the gradient of
the stage's input (sent upstream at once), and W, its weights' gradients, deferred to fill idle
time. ``validate`` plays the lists against each other (sends never block, a receive waits for
its send) and rejects a schedule with a backward before its forward (or W before I), an action
twice or missing, a send without its receive or the reverse, or ranks that would wait on each
other forever. ``table`` is the same play, one compute action per rank per time step: the
schedule's ideal picture; ``ideal_bubble`` times it with B as long as I and W together.
"""
from __future__ import annotations

from collections import namedtuple

COMPUTE = ("F", "B", "I", "W")
BACKWARDS = ("B", "I")        # the backwards that take the output's gradient and send the input's
COSTS = {"F": 1, "B": 2, "I": 1, "W": 1}   # time units of each, for ideal_bubble


class Action(namedtuple("Action", "kind stage mb")):
    """kind: F, B, I, W, SEND_F, RECV_F, SEND_B or RECV_B; stage; micro-batch."""
    __slots__ = ()

    def __str__(self):
        return f"{self.kind}{self.mb}" if self.kind in COMPUTE else f"{self.kind}({self.mb})"


def with_transfers(stage, num_stages, compute):
    """A stage's compute actions [(kind, mb)] with the receive before and the send after each."""
    return program_of([(kind, stage, mb) for kind, mb in compute], num_stages)


def program_of(compute, num_stages):
    """A rank's compute actions [(kind, stage, mb)], each with the receive it needs before it and
    the send it owes after it."""
    out = []
    for kind, stage, mb in compute:
        if kind == "F":
            out += [Action("RECV_F", stage, mb)] if stage > 0 else []
            out += [Action("F", stage, mb)]
            out += [Action("SEND_F", stage, mb)] if stage < num_stages - 1 else []
        elif kind in BACKWARDS:
            out += [Action("RECV_B", stage, mb)] if stage < num_stages - 1 else []
            out += [Action(kind, stage, mb)]
            out += [Action("SEND_B", stage, mb)] if stage > 0 else []
        else:
            out += [Action(kind, stage, mb)]
    return out


def _peer(action):
    """(the peer stage, the action that answers this one there) for a transfer."""
    kind, stage, mb = action
    return {"SEND_F": (stage + 1, Action("RECV_F", stage + 1, mb)),
            "RECV_F": (stage - 1, Action("SEND_F", stage - 1, mb)),
            "SEND_B": (stage - 1, Action("RECV_B", stage - 1, mb)),
            "RECV_B": (stage + 1, Action("SEND_B", stage + 1, mb))}[kind]


def num_stages_of(programs) -> int:
    return 1 + max(a.stage for program in programs for a in program)


def _label(action, several):
    return f"{action.stage}{action}" if several else str(action)


def _play(programs, one_compute_per_step):
    """Run the per-rank programs against each other; return the rows of compute actions per time
    step, or raise naming what never happens. (An action that takes several steps appears that
    many times in a row: see ``_lasting``.)"""
    ranks, several = len(programs), num_stages_of(programs) > len(programs)
    done = [set() for _ in programs]
    pos = [0] * ranks
    rows = []
    while any(p < len(prog) for p, prog in zip(pos, programs)):
        row, progressed, sent = [None] * ranks, False, []
        for r, prog in enumerate(programs):
            while pos[r] < len(prog):
                action = prog[pos[r]]
                if action.kind.startswith("RECV"):
                    peer, send = _peer(action)
                    if send not in done[peer % ranks]:
                        break
                elif action.kind in COMPUTE:
                    if one_compute_per_step and row[r] is not None:
                        break
                    row[r] = action
                if action.kind.startswith("SEND"):
                    sent.append((r, action))  # (received from the next time step on)
                else:
                    done[r].add(action)
                pos[r] += 1
                progressed = True
        for r, action in sent:
            done[r].add(action)
        if not progressed:
            stuck = {r: _label(prog[pos[r]], several) for r, prog in enumerate(programs) if pos[r] < len(prog)}
            raise ValueError(f"pipeline schedule: the stages wait on each other forever; stuck at {stuck} "
                             f"(rank: next action)")
        if any(a is not None for a in row):
            rows.append(row)
    return rows


def validate(programs) -> None:
    """Raise ValueError naming the problem unless every rank's program can run to its end."""
    ranks, num_stages = len(programs), num_stages_of(programs)
    micro_batches = {a.mb for prog in programs for a in prog if a.kind == "F"}
    for r, prog in enumerate(programs):
        done = set()
        for action in prog:
            s = action.stage
            if s % ranks != r:
                raise ValueError(f"pipeline schedule: rank {r}'s program holds {action} of stage {s}, which runs "
                                 f"on rank {s % ranks}")
            if action in done:
                raise ValueError(f"pipeline schedule: stage {s} runs {action} twice")
            done.add(action)
            if action.kind in BACKWARDS and Action("F", s, action.mb) not in done:
                raise ValueError(f"pipeline schedule: stage {s} runs {action} before F{action.mb}")
            if action.kind == "W" and Action("I", s, action.mb) not in done:
                order = "before" if Action("I", s, action.mb) in prog else "without"
                raise ValueError(f"pipeline schedule: stage {s} runs {action} {order} I{action.mb} (the weights' "
                                 f"gradients need the input pass first)")
            if action.kind.startswith(("SEND", "RECV")):
                peer, answer = _peer(action)
                if not 0 <= peer < num_stages or answer not in programs[peer % ranks]:
                    raise ValueError(f"pipeline schedule: stage {s}'s {action} has no matching {answer} on "
                                     f"stage {peer}")
    for s in range(num_stages):
        ran = {kind: {a.mb for a in programs[s % ranks] if a.kind == kind and a.stage == s} for kind in COMPUTE}
        both = sorted(ran["B"] & (ran["I"] | ran["W"]))
        if both:
            raise ValueError(f"pipeline schedule: stage {s} runs both B{both[0]} and its split halves I, W")
        missing = [("F", mb) for mb in sorted(micro_batches - ran["F"])]
        missing += [("W" if mb in ran["I"] else "B", mb) for mb in sorted(micro_batches - ran["B"] - ran["W"])]
        if missing:
            raise ValueError(f"pipeline schedule: stage {s} never runs {missing[0][0]}{missing[0][1]} (every stage "
                             f"runs F and B, or F, I and W, of micro-batches {sorted(micro_batches)})")
    _play(programs, one_compute_per_step=False)


def _lasting(programs, costs):
    """The programs with each compute action repeated for as many time steps as it takes."""
    return [[a for a in program for _ in range(costs[a.kind] if a.kind in COMPUTE else 1)] for program in programs]


def table(programs, costs=None) -> str:
    """The schedule as text: one column per rank, one row per time step (with several stages per
    rank, each action is prefixed by its stage: 2F0). Every compute action takes one step, or
    ``costs[kind]`` steps (``table(programs, COSTS)``: B twice as long as F, I or W)."""
    rows = _play(programs if costs is None else _lasting(programs, costs), one_compute_per_step=True)
    several = num_stages_of(programs) > len(programs)
    head = [f"rank {r}" if several else f"stage {r}" for r in range(len(programs))]
    cells = [[_label(a, several) if a else "." for a in row] for row in rows]
    width = max(len(h) for h in head + [c for row in cells for c in row]) + 2
    lines = ["step  " + "".join(h.ljust(width) for h in head).rstrip()]
    for t, row in enumerate(cells):
        lines.append(f"{t:>4}  " + "".join(c.ljust(width) for c in row).rstrip())
    return "\n".join(lines)


def ideal_bubble(programs, costs=COSTS) -> float:
    """The bubble of the schedule as planned (by default F, I and W take a unit of time, B two):
    the idle fraction of the time steps, averaged over the ranks."""
    rows = _play(_lasting(programs, costs), one_compute_per_step=True)
    idle = [sum(row[r] is None for row in rows) for r in range(len(programs))]
    return sum(idle) / (len(rows) * len(programs))
