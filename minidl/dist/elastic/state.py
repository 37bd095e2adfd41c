"""What an elastic job rolls back to: a State commits in memory and, every ``save_every`` commits, to disk.

``commit()`` copies the model's and optimizer's state, the sampler's position and the user's values (cheap:
host memory, no I/O); ``restore()`` puts the last commit back — what every survivor does when the group
breaks, so that the steps after the commit, which some ranks may have taken and others not, are redone by
all alike; ``sync()`` makes every rank's commit the new rank 0's (a newcomer gets it there). Values are
attributes: ``state.epoch``, ``state.batch``.
"""
from __future__ import annotations

import copy
import os

from ..._tensor import Tensor
from ...nn.module import Module
from .. import collectives, objects, state as dist_state


class ObjectState:
    """Plain values an elastic job rolls back: ``ObjectState(epoch=0, batch=0)``."""

    def __init__(self, **values):
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_reset_callbacks", [])
        object.__setattr__(self, "commits", 0)
        object.__setattr__(self, "membership", None)   # set by elastic.run
        object.__setattr__(self, "running", False)     # inside elastic.run (commit() is only meaningful there)
        self.commit_snapshot()

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__} has no value {name!r} (it holds {sorted(values)})")

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_values", {}):
            self._values[name] = value
        else:
            object.__setattr__(self, name, value)

    # -- the commit --------------------------------------------------------------------------------
    def commit(self) -> None:
        """Keep the current state as the one to roll back to; then, if a newcomer waits, stop here (the
        group is rebuilt with it and training goes on from this commit)."""
        if not self.running:
            raise RuntimeError(f"{type(self).__name__}.commit() is only meaningful inside a function run by "
                               f"minidl.dist.elastic.run (which rolls back to it when the group changes)")
        self.commits += 1
        self.commit_snapshot()
        self.on_commit()
        if self.membership is not None and self.membership.stop_at(self.commits):
            from .run import MembershipChanged
            raise MembershipChanged("a worker waits to join")

    def commit_snapshot(self) -> None:
        """Take the current state as the one to roll back to (no checks, no checkpoint: commit() does those)."""
        object.__setattr__(self, "_committed", self._snapshot())

    def restore(self) -> None:
        """Put the last commit back."""
        self._load(self._committed)

    def sync(self, src: int = 0) -> None:
        """Every rank's commit becomes rank ``src``'s, and is restored."""
        box = [self._committed if dist_state.get_rank() == src else None]
        objects.broadcast_object_list(box, src=src)
        self._committed = box[0]
        self.restore()

    def register_reset_callbacks(self, callbacks) -> None:
        """Functions called with no argument after the group changed and the state was synced: where the
        learning rate or the per-rank batch follows the new world size (``dist.get_world_size()``)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    # -- what a subclass adds ----------------------------------------------------------------------
    def _snapshot(self) -> dict:
        return {"values": copy.deepcopy(self._values), "commits": self.commits}

    def _load(self, snapshot: dict) -> None:
        self._values.clear()
        self._values.update(copy.deepcopy(snapshot["values"]))
        object.__setattr__(self, "commits", snapshot["commits"])   # (synced: the members count commits alike)

    def on_commit(self) -> None:
        """Called after each commit (State saves a checkpoint here every ``save_every`` commits)."""


class State(ObjectState):
    """A model, its optimizer, a sampler and values, rolled back together:
    ``State(model, optimizer, sampler=ElasticSampler(...), epoch=0, batch=0)``.

    ``save_every=M`` with ``checkpoint_dir``: every M-th commit is also a distributed checkpoint
    (``minidl.dist.checkpoint``) in ``checkpoint_dir/commit-<n>``, what a restarted job resumes from
    (``load``)."""

    def __init__(self, model, optimizer=None, sampler=None, *, save_every=None, checkpoint_dir=None, **values):
        if not isinstance(model, Module):
            raise TypeError(f"elastic.State: model must be a minidl.nn.Module (the state to roll back), got "
                            f"{type(model).__name__}; for plain values use elastic.ObjectState")
        if (save_every is None) != (checkpoint_dir is None):
            raise ValueError("elastic.State: save_every and checkpoint_dir go together")
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "sampler", sampler)
        object.__setattr__(self, "save_every", save_every)
        object.__setattr__(self, "checkpoint_dir", checkpoint_dir)
        super().__init__(**values)

    def _snapshot(self) -> dict:
        return {**super()._snapshot(), "model": _cloned(self.model.state_dict()),
                "optimizer": None if self.optimizer is None else _cloned(self.optimizer.state_dict()),
                "sampler": None if self.sampler is None else self.sampler.state_dict()}

    def _load(self, snapshot: dict) -> None:
        super()._load(snapshot)
        self.model.load_state_dict(snapshot["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(_cloned(snapshot["optimizer"]))
        if self.sampler is not None:
            self.sampler.load_state_dict(snapshot["sampler"])

    def sync(self, src: int = 0) -> None:
        """The model's tensors by broadcast in place; the optimizer's state, the sampler and the values as
        objects (a newcomer's optimizer has no state yet)."""
        model = {k: t.clone() for k, t in self._committed["model"].items()}   # (received into copies: a broadcast
        for t in model.values():                                              # that fails halfway leaves the
            collectives.broadcast(t, src=src)                                 # commit as it was)
        rest = {k: v for k, v in self._committed.items() if k != "model"}
        box = [rest if dist_state.get_rank() == src else None]
        objects.broadcast_object_list(box, src=src)
        object.__setattr__(self, "_committed", {**box[0], "model": model})
        self.restore()

    def on_commit(self) -> None:
        if self.save_every and self.commits % self.save_every == 0:
            self.save(os.path.join(self.checkpoint_dir, f"commit-{self.commits}"))

    def save(self, path) -> None:
        """The committed state as a distributed checkpoint at ``path`` (every rank calls it)."""
        from .. import checkpoint
        lowest = checkpoint.DefaultSavePlanner(dedup_save_to_lowest_rank=True)   # (rank 0's copy of a replica,
        checkpoint.save(self._checkpointed(self._committed), checkpoint_id=path, planner=lowest)   # as sync)

    def load(self, path) -> None:
        """A checkpoint ``save`` wrote, as the committed state (every rank calls it; any world size)."""
        from .. import checkpoint
        from ..checkpoint.state_dict import _init_optim_state
        if self.optimizer is not None:
            _init_optim_state(self.optimizer)   # (a fresh optimizer's state holds no tensors to load into yet)
        target = self._checkpointed(self._snapshot())
        checkpoint.load(target, checkpoint_id=path)
        self._committed = {k: target.get(k) for k in ("values", "model", "optimizer", "sampler", "commits")}
        self.restore()

    def resume(self) -> bool:
        """Load the newest complete checkpoint in ``checkpoint_dir`` (``commit-<n>``), if any: whether one was."""
        found = sorted((int(name.split("-", 1)[1]), name) for name in os.listdir(self.checkpoint_dir)
                       if name.startswith("commit-") and name.split("-", 1)[1].isdigit()
                       and os.path.exists(os.path.join(self.checkpoint_dir, name, ".metadata"))) \
            if os.path.isdir(self.checkpoint_dir) else []
        if not found:
            return False
        self.load(os.path.join(self.checkpoint_dir, found[-1][1]))
        return True

    @staticmethod
    def _checkpointed(snapshot: dict) -> dict:
        return {k: v for k, v in snapshot.items() if v is not None}


def _cloned(tree):
    """A copy of a state dict whose tensors are new tensors (not views of the live ones)."""
    if isinstance(tree, Tensor):
        return tree.detach().clone()
    if isinstance(tree, dict):
        return type(tree)((k, _cloned(v)) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cloned(v) for v in tree)
    return copy.deepcopy(tree)
