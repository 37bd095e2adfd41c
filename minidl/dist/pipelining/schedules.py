"""Pipeline schedules, as ``torch.distributed.pipelining``'s: ``ScheduleGPipe`` and
``Schedule1F1B`` (one stage per rank), ``ScheduleInterleaved1F1B`` (several), and
``ScheduleFromText`` (any, written as text).

A schedule is data: ``rank_order(rank)`` gives a rank's forwards and backwards in order
(single-stage schedules give ``compute_order`` per stage); ``actions.program_of`` adds the
receive before and the send after each, and ``actions.validate`` checks all ranks' programs
together before the first step runs. One runtime (``_Runtime``) executes any such program, so a
new schedule only adds an order.

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

import hashlib
import time

import minidl

from .. import collectives, objects
from ..communicators.base import DistError
from ..p2p import irecv, isend
from . import actions, text
from .microbatch import merge_chunks, split_args_kwargs_into_chunks
from .stage import HEADER, MAX_TENSORS, decode, encode

MAX_TAGGED = 1365  # stages x micro-batches: the message tags stay below MPI's guaranteed 32767


class PipelineError(RuntimeError):
    """A stage failed during a pipelined step (the message names it)."""


class _PipelineSchedule:
    """Runs this rank's stages (one, or several for interleaved schedules) through the actions of
    ``programs[rank]``, ``n_microbatches`` micro-batches per step."""

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        first = stages[0]
        self._stages = {stage.stage_index: stage for stage in stages}
        self._group, self._rank, self._ranks = first.group, first.group_rank, first.group_size
        self._num_stages, self._n_microbatches, self._loss_fn = first.num_stages, n_microbatches, loss_fn
        self._where = f"stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, self._stages))} (rank {first.rank})"
        if not 1 <= n_microbatches or self._num_stages * n_microbatches > MAX_TAGGED:
            raise ValueError(f"{type(self).__name__}: n_microbatches={n_microbatches} on {self._where}; it must be "
                             f"at least 1 and at most {MAX_TAGGED // self._num_stages} for {self._num_stages} stages")
        self._args_chunk_spec, self._kwargs_chunk_spec = args_chunk_spec, kwargs_chunk_spec
        self._output_merge_spec, self.scale_grads = output_merge_spec, scale_grads
        self.programs = self.make_programs()
        self._events = []
        self._agreed = False

    def make_programs(self) -> list:
        """Every rank's actions, validated (from ``rank_order``, with the transfers added)."""
        programs = [actions.program_of(self.rank_order(r), self._num_stages) for r in range(self._ranks)]
        actions.validate(programs)
        return programs

    def rank_order(self, rank) -> list:
        """The forwards and backwards [(kind, stage, mb)] that ``rank`` runs, in order."""
        raise NotImplementedError

    def dumps(self, transfers=False) -> str:
        """The schedule in the text format of ``pipelining.text`` (to edit and run with ScheduleFromText)."""
        return text.dumps(self.programs, transfers)

    def table(self, costs=None) -> str:
        """The schedule as planned: one column per rank, one row per time step (every action one
        step long, or ``costs[kind]`` steps: see ``actions.table``)."""
        return actions.table(self.programs, costs)

    # -- the public calls -------------------------------------------------------------------------
    def step(self, *args, target=None, losses=None, return_outputs=True, loss_kwargs=None, **kwargs):
        """One pipelined training step: the rank holding the first stage is given the batch, the one
        holding the last the target; ``losses`` (a list, there) receives each micro-batch's loss
        (``loss_kwargs`` go to loss_fn). Returns the last stage's merged output (None elsewhere)."""
        self._check_call(args, kwargs, target, training=True)
        out = self._run(self.programs[self._rank], args, kwargs, target, losses, return_outputs, loss_kwargs)
        if self.scale_grads:
            for stage in self._stages.values():
                stage.scale_grads(grad_scale_factor=self._n_microbatches)
        return out

    def eval(self, *args, target=None, losses=None, **kwargs):
        """Forward only, micro-batch by micro-batch (no graph kept); losses when a target is given."""
        self._check_call(args, kwargs, target, training=False)
        program = [a for a in self.programs[self._rank] if a.kind in ("RECV_F", "F", "SEND_F")]
        with minidl.no_grad():
            return self._run(program, args, kwargs, target, losses, True, None)

    def timeline(self) -> dict:
        """Every rank's actions of the last step with their start and end (seconds from the step's
        start), the bubble, each stage's peak activation bytes and the plan (``ideal``, a backward
        two time steps long). Collective: call it on every rank."""
        gathered = [None] * self._ranks
        peaks = {s: stage.peak_activation_bytes for s, stage in self._stages.items()}
        objects.all_gather_object(gathered, (self._rank, self._events, peaks), group=self._group)
        gathered.sort(key=lambda item: item[0])
        peak = {s: b for _, _, found in gathered for s, b in found.items()}
        events = [e for _, evs, _ in gathered for e in evs]
        return {"events": events, "bubble": bubble(events),
                "peak_activation_bytes": [peak[s] for s in range(self._num_stages)],
                "ideal": self.table(actions.COSTS)}

    # -- checks ---------------------------------------------------------------------------------
    def _check_call(self, args, kwargs, target, training):
        where = f"{type(self).__name__}.{'step' if training else 'eval'} on {self._where}"
        holds_first, holds_last = 0 in self._stages, self._num_stages - 1 in self._stages
        if holds_first and not args and not kwargs:
            raise ValueError(f"{where}: the first stage needs the batch as arguments")
        if not holds_first and (args or kwargs):
            raise ValueError(f"{where}: only the first stage is given inputs; this stage receives them")
        if training and not minidl.is_grad_enabled():
            raise RuntimeError(f"{where}: step() trains and needs autograd; under no_grad use eval()")
        if target is not None and not holds_last:
            raise ValueError(f"{where}: a target is given on a stage that is not the last "
                             f"(stage {self._num_stages - 1} computes the loss)")
        if training and holds_last and (self._loss_fn is None or target is None):
            raise ValueError(f"{where}: the last stage needs a loss_fn and a target to train")

    def _agree(self):
        """Before the first transfer: do all ranks of the pipeline group run the same schedule (kind,
        stages, micro-batches, and every rank's actions, by the hash of ``dumps()``)? Where they
        don't, every rank raises the same error naming each rank's schedule (the transfers would
        otherwise mismatch: a wrong shape far away, or a rank waiting for a message never sent)."""
        digest = hashlib.sha256(self.dumps().encode()).hexdigest()[:12]
        mine = (self._where, type(self).__name__, self._num_stages, self._n_microbatches, digest)
        every = [None] * self._ranks
        objects.all_gather_object(every, mine, group=self._group)
        if len({tuple(entry[1:]) for entry in every}) > 1:
            raise PipelineError("pipelining: the ranks of the pipeline group run different schedules, so their "
                                "transfers would not match: " + "; ".join(
                                    f"{where}: {kind} of {stages} stages, {m} micro-batches (actions {h})"
                                    for where, kind, stages, m, h in every))

    # -- the runtime ----------------------------------------------------------------------------
    def _run(self, program, args, kwargs, target, losses, return_outputs, loss_kwargs):
        runtime = _Runtime(self, args, kwargs, target, loss_kwargs or {})
        for stage in self._stages.values():
            stage.clear_runtime_states()
        if self._agreed:
            collectives.barrier(group=self._group)   # a common start for the timeline
        else:   # (the agreement, an exchange among all ranks, is that start too)
            self._agree()
            self._agreed = True
        self._events = runtime.execute(program)
        holds_last = self._num_stages - 1 in self._stages
        if losses is not None and holds_last:
            losses.clear()   # (as torch: the list holds this step's losses)
            losses.extend(runtime.losses)
        if holds_last and return_outputs and runtime.outputs_of_last:
            return merge_chunks([runtime.outputs_of_last[mb] for mb in sorted(runtime.outputs_of_last)],
                                self._output_merge_spec)
        return None


class PipelineScheduleSingle(_PipelineSchedule):
    """One ``PipelineStage`` per rank (stage i on rank i); a subclass gives ``compute_order``."""

    def __init__(self, stage, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        if stage.num_stages != stage.group_size:
            raise ValueError(f"{type(self).__name__}: num_stages={stage.num_stages} on {stage.group_size} ranks "
                             f"(stage {stage.stage_index}, rank {stage.rank}); this schedule runs one stage per "
                             f"rank (ScheduleInterleaved1F1B runs several)")
        super().__init__([stage], n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads)

    def rank_order(self, rank):
        return [(kind, rank, mb) for kind, mb in self.compute_order(rank, self._num_stages, self._n_microbatches)]

    @staticmethod
    def compute_order(stage, num_stages, m):
        raise NotImplementedError


class PipelineScheduleMulti(_PipelineSchedule):
    """Several ``PipelineStage`` s per rank (stage s on rank s % ranks); a subclass gives ``rank_order``."""

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        stages = list(stages)
        if not stages:
            raise ValueError(f"{type(self).__name__}: no stages given")
        ranks = stages[0].group_size
        if stages[0].num_stages % ranks or len(stages) != stages[0].num_stages // ranks:
            raise ValueError(f"{type(self).__name__}: {len(stages)} stages of {stages[0].num_stages} on rank "
                             f"{stages[0].rank}; each of the {ranks} ranks holds num_stages / ranks of them")
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads)


class _Runtime:
    """One step of one rank's program: each action timed, the transfers posted early.

    Tensors travel with a tag per (stage, micro-batch, tensor). Before each micro-batch's
    activations goes a small header with their shapes: every header is received from the step's
    start, and the activations' receive is posted as soon as its header is in (checked before each
    action), so the transfer overlaps the compute. A gradient's receive is posted right after the
    forward that made the outputs it belongs to (their shapes are its shapes)."""

    def __init__(self, schedule, args, kwargs, target, loss_kwargs):
        self.schedule, self.stages, self.loss_kwargs = schedule, schedule._stages, loss_kwargs
        m, where = schedule._n_microbatches, schedule._where
        self.arg_mbs, self.kwarg_mbs = split_args_kwargs_into_chunks(
            args, kwargs, m, schedule._args_chunk_spec, schedule._kwargs_chunk_spec, where) if 0 in self.stages \
            else ([()] * m, [{}] * m)
        self.target_mbs = None
        if target is not None:
            self.target_mbs = [mb[0] for mb in split_args_kwargs_into_chunks((target,), None, m, where=where,
                                                                             names=("the target",))[0]]
        # keyed by (stage, micro-batch)
        self.inputs, self.outputs, self.loss_of, self.input_grads, self.output_grads = {}, {}, {}, {}, {}
        self.outputs_of_last, self.losses = {}, []
        self.pending_sends, self.headers, self.posted = [], {}, {}
        self.local = {}   # (what, edge, mb) -> tensors passed between two stages of this rank
        self.run = {"RECV_F": self.receive_activations, "F": self.forward, "SEND_F": self.send_activations,
                    "RECV_B": self.receive_gradients, "B": self.backward, "I": self.backward_input,
                    "W": self.backward_weight, "SEND_B": self.send_gradients}

    def tag(self, what, edge, mb, i=0):
        """The message tag of tensor ``i`` of micro-batch ``mb``'s header, activations or gradients
        between stages ``edge`` and ``edge + 1`` (the same at both ends)."""
        kind = ("header", "activation", "gradient").index(what)
        return ((mb * self.schedule._num_stages + edge) * 3 + kind) * MAX_TENSORS + i + 1

    def execute(self, program):
        start, events = time.perf_counter(), []
        # each stage's last backward (B or I) and last W: DDP reduces in one of them (see the stage)
        self.last_of = {(a.kind in actions.BACKWARDS, a.stage): a for a in program if a.kind in ("B", "I", "W")}
        for action in program:
            if action.kind == "RECV_F" and self.stages[action.stage].prev_rank != self.stages[action.stage].rank:
                stage = self.stages[action.stage]
                header = minidl.empty(HEADER, dtype=minidl.int64)
                self.headers[(action.stage, action.mb)] = (header, irecv(
                    header, stage.prev_rank, group=stage.group, tag=self.tag("header", action.stage - 1, action.mb)))
        for action in program:
            stage, began = self.stages[action.stage], time.perf_counter()
            try:
                self._post_arrived_headers()
                self.run[action.kind](action.stage, action.mb)
            except DistError as e:
                raise PipelineError(f"pipelining: stage {action.stage} (rank {stage.rank}) failed in {action}, a "
                                    f"transfer with its neighbour: {e}") from e
            except PipelineError:
                raise
            except Exception as e:
                raise PipelineError(f"pipelining: stage {action.stage} (rank {stage.rank}) raised in {action}: "
                                    f"{type(e).__name__}: {e}") from e
            events.append({"stage": action.stage, "rank": stage.rank, "kind": action.kind, "mb": action.mb,
                           "start": began - start, "end": time.perf_counter() - start})
        for work in self.pending_sends:
            work.wait()
        return events

    def _post(self, kind, s, mb, metas, peer):
        what, edge = ("activation", s - 1) if kind == "RECV_F" else ("gradient", s)
        buffers = [minidl.empty(shape, dtype=dtype) for shape, dtype in metas]
        group = self.stages[s].group
        self.posted[(kind, s, mb)] = (buffers, [irecv(b, peer, group=group, tag=self.tag(what, edge, mb, i))
                                                for i, b in enumerate(buffers)])

    def _post_arrived_headers(self):
        for key, (header, work) in list(self.headers.items()):
            if work.is_completed():
                self._activations_announced(key, header, work)

    def _activations_announced(self, key, header, work):
        work.wait()
        del self.headers[key]
        s, mb = key
        metas = decode(header)
        self.stages[s].check_input_meta(mb, metas)
        self._post("RECV_F", s, mb, metas, self.stages[s].prev_rank)

    def _wait(self, kind, s, mb):
        buffers, works = self.posted.pop((kind, s, mb))
        for work in works:
            work.wait()
        return buffers

    def _send(self, what, s, mb, tensors, peer):
        group, edge = self.stages[s].group, s if what == "activation" else s - 1
        if peer == self.stages[s].rank:   # (the neighbour stage is on this rank too)
            self.local[(what, edge, mb)] = [t.detach() for t in tensors]
            return
        if what == "activation":
            self.pending_sends.append(isend(encode(tensors), peer, group=group, tag=self.tag("header", edge, mb)))
        tensors = [t.detach().contiguous() for t in tensors]
        self.pending_sends += [isend(t, peer, group=group, tag=self.tag(what, edge, mb, i))
                               for i, t in enumerate(tensors)]

    # -- the actions ----------------------------------------------------------------------------
    def receive_activations(self, s, mb):
        if self.stages[s].prev_rank == self.stages[s].rank:
            self.inputs[(s, mb)] = self.local.pop(("activation", s - 1, mb))
            return
        if (s, mb) in self.headers:   # (not in yet: wait for it here)
            self._activations_announced((s, mb), *self.headers[(s, mb)])
        self.inputs[(s, mb)] = self._wait("RECV_F", s, mb)

    def forward(self, s, mb):
        stage, training = self.stages[s], minidl.is_grad_enabled()
        args = self.arg_mbs[mb] if stage.is_first else tuple(self.inputs.pop((s, mb)))
        outputs = stage.forward_one_chunk(mb, args, self.kwarg_mbs[mb] if stage.is_first else {}, keep=training)
        if not stage.is_last:
            self.outputs[(s, mb)] = outputs
            if training and stage.next_rank != stage.rank:
                self._post("RECV_B", s, mb, [(tuple(t.shape), t.dtype) for t in outputs], stage.next_rank)
            return
        single = outputs[0] if len(outputs) == 1 else outputs
        self.outputs_of_last[mb] = _detached(single)
        if self.target_mbs is not None and self.schedule._loss_fn is not None:
            loss = self.schedule._loss_fn(single, self.target_mbs[mb], **self.loss_kwargs)
            self.losses.append(loss.detach())
            self.loss_of[(s, mb)] = loss

    def send_activations(self, s, mb):
        self._send("activation", s, mb, self.outputs.pop((s, mb)), self.stages[s].next_rank)

    def receive_gradients(self, s, mb):
        local = self.stages[s].next_rank == self.stages[s].rank
        self.output_grads[(s, mb)] = self.local.pop(("gradient", s, mb)) if local else self._wait("RECV_B", s, mb)

    def backward(self, s, mb, full=True):
        stage = self.stages[s]
        last = self.last_of[True, s] == ("B" if full else "I", s, mb)
        given = dict(loss=self.loss_of.pop((s, mb))) if stage.is_last else \
            dict(output_grads=self.output_grads.pop((s, mb)))
        self.input_grads[(s, mb)] = stage.backward_one_chunk(mb, last=last, full_backward=full, **given)

    def backward_input(self, s, mb):
        self.backward(s, mb, full=False)

    def backward_weight(self, s, mb):
        self.stages[s].backward_weight_one_chunk(mb, last=self.last_of[False, s] == ("W", s, mb))

    def send_gradients(self, s, mb):
        self._send("gradient", s, mb, self.input_grads.pop((s, mb)), self.stages[s].prev_rank)


def _detached(value):
    return tuple(v.detach() for v in value) if isinstance(value, tuple) else value.detach()


def bubble(events) -> float:
    """The fraction of the step's wall time (from the common start to the last rank's last action)
    that a rank spends outside its forwards and backwards, averaged over the ranks. For GPipe and
    1F1B with equal stages the theory is (p - 1) / (m + p - 1)."""
    span = max(e["end"] for e in events) - min(e["start"] for e in events)
    ranks = sorted({e["rank"] for e in events})
    if span <= 0:
        return 0.0
    busy = [sum(e["end"] - e["start"] for e in events if e["rank"] == r and e["kind"] in actions.COMPUTE)
            for r in ranks]
    return sum(1 - b / span for b in busy) / len(ranks)


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


class ScheduleFromText(_PipelineSchedule):
    """A schedule written as text (``pipelining.text``: one line per rank, such as
    ``rank 0: 0F0 0F1 0B0 0F2 0B1 0B2``), validated, then run by the same runtime as the others,
    on this rank's stage (or list of stages). The micro-batch count is the text's."""

    def __init__(self, stages, schedule_text, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        stages = list(stages) if isinstance(stages, (list, tuple)) else [stages]
        self._loaded = text.loads(schedule_text)
        first = stages[0]
        if len(self._loaded) != first.group_size or actions.num_stages_of(self._loaded) != first.num_stages:
            raise ValueError(f"ScheduleFromText: the text has {len(self._loaded)} ranks' lines and "
                             f"{actions.num_stages_of(self._loaded)} stages, the group {first.group_size} ranks and "
                             f"{first.num_stages} stages (rank {first.rank})")
        m = 1 + max(a.mb for program in self._loaded for a in program)
        super().__init__(stages, m, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec, scale_grads)

    def make_programs(self) -> list:
        return self._loaded


class ScheduleInterleaved1F1B(PipelineScheduleMulti):
    """Interleaved 1F1B (Narayanan et al., 2021), as torch's: rank r holds stages r, r + p, ...;
    forwards go round the rank's stages a round of micro-batches at a time, backwards the other way,
    one forward and one backward alternating after a warm-up. The bubble shrinks with the stages
    per rank. The micro-batches split into rounds of at most p: m must be a multiple of
    max(1, m // p), as torch requires."""

    _requirement = "Interleaved 1F1B"   # (how torch's error names the schedule)
    _warmup_per_hop = 2                 # extra warm-up forwards per rank away from the last one

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True, backward_requires_autograd=True, defer_pp_recv=False):
        stages = list(stages)
        ranks = stages[0].group_size if stages else 1
        self._rounds = max(1, n_microbatches // ranks)
        if n_microbatches % self._rounds:
            raise ValueError(f"{self._requirement} requires the number of microbatches to be a multiple of the "
                             f"number of rounds ({self._rounds}), but got {n_microbatches}.")
        self._per_round = n_microbatches // self._rounds
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads)

    @classmethod
    def planned_orders(cls, ranks, num_stages, n_microbatches) -> list:
        """Every rank's ``rank_order`` for ``num_stages`` stages on ``ranks`` ranks, with no stages made (what a
        planner plays to price the schedule)."""
        schedule = cls.__new__(cls)
        schedule._ranks, schedule._num_stages, schedule._n_microbatches = ranks, num_stages, n_microbatches
        schedule._rounds = max(1, n_microbatches // ranks)
        schedule._per_round = n_microbatches // schedule._rounds
        return [schedule.rank_order(r) for r in range(ranks)]

    def _plan(self, rank, backward_kind):
        """(this rank's forwards in order, its backwards in order, how many forwards warm up)."""
        p, m, per_round = self._ranks, self._n_microbatches, self._per_round
        local = self._num_stages // p
        total = local * m
        next_mb = {}

        def take(kind, stage):
            mb = next_mb.get((kind, stage), 0)
            next_mb[(kind, stage)] = mb + 1
            return kind, stage, mb
        # the i-th forward goes to the rank's stages in order, a round of micro-batches each;
        # the j-th backward to its stages in reverse
        forwards = [take("F", ((i // per_round) % local) * p + rank) for i in range(total)]
        backwards = [take(backward_kind, (local - 1 - (j // per_round) % local) * p + rank) for j in range(total)]
        warmup = min((local - 1) * per_round + self._warmup_per_hop * (p - 1 - rank), total)
        return forwards, backwards, warmup

    def rank_order(self, rank):
        forwards, backwards, warmup = self._plan(rank, "B")
        order = forwards[:warmup]
        for f, b in zip(forwards[warmup:], backwards):
            order += [f, b]
        return order + backwards[len(forwards) - warmup:]


class ScheduleInterleavedZeroBubble(ScheduleInterleaved1F1B):
    """Zero bubble, torch's ZB1P (Qi et al., 2024, the ZB-H1 schedule interleaved): interleaved
    1F1B's order with every backward split into I, the input's gradient, sent upstream at once,
    and W, the weights' gradients, which waits. A rank warms up with one forward less per hop from
    the last rank, and after its first ``rank`` input passes follows each with the oldest pending
    W: the W passes fill the time that 1F1B's ranks spend waiting for gradients."""

    _requirement = "Zero bubble"
    _warmup_per_hop = 1

    def rank_order(self, rank):
        forwards, inputs, warmup = self._plan(rank, "I")
        weights = [("W", stage, mb) for _, stage, mb in inputs]
        order, pending = forwards[:warmup], 0
        for j, backward in enumerate(inputs):
            order += forwards[warmup + j:warmup + j + 1] + [backward]
            if j >= rank:
                order.append(weights[pending])
                pending += 1
        return order + weights[pending:]
