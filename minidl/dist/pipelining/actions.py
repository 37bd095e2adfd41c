"""A pipeline schedule as data: each rank's list of actions, checked before anything runs.

An action is a forward (F) or backward (B) of one micro-batch on a stage, or the transfer around
it: RECV_F/SEND_F carry a stage's output to the next stage, RECV_B/SEND_B the gradient of that
output back. ``validate`` plays the lists against each other (sends never block, a receive waits
for its send) and rejects a schedule with a backward before its forward, an action twice or
missing, a send without its receive or the reverse, or ranks that would wait on each other forever. ``table`` is the same
play, one compute action per rank per time step: the schedule's ideal picture.
"""
from __future__ import annotations

from collections import namedtuple

COMPUTE = ("F", "B")


class Action(namedtuple("Action", "kind stage mb")):
    """kind: F, B, SEND_F, RECV_F, SEND_B or RECV_B; stage; micro-batch."""
    __slots__ = ()

    def __str__(self):
        return f"{self.kind}{self.mb}" if self.kind in COMPUTE else f"{self.kind}({self.mb})"


def with_transfers(stage, num_stages, compute):
    """A stage's compute actions [(kind, mb)] with the receive before and the send after each."""
    out = []
    for kind, mb in compute:
        if kind == "F":
            out += [Action("RECV_F", stage, mb)] if stage > 0 else []
            out += [Action("F", stage, mb)]
            out += [Action("SEND_F", stage, mb)] if stage < num_stages - 1 else []
        else:
            out += [Action("RECV_B", stage, mb)] if stage < num_stages - 1 else []
            out += [Action("B", stage, mb)]
            out += [Action("SEND_B", stage, mb)] if stage > 0 else []
    return out


def _peer(action):
    """(the peer stage, the action that answers this one there) for a transfer."""
    kind, stage, mb = action
    return {"SEND_F": (stage + 1, Action("RECV_F", stage + 1, mb)),
            "RECV_F": (stage - 1, Action("SEND_F", stage - 1, mb)),
            "SEND_B": (stage - 1, Action("RECV_B", stage - 1, mb)),
            "RECV_B": (stage + 1, Action("SEND_B", stage + 1, mb))}[kind]


def _play(programs, one_compute_per_step):
    """Run the per-stage programs against each other; return the rows of compute actions per time
    step, or raise naming what never happens."""
    done = [set() for _ in programs]
    pos = [0] * len(programs)
    rows = []
    while any(p < len(prog) for p, prog in zip(pos, programs)):
        row, progressed, sent = [None] * len(programs), False, []
        for s, prog in enumerate(programs):
            while pos[s] < len(prog):
                action = prog[pos[s]]
                if action.kind.startswith("RECV"):
                    peer, send = _peer(action)
                    if send not in done[peer]:
                        break
                elif action.kind in COMPUTE:
                    if one_compute_per_step and row[s] is not None:
                        break
                    row[s] = action
                if action.kind.startswith("SEND"):
                    sent.append(action)  # (received from the next time step on)
                else:
                    done[s].add(action)
                pos[s] += 1
                progressed = True
        for action in sent:
            done[action.stage].add(action)
        if not progressed:
            stuck = {s: str(prog[pos[s]]) for s, prog in enumerate(programs) if pos[s] < len(prog)}
            raise ValueError(f"pipeline schedule: the stages wait on each other forever; stuck at {stuck} "
                             f"(stage: next action)")
        if any(a is not None for a in row):
            rows.append(row)
    return rows


def validate(programs) -> None:
    """Raise ValueError naming the problem unless every stage's program can run to its end."""
    micro_batches = {a.mb for prog in programs for a in prog if a.kind == "F"}
    for s, prog in enumerate(programs):
        done = set()
        for action in prog:
            if action.stage != s:
                raise ValueError(f"pipeline schedule: stage {s}'s program holds {action} of stage {action.stage}")
            if action in done:
                raise ValueError(f"pipeline schedule: stage {s} runs {action} twice")
            done.add(action)
            if action.kind == "B" and Action("F", s, action.mb) not in done:
                raise ValueError(f"pipeline schedule: stage {s} runs B{action.mb} before F{action.mb}")
            if action.kind.startswith(("SEND", "RECV")):
                peer, answer = _peer(action)
                if not 0 <= peer < len(programs) or answer not in programs[peer]:
                    raise ValueError(f"pipeline schedule: stage {s}'s {action} has no matching {answer} on "
                                     f"stage {peer}")
        for kind in COMPUTE:
            missing = sorted(micro_batches - {a.mb for a in prog if a.kind == kind})
            if missing:
                raise ValueError(f"pipeline schedule: stage {s} never runs {kind}{missing[0]} (every stage runs "
                                 f"F and B of micro-batches {sorted(micro_batches)})")
    _play(programs, one_compute_per_step=False)


def table(programs) -> str:
    """The schedule as text: one column per stage, one row per time step of unit-time compute."""
    rows = _play(programs, one_compute_per_step=True)
    width = max(len(f"stage {len(programs) - 1}"), *(len(str(a)) for row in rows for a in row if a is not None)) + 2
    lines = ["step  " + "".join(f"stage {s}".ljust(width) for s in range(len(programs))).rstrip()]
    for t, row in enumerate(rows):
        lines.append(f"{t:>4}  " + "".join((str(a) if a else ".").ljust(width) for a in row).rstrip())
    return "\n".join(lines)


def ideal_bubble(programs) -> float:
    """The bubble of the schedule as planned (unit-time forwards and backwards): the idle fraction
    of the time steps, averaged over the stages."""
    rows = _play(programs, one_compute_per_step=True)
    idle = [sum(row[s] is None for row in rows) for s in range(len(programs))]
    return sum(idle) / (len(rows) * len(programs))
