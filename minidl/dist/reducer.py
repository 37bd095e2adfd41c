"""DDP's reducer: gradients packed into buckets (reverse parameter order, so the first bucket
fills first; a small first bucket starts communication early), each bucket's all-reduce
launched from the parameters' post-accumulate-grad hooks as soon as its last gradient is in,
so communication overlaps the rest of backward. Buckets launch in index order (every rank
issues the same collectives in the same order). At the end of backward
(``autograd.queue_callback``) it waits for them and writes the averaged gradients to ``.grad``.
"""
from __future__ import annotations

import time

import numpy as np

from .. import no_grad
from ..autograd import queue_callback
from ..ops.creation import zeros
from .collectives import all_reduce_buffer
from .ddp_comm_hooks import GradBucket, allreduce_hook
from .sparse_reduce import all_gather_sparse_mean

FIRST_BUCKET_BYTES = 1024 * 1024


def assign_buckets(params, cap_bytes, first_cap_bytes=FIRST_BUCKET_BYTES):
    """Parameter indices per bucket: reverse order, one dtype and device per bucket, a bucket closed
    once it holds ``first_cap_bytes`` (the first) or ``cap_bytes`` (the others)."""
    buckets, current, size = [], [], 0
    for i in reversed(range(len(params))):
        last = params[current[-1]] if current else None
        if last is not None and (params[i].dtype is not last.dtype or params[i].device != last.device):
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += params[i].numel() * params[i].dtype.itemsize
        if size >= (cap_bytes if buckets else min(first_cap_bytes, cap_bytes)):
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


class _Bucket:
    """A flat tensor on the parameters' device, and one view of it (a slot) per parameter."""

    def __init__(self, index, params):
        self.params = params
        self.flat = zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        ends = np.cumsum([p.numel() for p in params])
        self.slots = [self.flat[e - p.numel():e].view(tuple(p.shape)) for p, e in zip(params, ends)]
        self.grad_bucket = GradBucket(index, self.flat, params)
        self.reset()

    def reset(self):
        self.ready = [False] * len(self.params)
        self.pending, self.future, self.launched = len(self.params), None, None


class Reducer:
    """``sparse_params`` (the weights of sparse embeddings) take no bucket: their sparse gradients
    are gathered at the end of backward, each in turn (``sparse_reduce``)."""

    def __init__(self, params, names, group, cap_bytes, find_unused, static_graph, as_view, timeline,
                 sparse_params=()):
        self.names, self.group, self.as_view = names, group, as_view
        self.sparse_params = list(sparse_params)
        self.buckets = [_Bucket(k, [params[i] for i in idx]) for k, idx in enumerate(assign_buckets(params, cap_bytes))]
        self.where = {id(p): (b, k) for b in self.buckets for k, p in enumerate(b.params)}
        self.detect_unused = find_unused or static_graph
        self.static_graph, self.known_unused = static_graph, None
        self.hook, self.hook_state = allreduce_hook, group
        self.record, self.timeline = timeline, []
        self.syncing = self.started = False
        self.handles = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]
        self.handles += [p.register_post_accumulate_grad_hook(self._sparse_ready) for p in self.sparse_params]

    def register_comm_hook(self, state, hook):
        if self.hook is not allreduce_hook:
            raise RuntimeError("register_comm_hook: a communication hook was already registered; register it once")
        if not callable(hook):
            raise TypeError(f"register_comm_hook: hook must be callable, got {type(hook).__name__}")
        self.hook, self.hook_state = hook, state

    # -- one iteration ---------------------------------------------------------------------------
    def prepare(self, outputs, sync: bool):
        """Called by every forward: reset the buckets; ``sync``: reduce in the coming backward."""
        if self.group.failed is not None or self.group.closed:
            raise RuntimeError("DistributedDataParallel: its process group failed or was destroyed (an elastic "
                               "job rebuilds it): make the DistributedDataParallel anew over the new group, inside "
                               "the function elastic.run runs")
        self.syncing, self.started, self.next_launch = sync, False, 0
        for b in self.buckets:
            b.reset()
        if not sync:
            return
        self.unused = []
        if self.detect_unused:
            if self.known_unused is None or not self.static_graph:
                self.known_unused = self._unreachable(outputs)
            self.unused = self.known_unused
        for t in outputs:
            if t.grad_fn is not None:  # fires when backward reaches the output: the start of backward
                t.register_hook(lambda grad: self._begin())
                break

    def _unreachable(self, outputs):
        reached, stack, seen = set(), [t.grad_fn for t in outputs if t.grad_fn is not None], set()
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            leaf = getattr(node, "variable", None)
            if leaf is not None:
                reached.add(id(leaf))
            stack.extend(e[0] for e in node.next_functions if e is not None)
        return [p for b in self.buckets for p in b.params if id(p) not in reached]

    def _inert(self) -> bool:
        """A reducer whose group broke (or was destroyed: an elastic job rebuilt it) does nothing: the
        parameters' hooks outlive it, and a new DistributedDataParallel over the new group takes over."""
        return not self.syncing or self.group.failed is not None or self.group.closed

    def _sparse_ready(self, p):
        if not self._inert():
            self._begin()   # (gathered in _finish, once the whole backward has accumulated)

    def _begin(self):
        if self.started:
            return
        self.started, self.t0 = True, time.perf_counter()
        queue_callback(self._finish)
        for p in self.unused:
            b, k = self.where[id(p)]
            with no_grad():
                b.slots[k].zero_()
            self._mark(b, k)

    def _grad_ready(self, p):
        if self._inert():
            return
        self._begin()
        b, k = self.where[id(p)]
        slot = b.slots[k]
        if not (self.as_view and p.grad.data_ptr() == slot.data_ptr()):
            with no_grad():
                slot.copy_(p.grad)
            if self.as_view:
                p.grad = slot  # later accumulations land in the bucket itself
        self._mark(b, k)

    def _mark(self, b, k):
        if b.ready[k]:
            raise RuntimeError(f"DistributedDataParallel: parameter {self.names[id(b.params[k])]} got a gradient "
                               f"twice in one backward pass (reentrant backward or a second backward through "
                               f"the same graph is not supported)")
        b.ready[k] = True
        b.pending -= 1
        while self.next_launch < len(self.buckets) and self.buckets[self.next_launch].pending == 0:
            nb = self.buckets[self.next_launch]
            nb.launched = time.perf_counter()
            nb.future = self.hook(self.hook_state, nb.grad_bucket)
            self.next_launch += 1

    def _finish(self):
        end = time.perf_counter()
        self.syncing = False
        launched = self.buckets[:self.next_launch]
        for b in launched:
            b.result = b.future.wait()
            b.finished = getattr(b.future, "finished_at", None) or time.perf_counter()
        if len(launched) < len(self.buckets):
            missing = [self.names[id(p)] for b in self.buckets for p, r in zip(b.params, b.ready) if not r]
            raise RuntimeError(
                f"DistributedDataParallel: backward finished, but parameter(s) {missing} received no gradient, so "
                f"bucket(s) {list(range(len(launched), len(self.buckets)))} could not be reduced. These parameters "
                f"were not used in producing the loss: pass find_unused_parameters=True to DistributedDataParallel "
                f"(their gradients then count as zero), or make every parameter take part in the output.")
        for p in self.sparse_params:
            if p.grad is not None and not p.grad.is_sparse:
                raise RuntimeError(f"DistributedDataParallel: parameter {self.names[id(p)]} belongs to a sparse "
                                   f"embedding but got a dense gradient; DDP expects its gradient sparse")
            reduced = all_gather_sparse_mean(p.grad, tuple(p.shape), p.dtype, p.device, self.group)
            p.grad = reduced if reduced._nnz() or p.grad is not None else None
        used = self._globally_used() if self.detect_unused else None
        with no_grad():
            for b in self.buckets:
                if b.result.data_ptr() != b.flat.data_ptr():  # a hook may return a new tensor
                    b.flat.copy_(b.result.reshape(-1))
                for p, slot in zip(b.params, b.slots):
                    if used is None or used[id(p)]:
                        p.grad = slot if self.as_view else slot.clone()
        if self.record:
            self.timeline = [dict(name="backward", start=0.0, end=end - self.t0)] + [
                dict(name=f"bucket {b.grad_bucket.index()}", start=b.launched - self.t0,
                     end=b.finished - self.t0, numel=b.flat.numel()) for b in self.buckets]

    def _globally_used(self):
        """Whether any rank used each parameter: one that no rank used keeps its .grad (as in torch)."""
        params = [p for b in self.buckets for p in b.params]
        flags = np.ones(len(params), np.int64)
        unused = {id(p) for p in self.unused}
        flags[[i for i, p in enumerate(params) if id(p) in unused]] = 0
        all_reduce_buffer(flags, group=self.group)
        return {id(p): bool(f) for p, f in zip(params, flags)}
