"""Single-stage pipeline schedules (one stage per rank), as ``torch.distributed.pipelining``'s
``ScheduleGPipe`` and ``Schedule1F1B``.

A schedule is data: ``compute_order(stage, num_stages, m)`` gives a stage's forwards and
backwards in order; ``actions.with_transfers`` adds the receive before and the send after each,
and ``actions.validate`` checks all ranks' programs together before the first step runs. One
runtime (``_Runtime``) executes any such program, so the next schedules only add an order.

Losses: the last stage computes ``loss_fn(output, target)`` per micro-batch and runs backward on
it; with ``scale_grads=True`` the gradients are divided by the number of micro-batches at the end
(all of each parameter's ``.grad``, as in torch: zero them between steps). The last stage needs a
loss_fn to train (``eval`` runs without one).
With a mean-reducing loss and a batch that splits evenly this is the gradient of the full batch's
mean loss. A batch that does not split evenly is cut as ``tensor_split`` does (the first ones one
row larger), and each micro-batch's mean then weighs the same: rows of smaller micro-batches count
a little more than in the full-batch mean.
"""
from __future__ import annotations

import time

import minidl

from .. import collectives, objects
from ..communicators.base import DistError
from ..p2p import irecv, isend
from . import actions, text
from .microbatch import merge_chunks, split_args_kwargs_into_chunks
from .stage import HEADER, as_tuple, decode, encode, tag

MAX_MICROBATCHES = 1000  # (message tags stay below MPI's guaranteed 32767)


class PipelineError(RuntimeError):
    """A stage failed during a pipelined step (the message names it)."""


class PipelineScheduleSingle:
    """Runs one ``PipelineStage`` per rank through ``n_microbatches`` micro-batches per step."""

    def __init__(self, stage, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        if not 1 <= n_microbatches <= MAX_MICROBATCHES:
            raise ValueError(f"{type(self).__name__}: n_microbatches={n_microbatches} on stage {stage.stage_index} "
                             f"(rank {stage.rank}); it must be between 1 and {MAX_MICROBATCHES}")
        self._stage, self._n_microbatches, self._loss_fn = stage, n_microbatches, loss_fn
        self._args_chunk_spec, self._kwargs_chunk_spec = args_chunk_spec, kwargs_chunk_spec
        self._output_merge_spec, self.scale_grads = output_merge_spec, scale_grads
        self._num_stages = stage.num_stages
        self.programs = self.make_programs()
        self._events = []

    def make_programs(self) -> list:
        """Every stage's actions, validated (from ``compute_order``, with the transfers added)."""
        programs = [actions.with_transfers(s, self._num_stages, self.compute_order(s, self._num_stages,
                                                                                   self._n_microbatches))
                    for s in range(self._num_stages)]
        actions.validate(programs)
        return programs

    @staticmethod
    def compute_order(stage, num_stages, m):
        raise NotImplementedError

    def dumps(self, transfers=False) -> str:
        """The schedule in the text format of ``pipelining.text`` (to edit and run with ScheduleFromText)."""
        return text.dumps(self.programs, transfers)

    def table(self) -> str:
        """The schedule as planned: one column per stage, one row per time step (unit-time compute)."""
        return actions.table(self.programs)

    # -- the public calls -------------------------------------------------------------------------
    def step(self, *args, target=None, losses=None, return_outputs=True, loss_kwargs=None, **kwargs):
        """One pipelined training step: the first stage is given the batch, the last the target;
        ``losses`` (a list, on the last stage) receives each micro-batch's loss (``loss_kwargs`` go
        to loss_fn). Returns the last stage's merged output (None on the other stages)."""
        self._check_call(args, kwargs, target, training=True)
        program = self.programs[self._stage.stage_index]
        out = self._run(program, args, kwargs, target, losses, return_outputs, loss_kwargs)
        if self.scale_grads:
            self._stage.scale_grads(grad_scale_factor=self._n_microbatches)
        return out

    def eval(self, *args, target=None, losses=None, **kwargs):
        """Forward only, micro-batch by micro-batch (no graph kept); losses when a target is given."""
        self._check_call(args, kwargs, target, training=False)
        program = [a for a in self.programs[self._stage.stage_index] if a.kind in ("RECV_F", "F", "SEND_F")]
        with minidl.no_grad():
            return self._run(program, args, kwargs, target, losses, True, None)

    def timeline(self) -> dict:
        """Every rank's actions of the last step with their start and end (seconds from the step's
        start), the bubble and each stage's peak activation bytes. Collective: call it on every rank."""
        gathered = [None] * minidl.dist.get_world_size(self._stage.group)
        mine = (self._stage.stage_index, self._events, self._stage.peak_activation_bytes)
        objects.all_gather_object(gathered, mine, group=self._stage.group)
        gathered.sort(key=lambda item: item[0])
        events = [e for _, evs, _ in gathered for e in evs]
        return {"events": events, "bubble": bubble(events, self._num_stages),
                "peak_activation_bytes": [peak for _, _, peak in gathered], "ideal": self.table()}

    # -- checks ---------------------------------------------------------------------------------
    def _check_call(self, args, kwargs, target, training):
        stage = self._stage
        where = f"{type(self).__name__}.{'step' if training else 'eval'} on stage {stage.stage_index} (rank {stage.rank})"
        if stage.is_first and not args and not kwargs:
            raise ValueError(f"{where}: the first stage needs the batch as arguments")
        if not stage.is_first and (args or kwargs):
            raise ValueError(f"{where}: only the first stage is given inputs; this stage receives them")
        if training and not minidl.is_grad_enabled():
            raise RuntimeError(f"{where}: step() trains and needs autograd; under no_grad use eval()")
        if target is not None and not stage.is_last:
            raise ValueError(f"{where}: a target is given on a stage that is not the last "
                             f"(stage {self._num_stages - 1} computes the loss)")
        if training and stage.is_last and (self._loss_fn is None or target is None):
            raise ValueError(f"{where}: the last stage needs a loss_fn and a target to train")

    # -- the runtime ----------------------------------------------------------------------------
    def _run(self, program, args, kwargs, target, losses, return_outputs, loss_kwargs):
        stage = self._stage
        runtime = _Runtime(self, args, kwargs, target, loss_kwargs or {})
        stage.clear_runtime_states()
        collectives.barrier(group=stage.group)   # a common start for the timeline
        self._events = runtime.execute(program)
        if losses is not None and stage.is_last:
            losses.clear()   # (as torch: the list holds this step's losses)
            losses.extend(runtime.losses)
        if stage.is_last and return_outputs and runtime.outputs:
            return merge_chunks([runtime.outputs[mb] for mb in sorted(runtime.outputs)], self._output_merge_spec)
        return None


class _Runtime:
    """One step of one rank's program: each action timed, the transfers posted early.

    Tensors travel with tags per micro-batch (``stage.tag``). Before each micro-batch's activations
    goes a small header with their shapes: every header is received from the step's start, and the
    activations' receive is posted as soon as its header is in (checked before each action), so
    the transfer overlaps the compute. A gradient's receive is posted right after the forward that
    made the outputs it belongs to (their shapes are its shapes)."""

    def __init__(self, schedule, args, kwargs, target, loss_kwargs):
        self.schedule, self.stage, self.loss_kwargs = schedule, schedule._stage, loss_kwargs
        stage, m = self.stage, schedule._n_microbatches
        where = f"stage {stage.stage_index} (rank {stage.rank})"
        self.arg_mbs, self.kwarg_mbs = split_args_kwargs_into_chunks(
            args, kwargs, m, schedule._args_chunk_spec, schedule._kwargs_chunk_spec, where) if stage.is_first \
            else ([()] * m, [{}] * m)
        self.target_mbs = None
        if target is not None:
            self.target_mbs = [mb[0] for mb in split_args_kwargs_into_chunks((target,), None, m, where=where,
                                                                             names=("the target",))[0]]
        self.inputs, self.outputs, self.losses, self.loss_of = {}, {}, [], {}
        self.input_grads, self.output_grads = {}, {}
        self.pending_sends, self.headers, self.posted = [], {}, {}
        self.run = {"RECV_F": self.receive_activations, "F": self.forward, "SEND_F": self.send_activations,
                    "RECV_B": self.receive_gradients, "B": self.backward, "SEND_B": self.send_gradients}

    def execute(self, program):
        stage, start, events = self.stage, time.perf_counter(), []
        for action in program:
            if action.kind == "RECV_F":
                header = minidl.empty(HEADER, dtype=minidl.int64)
                self.headers[action.mb] = (header, irecv(header, stage.prev_rank, group=stage.group,
                                                         tag=tag("header", action.mb)))
        for action in program:
            began = time.perf_counter()
            try:
                self._post_arrived_headers()
                self.run[action.kind](action.mb)
            except DistError as e:
                raise PipelineError(f"pipelining: stage {stage.stage_index} (rank {stage.rank}) failed in {action}, "
                                    f"a transfer with its neighbour: {e}") from e
            except PipelineError:
                raise
            except Exception as e:
                raise PipelineError(f"pipelining: stage {stage.stage_index} (rank {stage.rank}) raised in "
                                    f"{action}: {type(e).__name__}: {e}") from e
            events.append({"stage": stage.stage_index, "rank": stage.rank, "kind": action.kind, "mb": action.mb,
                           "start": began - start, "end": time.perf_counter() - start})
        for work in self.pending_sends:
            work.wait()
        return events

    def _post(self, kind, mb, metas, peer):
        what = "activation" if kind == "RECV_F" else "gradient"
        buffers = [minidl.empty(shape, dtype=dtype) for shape, dtype in metas]
        self.posted[(kind, mb)] = (buffers, [irecv(b, peer, group=self.stage.group, tag=tag(what, mb, i))
                                             for i, b in enumerate(buffers)])

    def _post_arrived_headers(self):
        for mb, (header, work) in list(self.headers.items()):
            if work.is_completed():
                self._activations_announced(mb, header, work)

    def _activations_announced(self, mb, header, work):
        work.wait()
        del self.headers[mb]
        metas = decode(header)
        self.stage.check_input_meta(mb, metas)
        self._post("RECV_F", mb, metas, self.stage.prev_rank)

    def _wait(self, kind, mb):
        buffers, works = self.posted.pop((kind, mb))
        for work in works:
            work.wait()
        return buffers

    def _send(self, what, mb, tensors, peer):
        group = self.stage.group
        if what == "activation":
            self.pending_sends.append(isend(encode(tensors), peer, group=group, tag=tag("header", mb)))
        tensors = [t.detach().contiguous() for t in tensors]
        self.pending_sends += [isend(t, peer, group=group, tag=tag(what, mb, i)) for i, t in enumerate(tensors)]

    # -- the actions ----------------------------------------------------------------------------
    def receive_activations(self, mb):
        if mb in self.headers:   # (not in yet: wait for it here)
            self._activations_announced(mb, *self.headers[mb])
        self.inputs[mb] = self._wait("RECV_F", mb)

    def forward(self, mb):
        stage, training = self.stage, minidl.is_grad_enabled()
        args = self.arg_mbs[mb] if stage.is_first else tuple(self.inputs.pop(mb))
        outputs = stage.forward_one_chunk(mb, args, self.kwarg_mbs[mb], keep=training)
        if not stage.is_last:
            self.outputs[mb] = outputs
            if training:
                self._post("RECV_B", mb, [(tuple(t.shape), t.dtype) for t in outputs], stage.next_rank)
            return
        single = outputs[0] if len(outputs) == 1 else outputs
        self.outputs[mb] = _detached(single)
        if self.target_mbs is not None and self.schedule._loss_fn is not None:
            loss = self.schedule._loss_fn(single, self.target_mbs[mb], **self.loss_kwargs)
            self.losses.append(loss.detach())
            self.loss_of[mb] = loss

    def send_activations(self, mb):
        self._send("activation", mb, self.outputs.pop(mb), self.stage.next_rank)

    def receive_gradients(self, mb):
        self.output_grads[mb] = self._wait("RECV_B", mb)

    def backward(self, mb):
        stage = self.stage
        if stage.is_last:
            self.input_grads[mb] = stage.backward_one_chunk(mb, loss=self.loss_of.pop(mb))
        else:
            self.input_grads[mb] = stage.backward_one_chunk(mb, output_grads=self.output_grads.pop(mb))

    def send_gradients(self, mb):
        self._send("gradient", mb, self.input_grads.pop(mb), self.stage.prev_rank)


def _detached(value):
    return tuple(v.detach() for v in value) if isinstance(value, tuple) else value.detach()


def bubble(events, num_stages) -> float:
    """The fraction of the step's wall time (from the common start to the last rank's last action)
    that a rank spends outside its forwards and backwards, averaged over the ranks. For GPipe and
    1F1B with equal stages the theory is (p - 1) / (m + p - 1)."""
    span = max(e["end"] for e in events) - min(e["start"] for e in events)
    if span <= 0:
        return 0.0
    busy = [sum(e["end"] - e["start"] for e in events if e["stage"] == s and e["kind"] in actions.COMPUTE)
            for s in range(num_stages)]
    return sum(1 - b / span for b in busy) / num_stages


class ScheduleGPipe(PipelineScheduleSingle):
    """All forwards, then all backwards: simple, and it holds every micro-batch's activations."""

    @staticmethod
    def compute_order(stage, num_stages, m):
        return [("F", mb) for mb in range(m)] + [("B", mb) for mb in range(m)]


class Schedule1F1B(PipelineScheduleSingle):
    """Warm up with a forward per later stage, then alternate one forward and one backward, so a
    stage holds at most ``num_stages`` micro-batches' activations. Needs n_microbatches >= stages."""

    def __init__(self, stage, n_microbatches, *args, **kwargs):
        if n_microbatches < stage.num_stages:
            raise ValueError(f"Schedule1F1B: n_microbatches={n_microbatches} on stage {stage.stage_index} (rank "
                             f"{stage.rank}) is fewer than the {stage.num_stages} stages; 1F1B needs at least one "
                             f"micro-batch per stage")
        super().__init__(stage, n_microbatches, *args, **kwargs)

    @staticmethod
    def compute_order(stage, num_stages, m):
        warmup = min(num_stages - stage - 1, m)
        order = [("F", mb) for mb in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i), ("B", i)]
        return order + [("B", mb) for mb in range(m - warmup, m)]


class ScheduleFromText(PipelineScheduleSingle):
    """A schedule written as text (``pipelining.text``: one line per rank, such as
    ``rank 0: 0F0 0F1 0B0 0F2 0B1 0B2``), validated, then run by the same runtime as the others.
    The micro-batch count is the text's."""

    def __init__(self, stage, schedule_text, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        self._loaded = text.loads(schedule_text)
        if len(self._loaded) != stage.num_stages:
            raise ValueError(f"ScheduleFromText: the text has {len(self._loaded)} ranks' lines for "
                             f"{stage.num_stages} stages (stage {stage.stage_index}, rank {stage.rank})")
        m = 1 + max(a.mb for program in self._loaded for a in program)
        super().__init__(stage, m, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec, scale_grads)

    def make_programs(self) -> list:
        return self._loaded
