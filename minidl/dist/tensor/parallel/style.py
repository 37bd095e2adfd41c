"""torch's parallel styles: how one module is split over a 1-D mesh, and how its inputs and outputs are laid.

Megatron's tensor parallelism is two of them. ``ColwiseParallel`` splits a Linear by its output features (the
weight's rows): the input comes whole, each rank computes its columns of the output, and the input's gradient
is a partial sum, all-reduced on the way back. ``RowwiseParallel`` splits a Linear by its input features (the
weight's columns): the input comes split on its last dimension — the column-parallel output, as it is — and
each rank's product is a partial sum, all-reduced (or reduce-scattered, for sequence parallelism) on the way
out. Colwise then rowwise: one all-reduce forward, and one backward only where the input needs a gradient.
On an Embedding the roles turn: colwise splits the features (the table's columns); rowwise splits the
vocabulary (its rows): each rank looks up the ids it holds, zeros elsewhere, and the output is a partial sum.

``SequenceParallel`` runs LayerNorm, Dropout and the like on the sequence's shards, its parameters replicated:
between a rowwise output reduce-scattered over the sequence and the next colwise input all-gathered from it,
the activations stay split. The ``PrepareModule*`` styles only lay inputs or outputs out, for modules whose
own code works on DTensors or on the pieces.

Each style runs on ``distribute_module`` (a partition of the parameters, hooks before and after forward), as
torch's do; ``use_local_output`` hands the module's user the local piece rather than the DTensor.
"""
from __future__ import annotations

from ....nn.module import Module
from ....nn.parameter import Parameter
from .._api import DTensor, distribute_tensor
from .._module import distribute_module
from ..placement_types import Placement, Replicate, Shard

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
           "PrepareModuleOutput", "PrepareModuleInputOutput"]


class ParallelStyle:
    """How ``parallelize_module`` splits one module: ``_apply(module, device_mesh)``. ``src_data_rank``: the
    mesh rank whose values the split parameters take (None: each rank keeps its own)."""
    src_data_rank: int | None = 0

    def _apply(self, module: Module, device_mesh) -> Module:
        raise NotImplementedError(f"{type(self).__name__} does not say how it splits a module (_apply)")


def _laid(value, mesh, placements, what, desired=None):
    """``value`` as a DTensor placed ``desired`` (by default as declared): a plain tensor is taken as this rank's
    piece of one placed ``placements`` (torch's from_local, unchecked); a DTensor is moved when ``placements`` and
    ``desired`` differ (torch compares the declared, not the actual, layouts)."""
    if not isinstance(value, DTensor):
        if not hasattr(value, "shape"):
            raise ValueError(f"{what}: expected a tensor or DTensor input, got {type(value).__name__}")
        value = DTensor.from_local(value, mesh, placements, run_check=False)
    if desired is not None and tuple(placements) != tuple(desired):
        value = value.redistribute(placements=desired)
    return value


def _output(out, placements, use_local_output):
    if out.placements != tuple(placements):
        out = out.redistribute(placements=placements)
    return out.to_local() if use_local_output else out


class _LinearSplit(ParallelStyle):
    """Colwise and rowwise: a Linear or Embedding split one way, its first input laid as the split needs."""

    def __init__(self, *, input_layouts: Placement | None = None, output_layouts: Placement | None = None,
                 use_local_output: bool = True):
        self.input_layouts = (input_layouts or self._default_input,)
        self.output_layouts = (output_layouts or self._default_output,)
        self.use_local_output = use_local_output

    def _apply(self, module, device_mesh):
        from .... import nn
        kind = "linear" if isinstance(module, nn.Linear) else "embedding" if isinstance(module, nn.Embedding) else None
        if kind is None:
            raise NotImplementedError(f"{type(self).__name__} splits only nn.Linear and nn.Embedding, not "
                                      f"{type(module).__name__}")
        placed, desired = self._layouts[kind]
        name = type(self).__name__

        def partition(_, submodule, mesh):
            if submodule is not module:
                return
            for key, param in list(module.named_parameters(recurse=False)):
                where = placed.get(key, Replicate())
                module.register_parameter(key, Parameter(
                    distribute_tensor(param.detach(), mesh, [where], src_data_rank=self.src_data_rank),
                    requires_grad=param.requires_grad))

        def before(_, inputs, mesh):   # (the move to ``desired`` is left to the op's rule, which wants the same:
            # in one step with the op, its backward is one collective — a reduce-scatter for an all-gather; a
            # partial sum is reduced here, as torch's: the rule would keep it and gather the weight instead)
            x = _laid(inputs[0], mesh, self.input_layouts, f"{name} input")
            if any(p.is_partial() for p in x.placements):
                x = x.redistribute(placements=(desired,))
            return (x, *inputs[1:])

        def after(_, outputs, mesh):
            return _output(outputs, self.output_layouts, self.use_local_output)
        return distribute_module(module, device_mesh, partition, before, after)

    def __repr__(self):
        return (f"{type(self).__name__}(input_layouts={self.input_layouts}, output_layouts={self.output_layouts}, "
                f"use_local_output={self.use_local_output})")


class ColwiseParallel(_LinearSplit):
    """A Linear split by output features (weight and bias: Shard(0)), an Embedding by its features (Shard(1)).
    Input: Replicate by default (a plain tensor taken as the whole); output: Shard(-1)."""
    _default_input, _default_output = Replicate(), Shard(-1)
    _layouts = {"linear": ({"weight": Shard(0), "bias": Shard(0)}, Replicate()),
                "embedding": ({"weight": Shard(1)}, Replicate())}


class RowwiseParallel(_LinearSplit):
    """A Linear split by input features (weight: Shard(1); the bias whole, added once to the reduced sum), an
    Embedding by vocabulary (Shard(0): each rank's lookups of the ids it holds, a partial sum). Input: Shard(-1)
    by default for a Linear (Replicate is what an Embedding takes); output: Replicate (all-reduced)."""
    _default_input, _default_output = Shard(-1), Replicate()
    _layouts = {"linear": ({"weight": Shard(1), "bias": Replicate()}, Shard(-1)),
                "embedding": ({"weight": Shard(0)}, Replicate())}


class SequenceParallel(ParallelStyle):
    """LayerNorm, Dropout, RMSNorm and the like run on shards of the sequence (dimension ``sequence_dim``):
    the parameters are replicated (each rank's own values, as torch's: they are alike), the input laid
    Shard(sequence_dim) — a plain tensor taken as this rank's piece of it — and the output a DTensor (or,
    ``use_local_output``, its piece)."""

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False):
        self.sequence_sharding = (Shard(sequence_dim),)
        self.use_local_output = use_local_output

    def _apply(self, module, device_mesh):
        def replicate(_, submodule, mesh):
            for key, param in list(submodule.named_parameters(recurse=False)):
                submodule.register_parameter(key, Parameter(
                    DTensor.from_local(param.detach(), mesh, [Replicate()], run_check=False),
                    requires_grad=param.requires_grad))

        def before(mod, inputs, mesh):
            x = inputs[0]
            if isinstance(x, DTensor):
                x = x if x.placements == self.sequence_sharding else x.redistribute(placements=self.sequence_sharding)
            elif hasattr(x, "shape"):
                x = DTensor.from_local(x, mesh, self.sequence_sharding)
            else:
                raise ValueError(f"SequenceParallel: expected the input of {type(mod).__name__} to be a tensor or "
                                 f"DTensor, got {type(x).__name__}")
            return (x, *inputs[1:])

        def after(_, outputs, mesh):
            return outputs.to_local() if self.use_local_output else outputs
        return distribute_module(module, device_mesh, replicate, before, after)

    def __repr__(self):
        return (f"SequenceParallel(sequence_dim={self.sequence_sharding[0].dim}, "
                f"use_local_output={self.use_local_output})")


def _as_tuple(layouts):
    return (layouts,) if isinstance(layouts, Placement) else None if layouts is None else tuple(layouts)


class PrepareModuleInput(ParallelStyle):
    """Lay a module's inputs out before its forward: each positional input (``input_layouts``, None to leave
    one as it is) and keyword input (``input_kwarg_layouts``) is taken as placed so — a plain tensor as this
    rank's piece — and moved to its ``desired_*`` placement; ``use_local_output`` passes the pieces on."""

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output: bool = False):
        self.input_layouts, self.desired_input_layouts = _as_tuple(input_layouts), _as_tuple(desired_input_layouts)
        if self.input_layouts is not None and (self.desired_input_layouts is None
                                               or len(self.input_layouts) != len(self.desired_input_layouts)):
            raise ValueError(f"PrepareModuleInput: input_layouts {self.input_layouts} and desired_input_layouts "
                             f"{self.desired_input_layouts} must be given together, of the same length")
        self.input_kwarg_layouts = dict(input_kwarg_layouts or {})
        self.desired_input_kwarg_layouts = dict(desired_input_kwarg_layouts or {})
        if len(self.input_kwarg_layouts) != len(self.desired_input_kwarg_layouts):
            raise ValueError(f"PrepareModuleInput: input_kwarg_layouts {self.input_kwarg_layouts} and "
                             f"desired_input_kwarg_layouts {self.desired_input_kwarg_layouts} must have the same "
                             f"length")
        self.use_local_output = use_local_output

    def _one(self, value, mesh, layout, desired):
        if layout is None:
            return value
        laid = _laid(value, mesh, (layout,), "PrepareModuleInput", None if desired is None else (desired,))
        return laid.to_local() if self.use_local_output else laid

    def _prepared(self, module, args, kwargs, mesh):
        if self.input_layouts is not None:
            if len(args) != len(self.input_layouts):
                raise ValueError(f"PrepareModuleInput on {type(module).__name__}: {len(args)} positional input(s), "
                                 f"but input_layouts has {len(self.input_layouts)}")
            args = tuple(self._one(a, mesh, p, q) for a, p, q in zip(args, self.input_layouts,
                                                                    self.desired_input_layouts))
        kwargs = {k: self._one(v, mesh, self.input_kwarg_layouts.get(k), self.desired_input_kwarg_layouts.get(k))
                  for k, v in kwargs.items()}
        return args, kwargs

    def _apply(self, module, device_mesh):
        module.register_forward_pre_hook(lambda m, args, kwargs: self._prepared(m, args, kwargs, device_mesh),
                                         with_kwargs=True)
        return module

    def __repr__(self):
        return (f"PrepareModuleInput(input_layouts={self.input_layouts}, desired_input_layouts="
                f"{self.desired_input_layouts}, input_kwarg_layouts={self.input_kwarg_layouts}, "
                f"desired_input_kwarg_layouts={self.desired_input_kwarg_layouts}, "
                f"use_local_output={self.use_local_output})")


class PrepareModuleOutput(ParallelStyle):
    """Lay a module's outputs out after its forward: each (``output_layouts``, None to leave one as it is) taken
    as placed so — a plain tensor as this rank's piece — and moved to ``desired_output_layouts``; by default
    (``use_local_output``) the pieces are passed on."""

    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output: bool = True):
        self.output_layouts, self.desired_output_layouts = _as_tuple(output_layouts), _as_tuple(desired_output_layouts)
        if len(self.output_layouts) != len(self.desired_output_layouts):
            raise ValueError(f"PrepareModuleOutput: output_layouts {self.output_layouts} and desired_output_layouts "
                             f"{self.desired_output_layouts} must have the same length")
        self.use_local_output = use_local_output

    def _prepared(self, module, outputs, mesh):
        many = isinstance(outputs, tuple)
        outputs = outputs if many else (outputs,)
        if len(outputs) != len(self.output_layouts):
            raise ValueError(f"PrepareModuleOutput on {type(module).__name__}: {len(outputs)} output(s), but "
                             f"output_layouts has {len(self.output_layouts)}")
        made = []
        for out, layout, desired in zip(outputs, self.output_layouts, self.desired_output_layouts):
            if layout is not None:
                out = _laid(out, mesh, (layout,), "PrepareModuleOutput", (desired,))
                out = out.to_local() if self.use_local_output else out
            made.append(out)
        return tuple(made) if len(made) > 1 else made[0]

    def _apply(self, module, device_mesh):
        module.register_forward_hook(lambda m, inputs, outputs: self._prepared(m, outputs, device_mesh))
        return module

    def __repr__(self):
        return (f"PrepareModuleOutput(output_layouts={self.output_layouts}, desired_output_layouts="
                f"{self.desired_output_layouts}, use_local_output={self.use_local_output})")


class PrepareModuleInputOutput(ParallelStyle):
    """PrepareModuleInput and PrepareModuleOutput on one module (``use_local_input``: the former's
    use_local_output)."""

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_input: bool = False, output_layouts,
                 desired_output_layouts, use_local_output: bool = True):
        self.prepare_module_input = PrepareModuleInput(
            input_layouts=input_layouts, desired_input_layouts=desired_input_layouts,
            input_kwarg_layouts=input_kwarg_layouts, desired_input_kwarg_layouts=desired_input_kwarg_layouts,
            use_local_output=use_local_input)
        self.prepare_module_output = PrepareModuleOutput(
            output_layouts=output_layouts, desired_output_layouts=desired_output_layouts,
            use_local_output=use_local_output)

    def _apply(self, module, device_mesh):
        self.prepare_module_input._apply(module, device_mesh)
        self.prepare_module_output._apply(module, device_mesh)
        return module

    def __repr__(self):
        return f"PrepareModuleInputOutput({self.prepare_module_input!r}, {self.prepare_module_output!r})"
