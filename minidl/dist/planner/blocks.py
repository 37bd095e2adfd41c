"""The model as the planner sees it: a chain of blocks, each the next one's input.

A model is planned as the list of its children when it is an ``nn.Sequential`` (torch's pipelining cuts the same
way); anything else is refused by name, since the planner could not tell where a pipeline stage may end. The loss
rides as one more block (``LossBlock``), so that its compute and memory are counted where it runs: on the last
stage.
"""
from __future__ import annotations

import fnmatch

from ... import Tensor, nn, no_grad
from ..tensor import DTensor


class LossBlock(nn.Module):
    """``loss_fn(output, target)`` as a block of the chain."""

    def __init__(self, loss_fn, target):
        super().__init__()
        self.loss_fn, self.target = loss_fn, target

    def forward(self, *outputs):
        return self.loss_fn(outputs[0] if len(outputs) == 1 else outputs, self.target)


def chain_of(model) -> list:
    """The blocks of ``model`` in order, or a clear error naming what cannot be cut into a chain."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"plan: the model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"plan: cannot trace {type(model).__name__}: the planner cuts a model into the chain of its "
                        f"children, which only an nn.Sequential promises its forward is (write the model as "
                        f"nn.Sequential(embedding, *blocks, head), each child taking the one before's output)")
    blocks = list(model)
    if not blocks:
        raise ValueError("plan: the nn.Sequential has no children to plan")
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if frozen:
        raise ValueError(f"plan: the parameter {frozen[0]} does not require grad; the planner plans models whose "
                         f"parameters all train (DDP, ZeRO and FSDP treat frozen ones differently)")
    if not any(True for _ in model.parameters()):
        raise ValueError("plan: the model has no parameters to train")
    return blocks


def sharing(blocks) -> set:
    """The indices of the blocks that hold a parameter another block holds too (tied weights: under FSDP they
    are the root's; on a pipeline their gradients are summed over the stages)."""
    holders = {}
    for i, block in enumerate(blocks):
        for p in block.parameters():
            holders.setdefault(id(p), set()).add(i)
    return {i for held in holders.values() if len(held) > 1 for i in held}


def trace(blocks, sample, loss_fn, target) -> None:
    """Run the chain once on ``sample`` (no gradients kept) as nn.Sequential runs it, one tensor from child to
    child, and the loss on its output: a clear error naming the child that cannot take what the one before gives
    it, or that gives more than one tensor, before any rank is started to measure."""
    x = sample
    for i, block in enumerate(blocks):
        given = "the sample input" if i == 0 else f"child {i - 1}'s output"
        try:
            with no_grad():
                x = block(x)
        except Exception as e:
            raise TypeError(f"plan: cannot trace the model: child {i} ({type(block).__name__}) fails on {given}: "
                            f"{e}") from e
        if not isinstance(x, Tensor):
            raise TypeError(f"plan: cannot trace the model: child {i} ({type(block).__name__}) returns a "
                            f"{type(x).__name__}; the planner passes one tensor from child to child, as "
                            f"nn.Sequential does")
    try:
        with no_grad():
            loss = loss_fn(x, target)
    except Exception as e:
        raise TypeError(f"plan: loss_fn fails on the model's output: {e}") from e
    if not isinstance(loss, Tensor) or loss.numel() != 1:
        raise TypeError(f"plan: loss_fn must give one number (a tensor of one element), got {loss!r:.80}")


def block_plan(tp_plan, index, block) -> dict:
    """The part of ``tp_plan`` (parallelize_module's plan over the Sequential's names, "*" matching any child) that
    applies inside ``block``, child ``index``, with the block's name taken off (a wildcard's keys that name no
    child of this block left out)."""
    plan = {}
    children = [name for name, _ in block.named_children()]
    for key, style in (tp_plan or {}).items():
        head, _, rest = key.partition(".")
        if fnmatch.fnmatchcase(str(index), head) and (not rest or fnmatch.filter(children, rest.split(".")[0])):
            plan[rest] = style
    return plan


def local(t):
    """The tensor this rank holds of ``t`` (a DTensor's piece)."""
    return t.to_local() if isinstance(t, DTensor) else t
