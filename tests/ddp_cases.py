"""DDP cases shared by the sim tests and the mpiexec script: each returns failure strings.

The spec: for a model without BatchNorm or dropout, a mean-reduced loss and equal per-rank
batches, an N-rank DDP step equals one process stepping on the concatenated batch (float64).
Every rank builds that single-process reference itself (same data, rank 0's initial weights).
"""
import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.ddp_comm_hooks import allreduce_hook, fp16_compress_hook
from minidl.nn import functional as F
from minidl.nn.parallel import DistributedDataParallel as DDP

PER_RANK = 3


class Net(nn.Module):
    """A small CNN with an optional branch (for the unused-parameter cases) and a buffer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)
        self.extra = nn.Linear(5, 5)
        self.register_buffer("scale", minidl.ones(1))

    def forward(self, x, use_extra=True):
        h = F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1)
        out = self.fc(h) * self.scale
        return self.extra(out) if use_extra else out


def batch(size, step=0):
    rs = np.random.RandomState(100 + step)
    return minidl.from_numpy(rs.randn(PER_RANK * size, 1, 8, 8)), minidl.from_numpy(rs.randint(0, 5, PER_RANK * size))


def mine(t, rank):
    return t[PER_RANK * rank:PER_RANK * (rank + 1)]


def make(rank, device="cpu", **options):
    """A DDP model on ``device`` whose ranks start different (so the broadcast matters), and its
    reference on the CPU."""
    minidl.manual_seed(rank)  # under sim all ranks share one generator: the weights differ anyway
    model = Net().double().to(device)
    with minidl.no_grad():
        model.scale.fill_(1.0 + rank)
    ddp = DDP(model, **options)
    ref = Net().double()
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    return ddp, ref


def differs(ddp, ref, what, tol=1e-10):
    out = []
    for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
        if (p.grad is None) != (q.grad is None):
            out.append(f"{what}: {name}.grad is {'None' if p.grad is None else 'set'} but the reference's is not")
        elif p.grad is not None:
            err = float((p.grad.cpu() - q.grad).abs().max())
            if not err <= tol:
                out.append(f"{what}: {name}.grad differs by {err:.3g}")
    return out


def steps_match_single_process(rank, size, device="cpu", **options):
    ddp, ref = make(rank, device, **options)
    opts = [minidl.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ddp, ref)]
    failures = []
    for step in range(3):
        x, y = batch(size, step)
        for o in opts:
            o.zero_grad()
        F.cross_entropy(ddp(mine(x, rank).to(device)), mine(y, rank).to(device)).backward()
        F.cross_entropy(ref(x), y).backward()
        failures += differs(ddp, ref, f"step {step} {device} {options}")
        for o in opts:
            o.step()
    return failures


def no_sync_accumulates(rank, size):
    ddp, ref = make(rank)
    x0, y0 = batch(size, 0)
    x1, y1 = batch(size, 1)
    with ddp.no_sync():
        F.cross_entropy(ddp(mine(x0, rank)), mine(y0, rank)).backward()
    local = ddp.module.fc.bias.grad.clone()
    F.cross_entropy(ddp(mine(x1, rank)), mine(y1, rank)).backward()
    (F.cross_entropy(ref(x0), y0) + F.cross_entropy(ref(x1), y1)).backward()
    failures = differs(ddp, ref, "no_sync")
    if size > 1 and float((local - ref.fc.bias.grad).abs().max()) < 1e-6:
        failures.append("no_sync: the gradient inside no_sync was already averaged")
    return failures


def unused_parameters(rank, size):
    """Rank 0 alone uses `extra`: averaged with zeros elsewhere. Nobody uses it: its grad stays None."""
    failures = []
    for users in ({0}, set()):
        ddp, ref = make(rank, find_unused_parameters=True, bucket_cap_mb=1e-4)
        x, y = batch(size)
        F.cross_entropy(ddp(mine(x, rank), use_extra=rank in users), mine(y, rank)).backward()
        total = sum(F.cross_entropy(ref(mine(x, r), use_extra=r in users), mine(y, r)) for r in range(size))
        (total / size).backward()
        failures += differs(ddp, ref, f"find_unused_parameters with users {users}")
    ddp, _ = make(rank)
    x, y = batch(size)
    try:
        F.cross_entropy(ddp(mine(x, rank), use_extra=False), mine(y, rank)).backward()
        failures.append("an unused parameter without find_unused_parameters raised nothing")
    except RuntimeError as e:
        if "find_unused_parameters=True" not in str(e) or "extra.weight" not in str(e):
            failures.append(f"unclear unused-parameter error: {e}")
    return failures


def comm_hooks(rank, size):
    failures = []
    seen = []

    def counting_hook(state, bucket):
        seen.append((bucket.index(), len(bucket.parameters()), bucket.buffer().numel()))
        return allreduce_hook(state, bucket)
    ddp, ref = make(rank, bucket_cap_mb=1e-4)
    ddp.register_comm_hook(None, counting_hook)
    x, y = batch(size)
    F.cross_entropy(ddp(mine(x, rank)), mine(y, rank)).backward()
    F.cross_entropy(ref(x), y).backward()
    failures += differs(ddp, ref, "counting comm hook")
    numel = sum(p.numel() for p in ddp.parameters() if p.grad is not None)
    if [s[0] for s in seen] != list(range(len(seen))) or sum(s[2] for s in seen) != numel:
        failures.append(f"comm hook saw buckets {seen}, expected 0.. covering {numel} elements")
    ddp, ref = make(rank)
    ddp.register_comm_hook(None, fp16_compress_hook)
    F.cross_entropy(ddp(mine(x, rank)), mine(y, rank)).backward()
    F.cross_entropy(ref(x), y).backward()
    failures += differs(ddp, ref, "fp16_compress_hook", tol=2e-3)
    return failures


def buffers_and_state_dict(rank, size):
    ddp, _ = make(rank)
    failures = []
    if float(ddp.module.scale) != 1.0:
        failures.append(f"buffer after construction is {float(ddp.module.scale)}, not rank 0's 1.0")
    with minidl.no_grad():
        ddp.module.scale.fill_(5.0 + rank)
    ddp(batch(size)[0][:1])
    if float(ddp.module.scale) != 5.0:
        failures.append(f"buffer after forward is {float(ddp.module.scale)}, not rank 0's 5.0")
    w = ddp.module.fc.weight.detach().clone()
    gathered = [minidl.zeros_like(w) for _ in range(size)]
    dist.all_gather(gathered, w)
    if any(float((g - w).abs().max()) != 0 for g in gathered):
        failures.append("parameters differ across ranks after construction")
    keys = list(ddp.state_dict())
    if not keys or not all(k.startswith("module.") for k in keys) or "module.scale" not in keys:
        failures.append(f"state_dict keys {keys}")
    return failures


def timeline_shows_overlap(rank, size):
    ddp, _ = make(rank, bucket_cap_mb=1e-4, timeline=True)
    x, y = batch(size)
    F.cross_entropy(ddp(mine(x, rank)), mine(y, rank)).backward()
    backward, *buckets = ddp.timeline
    failures = []
    if len(buckets) != len(ddp.reducer.buckets) or len(buckets) < 3:
        failures.append(f"timeline has {len(buckets)} bucket entries for {len(ddp.reducer.buckets)} buckets")
    elif not (buckets[0]["start"] < backward["end"] and all(b["start"] <= b["end"] for b in buckets)):
        failures.append(f"first bucket not launched during backward: {ddp.timeline}")
    return failures


def view_grads(rank, size):
    failures = steps_match_single_process(rank, size, gradient_as_bucket_view=True, bucket_cap_mb=1e-4)
    ddp, _ = make(rank, gradient_as_bucket_view=True)
    x, y = batch(size)
    for _ in range(2):
        F.cross_entropy(ddp(mine(x, rank)), mine(y, rank)).backward()
    bucket = ddp.reducer.buckets[0]
    if not np.shares_memory(bucket.params[0].grad.numpy(), bucket.flat.numpy()):
        failures.append("gradient_as_bucket_view: .grad is not a view of the bucket")
    return failures


def sparse_embedding(rank, size):
    """A sparse embedding's gradient is gathered (each rank's rows, averaged, coalesced), not summed
    densely: 3 SGD steps with momentum (one under no_sync first) equal one process on the whole batch."""
    def model():
        rs = np.random.RandomState(0)
        net = nn.Sequential(nn.Embedding(20, 4, sparse=True), nn.Flatten(), nn.Linear(12, 1)).double()
        with minidl.no_grad():
            for p in net.parameters():
                p.copy_(minidl.from_numpy(rs.randn(*p.shape)))
        return net
    rs = np.random.RandomState(1)
    x, y = minidl.tensor(rs.randint(0, 20, size=(2 * size * PER_RANK, 3))), minidl.tensor(rs.randn(2 * size * PER_RANK, 1))
    ddp, ref = DDP(model()), model()
    opt, ref_opt = minidl.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9), minidl.optim.SGD(ref.parameters(), lr=0.1,
                                                                                            momentum=0.9)
    half = size * PER_RANK   # (the first half of the batch under no_sync, the second synced)
    failures = []
    for step in range(3):
        opt.zero_grad()
        ref_opt.zero_grad()
        with ddp.no_sync():
            F.mse_loss(ddp(mine(x[:half], rank)), mine(y[:half], rank)).div(2).backward()
        F.mse_loss(ddp(mine(x[half:], rank)), mine(y[half:], rank)).div(2).backward()
        (F.mse_loss(ref(x[:half]), y[:half]) / 2 + F.mse_loss(ref(x[half:]), y[half:]) / 2).backward()
        grad = ddp.module[0].weight.grad
        if not (grad.is_sparse and grad.is_coalesced()):
            failures.append(f"sparse embedding: the gathered gradient is {grad.layout}, coalesced "
                            f"{getattr(grad, 'is_coalesced', lambda: None)()}")
        if not np.allclose(grad.to_dense().numpy(), ref[0].weight.grad.to_dense().numpy(), rtol=1e-10, atol=1e-12):
            failures.append(f"sparse embedding: step {step} gradient differs from one process")
        opt.step()
        ref_opt.step()
    if not all(np.allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12)
               for p, q in zip(ddp.parameters(), ref.parameters())):
        failures.append("sparse embedding: the weights after 3 steps differ from one process")
    return failures


def run_all(rank, size):
    failures = []
    for options in ({}, {"bucket_cap_mb": 1e-4}, {"static_graph": True}):
        failures += steps_match_single_process(rank, size, **options)
    for case in (no_sync_accumulates, unused_parameters, comm_hooks, buffers_and_state_dict,
                 timeline_shows_overlap, view_grads, sparse_embedding):
        failures += case(rank, size)
    return failures
