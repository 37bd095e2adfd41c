"""The ranks of a save or a load, and how a failure on one becomes an error on all.

Each step runs on every rank and ends in an all-gather of what it produced — or of the error it raised —
so every rank sees the same outcome: all go on, or all raise the same ``CheckpointException`` naming each
failed rank and its error. A rank that dies instead of raising makes the all-gather itself fail on the
others, with the communicator's error naming it. No rank waits for one that has given up. In one process
(``no_dist``) an error is a CheckpointException too, as in torch.
"""
from __future__ import annotations

import traceback
import warnings

from .. import state
from ..objects import all_gather_object, broadcast_object_list


class CheckpointException(RuntimeError):
    """One or more ranks failed a step of a save or a load; ``failures`` maps each such rank to its error."""

    def __init__(self, msg: str, failures: dict):
        super().__init__(msg, failures)
        self._failures = failures

    @property
    def failures(self) -> dict:
        return self._failures

    def __str__(self):
        lines = "\n".join(f"  rank {r}: {_text(e)}" for r, e in sorted(self._failures.items()))
        return f"{self.args[0]}; failed on rank(s) {sorted(self._failures)}:\n{lines}"


class _Failed:
    """An error as it travels to the other ranks: its text (exceptions need not pickle)."""

    def __init__(self, error: BaseException):
        self.text = _text(error)


class RemoteError(RuntimeError):
    """Another rank's error, as its text (type and message) came."""


def _text(error: BaseException) -> str:
    """``Type: message``, the same on the rank that raised it and on the others."""
    if isinstance(error, RemoteError):
        return str(error)
    return "".join(traceback.format_exception_only(type(error), error)).strip()


class Ranks:
    """The group a save or load runs on (None: this process alone); ``rank`` is this process's rank in it."""

    def __init__(self, what: str, process_group=None, no_dist: bool = False):
        self.what = what
        if not no_dist and process_group is None and not state.is_initialized():
            warnings.warn(f"{what}: minidl.dist is not initialized; assuming the intent is to use this process "
                          f"alone (no_dist=True)", stacklevel=3)
            no_dist = True
        self.group = None if no_dist else state.resolve(process_group, what)
        self.rank = 0 if self.group is None else self.group.rank
        self.size = 1 if self.group is None else self.group.size
        self.global_rank = 0 if self.group is None else self.group.ranks[self.rank]   # for fault injection
        self.is_coordinator = self.rank == 0

    def all_gather(self, step, *args):
        """Every rank's ``step(*args)``, on every rank; if any raised, every rank raises CheckpointException."""
        mine, error = self._run(step, args)
        return self._outcome(mine, error, mine)

    def check(self, step, *args):
        """This rank's ``step(*args)``, once every rank has run its own: only whether each failed travels."""
        mine, error = self._run(step, args)
        self._outcome(mine, error, mine if error is not None else None)
        return mine

    def everywhere(self, step, *args):
        """``step(*args)`` where every rank computes the same from the same inputs (no message): its error,
        raised alike on every rank, is every rank's failure."""
        try:
            return step(*args)
        except Exception as e:  # noqa: BLE001
            raise CheckpointException(f"{self.what} failed", {r: e for r in range(self.size)}) from e

    def _run(self, step, args):
        try:
            return step(*args), None
        except Exception as e:  # noqa: BLE001 -- it is sent to the other ranks and raised on all
            if self.group is None:
                raise CheckpointException(f"{self.what} failed", {0: e}) from e
            return _Failed(e), e

    def _outcome(self, mine, error, sent):
        if self.group is None:
            return [mine]
        found = [None] * self.size
        all_gather_object(found, sent, group=self.group)
        failures = {r: (error if r == self.rank else RemoteError(f.text))
                    for r, f in enumerate(found) if isinstance(f, _Failed)}
        if failures:
            raise CheckpointException(f"{self.what} failed", failures) from error
        return found

    def from_coordinator(self, step, *args):
        """The coordinator's ``step(*args)`` on every rank (its error raised on every rank)."""
        if self.group is None:
            return self._run(step, args)[0]
        box, error = [None], None
        if self.is_coordinator:
            try:
                box[0] = step(*args)
            except Exception as e:  # noqa: BLE001
                box[0] = _Failed(e)
                error = e
        broadcast_object_list(box, src=self.group.ranks[0], group=self.group)
        if isinstance(box[0], _Failed):
            raise CheckpointException(f"{self.what} failed", {0: error or RemoteError(box[0].text)}) from error
        return box[0]
