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
    # both ranks done with the group before either tears it down (torch's gloo has aborted, under load, a process
    # whose peer closed first)
    dist.barrier()
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


def survivor(rank, out_dir, what):
    """env:// gloo; rank 0 (the store's host) freezes by MINIDL_FAULT, or rank 1 raises (``what``). The other
    ranks all-reduce small tensors until their operation fails, and write its error to a file."""
    import time

    import minidl
    import minidl.dist as dist
    os.environ["RANK"] = str(rank)
    dist.init_process_group("gloo", timeout=60)
    start = time.monotonic()
    try:
        if what == "raise" and rank == 1:
            time.sleep(1.0)   # (rank 0 is waiting by then)
            raise KeyError("rank 1 fails on purpose")
        if what == "raise":
            dist.recv(minidl.zeros(3), 1)
        else:
            for _ in range(100000):
                dist.all_reduce(minidl.ones(4))
    except dist.DistError as e:
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
            f.write(f"{time.monotonic() - start:.1f} {e}")


def waits_on_its_store(rank, port):
    """Rank 1 waits on the job's own store for a key never set, longer than the heartbeat: no rank may take that
    for a frozen peer. Then both run a barrier."""
    from datetime import timedelta

    import minidl.dist as dist
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    if rank == 1:
        try:
            store.wait(["never"], timedelta(seconds=3))
        except dist.DistStoreError:
            pass
    dist.barrier()
    dist.destroy_process_group()
