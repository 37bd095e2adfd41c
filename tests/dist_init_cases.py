"""Child bodies for tests/test_dist_init.py, importable by spawned processes: a data-parallel script written once
for ``torch`` and run with either library (only the import differs), and the init methods one after another."""
import os

import numpy as np


def ddp_script(rank, library, out_dir):
    """A PyTorch DDP script: the process group from the environment (env://), a model made the same on every
    rank, three steps on each rank's own batch; rank 0 saves the parameters it ends with."""
    if library == "torch":
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
    else:
        import minidl as torch
        import minidl.dist as dist
        from minidl.nn.parallel import DistributedDataParallel as DDP
    os.environ["RANK"] = str(rank)
    dist.init_process_group("gloo")
    assert dist.get_backend() == "gloo" and dist.get_world_size() == 2
    weights = np.random.default_rng(0).standard_normal((3, 4))
    model = torch.nn.Linear(4, 3, dtype=torch.float64)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(weights))
        model.bias.zero_()
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = np.random.default_rng(1 + rank).standard_normal((5, 4))
    for _ in range(3):
        opt.zero_grad()
        ddp(torch.tensor(data)).pow(2).sum().backward()
        opt.step()
    if rank == 0:
        np.save(os.path.join(out_dir, f"{library}.npy"), model.weight.detach().numpy())
    dist.destroy_process_group()


def init_methods(rank, world_size, tcp_port, file_path):
    """tcp:// and file:// in turn, each checked with an all-reduce."""
    import minidl
    import minidl.dist as dist
    for method in (f"tcp://127.0.0.1:{tcp_port}", f"file://{file_path}"):
        dist.init_process_group("gloo", init_method=method, rank=rank, world_size=world_size)
        t = minidl.tensor([float(rank + 1)])
        dist.all_reduce(t)
        assert t.item() == world_size * (world_size + 1) / 2, (method, t.item())
        dist.destroy_process_group()


def disagreeing_world_size(rank, file_path):
    """Rank 1 is told another world size: both ranks fail naming both sizes."""
    import minidl.dist as dist
    dist.init_process_group("gloo", init_method=f"file://{file_path}", rank=rank, world_size=2 + rank, timeout=20)
