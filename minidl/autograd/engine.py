"""The backward engine: an iterative walk of the tape in dependency order.

1. Discover the graph from the roots with an explicit stack (no recursion, so
   a 10,000-op chain is fine) and count, for each node, the edges into it.
2. Run nodes whose gradients are complete (all incoming edges delivered),
   summing gradients that arrive at the same node output along several paths.
3. Free each node's saved tensors after it ran, unless ``retain_graph``.
4. Run the callbacks queued during the pass (``queue_callback``), e.g. DDP waiting for its
   gradient all-reduces once every hook has fired.

A pass asked for some gradients only (``grad``, or either half of ``split_backward``) prunes the
graph to the nodes leading to them and narrows each node's ``needs_input_grad`` to its edges
that take part, so no node computes a gradient nobody asked for.
"""
from __future__ import annotations

import threading

from .. import _tracing
from . import grad_mode
from .function import AccumulateGrad, add_gradients
from .hooks import apply_hooks


_passes = threading.local()  # per thread: a stack of the running passes' callback lists


def queue_callback(callback) -> None:
    """Run ``callback()`` once the backward pass now running has finished (called from a hook)."""
    stack = getattr(_passes, "stack", None)
    if not stack:
        raise RuntimeError("queue_callback: no backward pass is running (call it from a hook during backward)")
    stack[-1].append(callback)


def _root_grads(tensors, grad_tensors):
    grads = []
    for i, t in enumerate(tensors):
        g = None if grad_tensors is None else grad_tensors[i]
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs; got a tensor "
                                   f"of shape {list(t.shape)}: pass gradient= of that shape")
            g = t._ones_like_self()
        elif not hasattr(g, "shape") or g.shape != t.shape:
            shape = list(getattr(g, "shape", ()))
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {shape} and output[{i}] "
                               f"has a shape of {list(t.shape)}.")
        grads.append(g)
    return grads


def _discover(roots, needed_nodes=None):
    """Count incoming edges per reachable node; with ``needed_nodes``, prune to nodes leading to them."""
    if needed_nodes is None:
        return _count_edges(roots)
    children = {}
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in children:
            continue
        children[node] = [e[0] for e in node.next_functions if e is not None]
        stack.extend(n for n in children[node] if n not in children)
    needed = _leads_to(children, roots, needed_nodes)
    children = {n: [c for c in cs if c in needed] for n, cs in children.items() if n in needed}
    deps = dict.fromkeys(children, 0)
    for cs in children.values():
        for c in cs:
            deps[c] += 1
    return deps


def _count_edges(roots, skip=()):
    """Incoming-edge count of every node reachable from the roots without passing through a node
    of ``skip`` (one pass, explicit stack)."""
    deps = dict.fromkeys(roots, 0)
    stack = list(roots)
    while stack:
        for edge in stack.pop().next_functions:
            if edge is not None and edge[0] not in skip:
                child = edge[0]
                count = deps.get(child)
                if count is None:
                    deps[child] = 1
                    stack.append(child)
                else:
                    deps[child] = count + 1
    return deps


def _leads_to(children, roots, targets):
    """Nodes from which some target is reachable (iterative post-order)."""
    needed = {}
    stack = [(r, False) for r in roots]
    while stack:
        node, expanded = stack.pop()
        if node in needed and not expanded:
            continue
        if expanded:
            needed[node] = node in targets or any(needed.get(c, False) for c in children[node])
            continue
        needed.setdefault(node, False)
        stack.append((node, True))
        stack.extend((c, False) for c in children[node] if c not in needed)
    return {n for n, ok in needed.items() if ok}


def run(tensors, grad_tensors, retain_graph, create_graph, capture=None, stash=None):
    """Backpropagate; if ``capture`` maps (node, output index) -> slot, return those gradients
    instead of accumulating into leaves (that is ``autograd.grad``). With ``stash`` (a dict, with
    ``capture``) the pass is split_backward's first half: see there."""
    if retain_graph is None:
        retain_graph = create_graph
    recorder = _tracing.recording()
    if recorder is not None:
        recorder.backward_ran = True
    grads = _root_grads(tensors, grad_tensors)
    tensors, grads = zip(*(t._values_root(g) if t.is_sparse else (t, g) for t, g in zip(tensors, grads)))
    edges = [t._grad_edge() for t in tensors]
    roots = list(dict.fromkeys(e[0] for e in edges))
    deps = _discover(roots, None if capture is None else {node for node, _ in capture})
    walk = _Pass(deps, retain_graph, create_graph, capture, stash)
    for (node, nr), g in zip(edges, grads):
        if node in deps:
            _deliver(walk.buffers, node, nr, g)
        elif stash is not None:
            _deliver(stash, node, nr, g)   # a root leading to no input: all of it is the weight pass's
    _execute(walk, [n for n in roots if n in deps and deps[n] == 0])
    return walk


class _Pass:
    """One walk of the graph. ``deps``: the nodes taking part, each with its count of gradients
    still to come; ``buffers``: gradients delivered so far. A pruned pass (``autograd.grad``, or
    either half of split_backward) runs each node with ``needs_input_grad`` narrowed to the edges
    that take part, so a matmul asked only for its input's gradient computes only that one.
    ``hooked``: nodes whose gradients already went through their hooks (a weight pass's starts)."""

    def __init__(self, deps, retain_graph, create_graph, capture=None, stash=None, masked=None, hooked=()):
        self.deps, self.buffers, self.retain_graph, self.create_graph = deps, {}, retain_graph, create_graph
        self.capture, self.captured, self.stash, self.hooked = capture, {}, stash, hooked
        self.masked = capture is not None if masked is None else masked


def _execute(walk, ready):
    """Walk from the ready nodes, then run the callbacks that hooks queued meanwhile."""
    callbacks = []
    _passes.__dict__.setdefault("stack", []).append(callbacks)
    try:
        _walk(walk, ready)
        while callbacks:
            callbacks.pop(0)()
    finally:
        _passes.stack.pop()


def _walk(walk, ready):
    deps, buffers, capture, stash = walk.deps, walk.buffers, walk.capture, walk.stash
    state = grad_mode.state
    previous = state.enabled
    state.enabled = walk.create_graph
    try:
        while ready:
            node = ready.pop()
            node_grads = buffers.pop(node, None) or [None] * max(len(node._output_meta), 1)
            if node not in walk.hooked:
                if node._pre_hooks:
                    node_grads = [g if g is None else apply_hooks(node._pre_hooks.get(nr), g)
                                  for nr, g in enumerate(node_grads)]
                if node._retained:
                    _retain(node, node_grads)
            if capture is not None:
                _capture(node, node_grads, capture, walk.captured)
                if stash is not None and any(e is not None and e[0] not in deps for e in node.next_functions):
                    stash[node] = node_grads   # gradients still owed along edges outside this pass
                if not any(e is not None and e[0] in deps for e in node.next_functions):
                    continue  # nothing wanted lies below: don't run (or free) this node
            if type(node) is AccumulateGrad:
                if node_grads[0] is not None:
                    node.accumulate(node_grads.pop(), walk.create_graph)  # pop: hand over our reference
                continue
            input_grads = _run_masked(node, node_grads, deps) if walk.masked else node.run_backward(node_grads)
            if not walk.retain_graph and (stash is None or node not in stash):
                node.release()
            for edge, g in zip(node.next_functions, input_grads):
                if edge is None:
                    continue
                child, nr = edge
                left = deps.get(child)
                if left is None:
                    continue
                if g is not None:
                    _deliver(buffers, child, nr, g)
                deps[child] = left - 1
                if left == 1:
                    ready.append(child)
            # drop this loop's references: AccumulateGrad keeps, without copying, gradients only it holds
            input_grads = g = None
    finally:
        state.enabled = previous


def _run_masked(node, node_grads, deps):
    """Run ``node`` asking only for the gradients of inputs whose nodes take part in this pass."""
    static = node.needs_input_grad
    wanted = tuple(n and e is not None and e[0] in deps for n, e in zip(static, node.next_functions))
    return node.run_backward(node_grads, None if wanted == static else wanted)


def _retain(node, node_grads):
    """Store the gradients of retain_grad() tensors, after all their hooks ran."""
    for nr, ref in node._retained.items():
        t, g = ref(), node_grads[nr]
        if t is not None and g is not None:
            t.grad = g.detach().clone() if t.grad is None else t.grad + g.detach()


def _capture(node, node_grads, capture, captured):
    for nr, g in enumerate(node_grads):
        if (node, nr) in capture and g is not None:
            if type(node) is AccumulateGrad:
                g = apply_hooks(node.variable._hooks, g)
            captured[capture[(node, nr)]] = g


def _deliver(buffers, node, nr, grad):
    slots = buffers.get(node)
    if slots is None:
        slots = buffers[node] = [None] * max(len(node._output_meta), 1)
    slots[nr] = grad if slots[nr] is None else add_gradients(slots[nr], grad)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaf) into every leaf's ``.grad``."""
    if inputs is not None:
        inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
        results = grad(tensors, inputs, grad_tensors, retain_graph, create_graph, allow_unused=True)
        for leaf, g in zip(inputs, results):
            if g is not None:  # hooks already ran while capturing
                AccumulateGrad(leaf).accumulate(g, create_graph, run_hooks=False)
        return
    tensors = tuple(tensors) if isinstance(tensors, (list, tuple)) else (tensors,)
    if grad_tensors is not None and not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = (grad_tensors,)
    run(tensors, grad_tensors, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=None,
         materialize_grads=False):
    """Return d(outputs)/d(inputs) without touching any ``.grad``."""
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    found, _ = _grads_of(outputs, inputs, grad_outputs, retain_graph, create_graph)
    result = []
    for i, (x, g) in enumerate(zip(inputs, found)):
        if g is None:
            if materialize_grads:
                g = x._zeros(x.shape, x.dtype, x.device)
            elif not allow_unused:
                raise RuntimeError(f"One of the differentiated Tensors (input {i}) appears to not have been "
                                   f"used in the graph. Set allow_unused=True if this is the desired behavior.")
        result.append(g)
    return tuple(result)


def _grads_of(outputs, inputs, grad_outputs, retain_graph, create_graph, stash=None):
    """The gradient of each input (None where it was not reached), and the nodes the pass ran."""
    outputs = tuple(outputs) if isinstance(outputs, (list, tuple)) else (outputs,)
    if grad_outputs is not None and not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = (grad_outputs,)
    capture = {}
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (input {i}) does not require grad")
        capture.setdefault(x._grad_edge(), i)
    walk = run(outputs, grad_outputs, retain_graph, create_graph, capture, stash)
    return [walk.captured.get(capture[x._grad_edge()]) for x in inputs], walk.deps


def split_backward(tensors, inputs, grad_tensors=None):
    """Backward in two halves, for zero-bubble pipelines: returns the gradients of ``inputs`` now
    (None for one not reached) and a :class:`WeightPass` that later runs the rest of backward:
    every leaf other than the inputs (the weights) gets the ``.grad`` that ``backward`` would give.

    Both halves run on the graph the forward saved: nothing is recomputed and nothing computed
    twice. The input pass runs the nodes between ``tensors`` and ``inputs``, each asked only for
    the gradients that lead to an input; a node that also has an edge towards a weight keeps its
    saved tensors and its output gradients for the weight pass, which runs it again asked for the
    other edges, then everything below that leads only to weights. Nodes the weight pass does not
    need are freed by the input pass."""
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    stash = {}
    found, ran = _grads_of(tensors, inputs, grad_tensors, False, False, stash)
    return tuple(found), WeightPass(stash, ran)


class WeightPass:
    """The deferred half of :func:`split_backward`; call it once."""

    def __init__(self, stash, done):
        self._stash, self._done = stash, done   # where to resume, with what; the nodes already run

    def __repr__(self):
        state = "done" if self._stash is None else f"{len(self._stash)} nodes to resume"
        return f"<WeightPass: {state}>"

    @property
    def held_gradients(self) -> list:
        """The gradients kept for the nodes it resumes (memory held until it runs, beside the
        saved tensors of those nodes)."""
        return [g for grads in (self._stash or {}).values() for g in grads if g is not None]

    def __call__(self) -> None:
        stash, done, self._stash, self._done = self._stash, self._done, None, None
        if stash is None:
            raise RuntimeError("split_backward: this weight pass already ran (its graph is freed)")
        if not stash:
            return
        resumed = [node for node in stash if node in done]
        deps = _count_edges(list(stash), skip=done)
        for node in resumed:   # (outside the pass's edges: their other edges were the input pass's)
            del deps[node]
        walk = _Pass(deps, False, False, masked=True, hooked=set(resumed))
        for node, grads in stash.items():
            for nr, g in enumerate(grads):
                if g is not None:
                    _deliver(walk.buffers, node, nr, g)
        _execute(walk, resumed + [node for node in stash if node not in done and deps[node] == 0])
