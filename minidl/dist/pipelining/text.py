"""Schedules as text, to read, write by hand and run: one line per rank, its actions in order.

    # 1F1B, 2 stages, 3 micro-batches
    rank 0: 0F0 0F1 0B0 0F2 0B1 0B2
    rank 1: 1F0 1B0 1F1 1B1 1F2 1B2

An action is ``<stage><kind><micro-batch>``: ``0F3`` is stage 0's forward of micro-batch 3, ``1B2``
stage 1's backward of micro-batch 2; a zero-bubble schedule splits a backward into ``1I2``, the
gradient of the stage's input, and ``1W2``, its weights' gradients (torch's letters; the paper's B
is I here). Stage s runs on rank s % ranks (a rank may hold several). Transfers are implied (the receive before each forward and
backward that needs one, the send after), or written out on a line, where they are then taken as
they stand: ``1RECV_F0``, ``0SEND_F0``, ``0RECV_B0``, ``1SEND_B0``. ``#`` starts a comment; the
``rank R:`` prefix is optional (line i is then rank i). ``loads`` validates what it reads
(``actions.validate``); ``dumps`` writes any schedule's programs, so the built-in ones can be
saved, edited and run with ``ScheduleFromText``.
"""
from __future__ import annotations

import re

from . import actions
from .actions import COMPUTE, Action

TOKEN = re.compile(r"^(\d+)(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B)(\d+)$")
LINE = re.compile(r"^\s*(?:rank\s+(\d+)\s*:)?(.*)$")


def dumps(programs, transfers=False) -> str:
    """The programs as text, one line per rank (with ``transfers`` the sends and receives too)."""
    return "".join(f"rank {s}: " + " ".join(f"{a.stage}{a.kind}{a.mb}" for a in program
                                            if transfers or a.kind in COMPUTE) + "\n"
                   for s, program in enumerate(programs))


def loads(text: str) -> list:
    """The per-rank programs a schedule text describes, validated; a ValueError names the line and
    action at fault."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.split("#", 1)[0]
        if not body.strip():
            continue
        rank, tokens = LINE.match(body).groups()
        if rank is not None and int(rank) != len(lines):
            raise ValueError(f"schedule text, line {number}: rank {rank} where rank {len(lines)} comes next")
        lines.append((number, tokens.split()))
    parsed = [[_action(token, rank, number, len(lines)) for token in tokens]
              for rank, (number, tokens) in enumerate(lines)]
    num_stages = 1 + max((a.stage for program in parsed for a in program), default=0)
    programs = []
    for program in parsed:
        if not any(a.kind not in COMPUTE for a in program):   # transfers implied
            program = actions.program_of(program, num_stages)
        programs.append(program)
    actions.validate(programs)
    return programs


def _action(token, rank, number, ranks):
    match = TOKEN.match(token)
    if not match:
        raise ValueError(f"schedule text, line {number}: {token!r} is not an action such as 0F3, 1B2, 1I2, 1W2 or 0SEND_F3")
    stage, kind, mb = int(match.group(1)), match.group(2), int(match.group(3))
    if stage % ranks != rank:
        raise ValueError(f"schedule text, line {number}: {token} is stage {stage}'s, on rank {rank}; stage s "
                         f"runs on rank s % {ranks}")
    return Action(kind, stage, mb)
