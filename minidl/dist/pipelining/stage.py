"""A pipeline stage: one rank's part of the model, run one micro-batch at a time.

The stage keeps each micro-batch's inputs and outputs from its forward until its backward, and
counts the bytes its autograd graph holds meanwhile (the saved activations). Tensors between
stages travel with minidl.dist's isend/irecv, each micro-batch's activations after a small header
with their shapes, which the receiving stage checks against its ``input_args`` when it has them.
"""
from __future__ import annotations

import minidl

from ..ddp import DistributedDataParallel, local_piece
from ..state import resolve

MAX_TENSORS = 8       # tensors per stage output
HEADER = 64           # int64 words of the shape header: [count, (dtype, ndim, *shape) per tensor]
DTYPES = (minidl.float32, minidl.float64, minidl.float16, minidl.bfloat16, minidl.int64, minidl.int32,
          minidl.int16, minidl.uint8, minidl.bool)


def as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def encode(tensors) -> minidl.Tensor:
    words = [len(tensors)]
    for t in tensors:
        words += [DTYPES.index(t.dtype), t.ndim, *t.shape]
    if len(words) > HEADER:
        raise ValueError(f"pipelining: a stage output of {len(tensors)} tensors with shapes "
                         f"{[list(t.shape) for t in tensors]} does not fit the {HEADER}-word shape header")
    return minidl.tensor(words + [0] * (HEADER - len(words)), dtype=minidl.int64)


def decode(header) -> list:
    words, metas, at = header.tolist(), [], 1
    for _ in range(words[0]):
        dtype, ndim = DTYPES[words[at]], words[at + 1]
        metas.append((tuple(words[at + 2:at + 2 + ndim]), dtype))
        at += 2 + ndim
    return metas


def graph_bytes(outputs, exclude, extra=()) -> int:
    """Bytes of the tensors that the autograd graph behind ``outputs`` keeps for backward (saved
    tensors and tensors kept on the nodes) and of the ``extra`` tensors, each view once,
    parameters' storages (``exclude``) left out. A view counts its own elements: a micro-batch
    that is a slice of the batch holds its slice."""
    seen, nodes = set(), set()
    total = sum(_new_bytes(t, seen, exclude) for t in extra)
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in nodes:
            continue
        nodes.add(id(node))
        # (autograd's node internals: save_for_backward's (tensor, version) pairs, and attributes)
        kept = [item[0] for item in node._saved if item is not None]
        kept += [v for v in vars(node).values() if isinstance(v, minidl.Tensor)] if hasattr(node, "__dict__") else []
        total += sum(_new_bytes(t, seen, exclude) for t in kept)
        stack.extend(e[0] for e in node.next_functions if e is not None)
    return total


def _new_bytes(t, seen, exclude) -> int:
    """t's bytes, unless its storage is excluded or this very view was counted already."""
    key = (id(t._storage), t._layout.offset, tuple(t.shape), t._layout.strides)
    if id(t._storage) in exclude or key in seen:
        return 0
    seen.add(key)
    return t.numel() * t.dtype.itemsize


class PipelineStage:
    """``torch.distributed.pipelining.PipelineStage``: ``submodule`` as stage ``stage_index`` of
    ``num_stages``, on the group's rank stage_index % ranks (one stage per rank, or several).

    ``input_args`` / ``output_args``: example tensors (or tuples) of one micro-batch, to check the
    shapes met at the first step against; without them the shapes are whatever the first step
    brings. ``dw_builder``, as torch's: for zero-bubble schedules, a function that returns a
    function computing the weights' gradients; given it, the input pass (I) runs a full backward
    and the weight pass (W) calls what ``dw_builder()`` returned at I. ``output_grads``,
    ``input_grads`` and ``get_mesh`` are accepted for torch's signature and unused here."""

    def __init__(self, submodule, stage_index: int, num_stages: int, device, input_args=None, output_args=None,
                 output_grads=None, input_grads=None, group=None, dw_builder=None, get_mesh=None):
        g = resolve(group, "PipelineStage")
        if g is None:
            raise RuntimeError("PipelineStage: this rank is not in the group")
        self.submod, self.stage_index, self.num_stages, self.group = submodule, stage_index, num_stages, group
        self.device = minidl.device(device)
        self.rank, ranks = g.ranks[g.rank], g.ranks
        if num_stages < len(ranks) or num_stages % len(ranks):
            raise ValueError(f"PipelineStage: num_stages={num_stages} on {len(ranks)} ranks (rank {self.rank}); each "
                             f"rank holds the same number of stages, so num_stages must be a multiple of {len(ranks)}")
        if not 0 <= stage_index < num_stages:
            raise ValueError(f"PipelineStage: stage_index={stage_index} on rank {self.rank} is outside 0..{num_stages - 1}")
        if stage_index % len(ranks) != g.rank:
            raise ValueError(f"PipelineStage: stage {stage_index} was built on rank {self.rank}, which is group rank "
                             f"{g.rank}; stage i runs on the group's rank i % {len(ranks)}")
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.prev_rank = None if self.is_first else ranks[(stage_index - 1) % len(ranks)]
        self.next_rank = None if self.is_last else ranks[(stage_index + 1) % len(ranks)]
        self.input_meta = None if input_args is None else [(tuple(t.shape), t.dtype) for t in as_tuple(input_args)]
        self.output_meta = None if output_args is None else [(tuple(t.shape), t.dtype) for t in as_tuple(output_args)]
        self.group_rank, self.group_size = g.rank, len(ranks)
        self.dw_builder = dw_builder
        self._chunks = {}           # mb -> (inputs, outputs, activation bytes)
        self._weight_passes = {}    # mb -> (the deferred weight pass, the outputs, its activation bytes)
        self.activation_bytes = 0
        self.peak_activation_bytes = 0

    def __repr__(self):
        return f"PipelineStage(stage {self.stage_index} of {self.num_stages}, rank {self.rank})"

    # -- shapes ---------------------------------------------------------------------------------
    def check_input_meta(self, mb, metas):
        """The shapes a micro-batch brings, against ``input_args`` when the stage has them."""
        if self.input_meta is None:
            return
        given = [(list(s), d.name) for s, d in self.input_meta]
        got = [(list(s), d.name) for s, d in metas]
        if len(given) != len(got) or any(g[1] != w[1] or g[0][1:] != w[0][1:] for g, w in zip(given, got)):
            raise ValueError(f"pipelining: stage {self.stage_index - 1} (rank {self.prev_rank}) sends micro-batch "
                             f"{mb} as {got} (shape, dtype), but stage {self.stage_index} (rank {self.rank}) "
                             f"expects input_args {given}")

    def check_output(self, outputs):
        if self.output_meta is None:
            return
        given = [(list(s[1:]), d.name) for s, d in self.output_meta]
        got = [(list(t.shape[1:]), t.dtype.name) for t in outputs]
        if given != got:
            raise ValueError(f"pipelining: stage {self.stage_index} (rank {self.rank}) outputs {got} (shape after "
                             f"the batch dim, dtype), but its output_args say {given}")

    # -- compute --------------------------------------------------------------------------------
    def forward_one_chunk(self, mb, args, kwargs, keep=True):
        """Run the submodule on one micro-batch; with ``keep`` its inputs (received ones made leaves
        that require grad, so their gradients can go back) and outputs are kept until its backward."""
        if keep and not self.is_first:
            args = tuple(a.requires_grad_(a.dtype.is_floating_point) for a in args)
        if isinstance(self.submod, DistributedDataParallel):
            with self.submod.no_sync():   # (the replicas reduce once per step: see backward_one_chunk)
                outputs = as_tuple(self.submod(*args, **kwargs))
        else:
            outputs = as_tuple(self.submod(*args, **kwargs))
        if len(outputs) > MAX_TENSORS or not all(isinstance(t, minidl.Tensor) for t in outputs):
            raise TypeError(f"pipelining: stage {self.stage_index} must return a tensor or a tuple of at most "
                            f"{MAX_TENSORS} tensors, got {type(outputs[0]).__name__ if outputs else 'nothing'}")
        self.check_output(outputs)
        if not keep:
            return outputs
        held = graph_bytes(outputs, {id(local_piece(p)._storage) for p in self.submod.parameters()})
        self._chunks[mb] = (args, outputs, held)
        self.activation_bytes += held
        self.peak_activation_bytes = max(self.peak_activation_bytes, self.activation_bytes)
        return outputs

    def backward_one_chunk(self, mb, loss=None, output_grads=None, last=False, full_backward=True):
        """Backward of one micro-batch from its loss (last stage) or its outputs' gradients; returns
        the gradients of its inputs (None on the first stage). A stage module wrapped in
        DistributedDataParallel (pipeline x data parallel) averages its gradients over the replicas
        in the step's ``last`` backward, bucket by bucket as DDP does: what each replica
        accumulated over its micro-batches. Without ``full_backward`` this is the input pass I of a
        split backward, and ``backward_weight_one_chunk`` must follow; ``last`` is then the step's
        last I, and DDP reduces at the last W instead, where the weights' gradients come (with a
        dw_builder, the backward is full at I and reduces there)."""
        inputs, outputs, held = self._chunks.pop(mb)
        roots, grads = self._roots(outputs, loss, output_grads)
        if full_backward or self.dw_builder is not None:
            self._before_last_weights(last, roots)
            if roots:
                minidl.autograd.backward(roots, grads)
            self.activation_bytes -= held
            if self.dw_builder is not None:   # (torch's: its runner runs now, or at W)
                runner = self.dw_builder()
                if full_backward:
                    runner()
                else:
                    self._weight_passes[mb] = (runner, (), 0)
            input_grads = [a.grad for a in inputs]
        else:
            wanted = [] if self.is_first else [a for a in inputs if a.requires_grad]
            found, weight_pass = minidl.autograd.split_backward(roots, wanted, grads)
            found = {id(a): g for a, g in zip(wanted, found)}
            input_grads = [found.get(id(a)) for a in inputs]
            still = graph_bytes(roots, {id(local_piece(p)._storage) for p in self.submod.parameters()},
                                weight_pass.held_gradients)
            self.activation_bytes -= held - still
            self._weight_passes[mb] = (weight_pass, roots, still)
        if self.is_first:
            return None
        return [g if g is not None else minidl.zeros_like(a) for a, g in zip(inputs, input_grads)]

    def backward_weight_one_chunk(self, mb, last=False):
        """The weight pass W of micro-batch ``mb``: its weights' gradients, deferred from its input
        pass (``backward_one_chunk(mb, full_backward=False)``), or the runner that ``dw_builder``
        built there. ``last``: the step's last W of this stage, where DDP reduces."""
        if mb not in self._weight_passes:
            raise RuntimeError(f"pipelining: stage {self.stage_index} (rank {self.rank}) runs W{mb} without its "
                               f"input pass I{mb} (backward_one_chunk(full_backward=False)) first")
        weight_pass, roots, held = self._weight_passes.pop(mb)
        if self.dw_builder is None:
            self._before_last_weights(last, roots)
        weight_pass()
        self.activation_bytes -= held

    @staticmethod
    def _roots(outputs, loss, output_grads):
        """What backward starts from: the loss, or the outputs that need a gradient with theirs."""
        if loss is not None:
            return [loss], None
        pairs = [(o, g) for o, g in zip(outputs, output_grads) if o.requires_grad]
        return [o for o, _ in pairs], [g for _, g in pairs]

    def _before_last_weights(self, last, roots):
        """Before the step's last weight gradients: arm DDP to reduce them over the replicas."""
        if last and isinstance(self.submod, DistributedDataParallel):
            self.submod.reducer.prepare(roots, True)

    def scale_grads(self, grad_scale_factor):
        with minidl.no_grad():
            for p in map(local_piece, self.submod.parameters()):   # (a DTensor's: its piece's)
                if p.grad is not None:
                    p.grad.div_(grad_scale_factor)

    def clear_runtime_states(self):
        """Forget the micro-batches of an earlier step (one that raised, say) and its byte counts."""
        self._chunks.clear()
        self._weight_passes.clear()
        self.activation_bytes = self.peak_activation_bytes = 0
