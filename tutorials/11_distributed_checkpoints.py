"""Tutorial 11: distributed checkpoints, one global tensor stored as boxes and loadable on any number of ranks.

Run it:  python tutorials/11_distributed_checkpoints.py

A model trained on many ranks is spread over them: a tensor-parallel weight is cut in row or column
blocks, one per rank; data-parallel replicas sit whole on every rank. ``minidl.dist.checkpoint``
(torch.distributed.checkpoint's API) saves such a state with every rank writing its own files at once,
and loads it back on any number of ranks, each reading only the bytes it needs. Here the ranks are
threads of this process (``minidl.dist.sim``); under ``mpiexec -n N`` the same code runs one process
per rank.

1. **Why not ``minidl.save`` per rank.** Each rank's file holds its local tensors and nothing says
   where they belong in the whole: a different number of ranks cannot load them, and replicas are
   written once per rank. The fix is to store each tensor as *boxes* (offsets and sizes) of a global
   tensor: a plain tensor is one box covering it, ``LocalSlice`` is a rank's box.
2. **Save on 4 ranks** a model-like state: a weight split by rows, one split by columns, replicated
   tensors (big ones cut in pieces written by every rank, small ones whole, balanced), an
   optimizer-like nested dict and plain values. We look at the folder, the ``.metadata`` JSON, check
   that every box's bytes are in exactly one file, and draw which rank wrote which box.
3. **Load on 2 ranks** with another split, and in one process; each equals the numpy truth. We count
   the bytes each rank read against what its boxes need: whole 1 MiB blocks are read, because each
   block carries a CRC-32, so a box cut across its rows costs more than one cut across its columns.
4. **The commit.** A save that fails before its ``.metadata`` leaves the previous checkpoint loading
   exactly, with a warning naming the interrupted save; in a fresh folder, load refuses.
5. **Corruption.** One flipped byte in a shard file: the load names the file and the block.
6. **A DDP model** saved on 2 ranks through ``get_state_dict`` resumes in one process with
   ``set_state_dict`` and takes the step the 2 ranks took; ``dcp_to_torch_save`` makes it one file.

The pictures are written to ``$MINIDL_TUTORIAL_OUT`` if set, else to a fresh temporary directory;
the checkpoints go to a temporary directory that is removed at the end. Every claim is checked with
``assert`` against numpy or a closed form.
"""
import argparse
import atexit
import json
import os
import re
import shutil
import tempfile
import time
import warnings

import numpy as np

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

import matplotlib  # noqa: E402

matplotlib.use("Agg")   # (draw to a file; no display needed)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from safetensors import safe_open  # noqa: E402

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
import minidl.dist.checkpoint as dcp  # noqa: E402
from minidl import nn  # noqa: E402
from minidl.dist import faults  # noqa: E402
from minidl.dist.checkpoint import LocalSlice, MetadataIndex, format_utils  # noqa: E402
from minidl.dist.checkpoint.metadata import BLOCK_BYTES  # noqa: E402
from minidl.dist.checkpoint.slices import runs, slices_of  # noqa: E402
from minidl.dist.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from minidl.nn.parallel import DistributedDataParallel  # noqa: E402

began = time.perf_counter()
MiB = 1 << 20
out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-11-")
os.makedirs(out_dir, exist_ok=True)
work = tempfile.mkdtemp(prefix="minidl-tutorial-11-checkpoints-")
atexit.register(shutil.rmtree, work, True)   # (the checkpoints, some 100 MiB, go however the script ends)


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


# The global tensors of the run, as numpy arrays: the truth every load is compared with. Keys are what the
# nested state dict below flattens to ("model" -> "embed.weight" is "model.embed.weight").
rng = np.random.default_rng(0)
TRUTH = {
    "model.embed.weight": rng.standard_normal((4096, 256), dtype=np.float32),    # 4 MiB, split by rows
    "model.proj.weight": rng.standard_normal((2048, 4096), dtype=np.float32),    # 32 MiB, split by columns
    "model.head.weight": rng.standard_normal((1024, 512), dtype=np.float32),     # 2 MiB, replicated
    "model.pos": rng.standard_normal((256, 1024), dtype=np.float32),             # 1 MiB, replicated
    "model.head.bias": rng.standard_normal(512, dtype=np.float32),               # small, replicated
    "model.norm.weight": rng.standard_normal(256, dtype=np.float32),
    "model.norm.bias": rng.standard_normal(256, dtype=np.float32),
    "optim.state.embed.weight.exp_avg": rng.standard_normal((4096, 256), dtype=np.float32),   # split as its weight
    "optim.state.head.bias.exp_avg": rng.standard_normal(512, dtype=np.float32),
    "optim.state.head.bias.step": np.array(100.0, dtype=np.float32),             # a 0-d tensor
}
PLAIN = {"optim.param_groups": [{"lr": 0.001, "betas": [0.9, 0.999], "params": ["embed.weight", "head.bias"]}],
         "step": 1000, "run": "tutorial-11"}
SAVE_SPLIT = {"model.embed.weight": 0, "model.proj.weight": 1, "optim.state.embed.weight.exp_avg": 0}
LOAD_SPLIT = {"model.embed.weight": 1, "model.proj.weight": 0, "optim.state.embed.weight.exp_avg": 1}


def box(key, rank, world, dim):
    """(offsets, sizes) of rank's box of TRUTH[key] cut in ``world`` equal blocks along ``dim`` (None: whole)."""
    size = TRUTH[key].shape
    offsets, sizes = [0] * len(size), list(size)
    if dim is not None:
        sizes[dim] = size[dim] // world
        offsets[dim] = rank * sizes[dim]
    return tuple(offsets), tuple(sizes)


def region(offsets, sizes):
    return tuple(slice(o, o + s) for o, s in zip(offsets, sizes))


def part(key, rank, world, dim, source):
    """This rank's tensor for ``key``: its box of ``source[key]`` (None: zeros, to load into); a LocalSlice
    when the tensor is split, a plain tensor when every rank holds all of it."""
    offsets, sizes = box(key, rank, world, dim)
    array = np.zeros(sizes, np.float32) if source is None else np.array(source[key][region(offsets, sizes)])
    t = minidl.from_numpy(array)
    return t if dim is None else LocalSlice(t, offsets, TRUTH[key].shape)


def state(rank, world, split, source):
    """A rank's nested state dict, model and optimizer as a training script has them."""
    t = {key: part(key, rank, world, split.get(key), source) for key in TRUTH}
    plain = PLAIN if source is not None else {   # load puts the saved values back, into the same structure
        "step": None, "run": None, "optim.param_groups": [{k: None for k in PLAIN["optim.param_groups"][0]}]}
    return {"model": {"embed.weight": t["model.embed.weight"], "proj.weight": t["model.proj.weight"],
                      "head.weight": t["model.head.weight"], "head.bias": t["model.head.bias"],
                      "pos": t["model.pos"], "norm.weight": t["model.norm.weight"],
                      "norm.bias": t["model.norm.bias"]},
            "optim": {"state": {"embed.weight": {"exp_avg": t["optim.state.embed.weight.exp_avg"]},
                                "head.bias": {"exp_avg": t["optim.state.head.bias.exp_avg"],
                                              "step": t["optim.state.head.bias.step"]}},
                      "param_groups": plain["optim.param_groups"]},
            "step": plain["step"], "run": plain["run"]}


def flat(sd):
    """key -> numpy array (a tensor or a LocalSlice's tensor) or plain value, keys as the checkpoint has them."""
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in flat(v).items()})
        else:
            out[k] = v.tensor.numpy() if isinstance(v, LocalSlice) else v.numpy() if isinstance(v, minidl.Tensor) else v
    return out


def check_against(loaded, rank, world, split, truth):
    """Every tensor of a loaded state equals its box of the truth, bit for bit; every plain value is back."""
    values = flat(loaded)
    assert set(values) == set(truth) | set(PLAIN)
    for key, value in values.items():
        if key in truth:
            assert np.array_equal(value, truth[key][region(*box(key, rank, world, split.get(key)))]), key
        else:
            assert value == PLAIN[key], (key, value)


# =============================================================================================
section("1. Why one minidl.save per rank does not do")
# =============================================================================================
per_rank = os.path.join(work, "per-rank")
os.makedirs(per_rank)


def save_own(rank):
    local = flat(state(rank, 4, SAVE_SPLIT, TRUTH))      # its own tensors, a LocalSlice's as the bare tensor
    minidl.save({k: minidl.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in local.items()},
                os.path.join(per_rank, f"rank{rank}.safetensors"))
    return sum(v.nbytes for v in local.values() if isinstance(v, np.ndarray))


payloads = dist.sim.run(4, save_own)
unique = sum(a.nbytes for a in TRUTH.values())
written = sum(os.path.getsize(os.path.join(per_rank, f)) for f in os.listdir(per_rank))
replicated = sum(a.nbytes for k, a in TRUTH.items() if k not in SAVE_SPLIT)
print(f"4 ranks, each minidl.save-ing its own state dict: {written / MiB:.1f} MiB written for {unique / MiB:.1f} MiB "
      f"of distinct values")
assert sum(payloads) == unique + 3 * replicated        # every replica once per rank
assert sum(payloads) <= written < sum(payloads) + 64 * 1024   # (the rest is headers)
mine = minidl.load(os.path.join(per_rank, "rank1.safetensors"))
print(f"rank 1's file: 'model.embed.weight' {tuple(mine['model.embed.weight'].shape)}, 'model.proj.weight' "
      f"{tuple(mine['model.proj.weight'].shape)}")
assert tuple(mine["model.embed.weight"].shape) == (1024, 256) and tuple(mine["model.proj.weight"].shape) == (2048, 1024)
print(f"""
Each file holds pieces without their place: rank 1's embed.weight is rows 1024:2048 of a (4096, 256)
tensor, its proj.weight columns 1024:2048 of a (2048, 4096) one, and neither fact is in the file. Two
ranks loading this would have to know, outside the checkpoint, that the 4 files join along rows for one
tensor and along columns for the other; and the replicated {replicated / MiB:.2f} MiB is on disk 4 times.
Gathering everything on rank 0 to write one file instead needs all of the model in one memory and one
writer for all of its bytes.

So a distributed checkpoint stores every tensor as a *global* tensor of a known size, kept as boxes:
a box is where it starts in each dimension (offsets) and its extent (sizes), its bytes row-major.""")
bias = minidl.from_numpy(TRUTH["model.head.bias"].copy())
size, boxes = slices_of(bias)
assert size == (512,) and [(o, tuple(t.shape)) for o, t in boxes] == [((0,), (512,))]
rows = LocalSlice(minidl.from_numpy(TRUTH["model.embed.weight"][1024:2048].copy()), (1024, 0), (4096, 256))
print(f"  a plain tensor of shape {tuple(bias.shape)}: global size {size}, one box at {boxes[0][0]} covering it")
print(f"  rank 1's rows: {rows!r}")
print(f"    __dcp_slices__() -> global size {rows.__dcp_slices__()[0]}, boxes at "
      f"{[o for o, _ in rows.__dcp_slices__()[1]]}")
assert rows.__dcp_slices__()[0] == (4096, 256) and rows.__dcp_slices__()[1][0][0] == (1024, 0)
print("""Every rank passes its own state dict under the same keys; save sees the same key on 4 ranks and
asks whether their boxes are the same box (replicas) or tile the tensor (a split).""")

# =============================================================================================
section("2. Save on 4 ranks: rows, columns, replicas, an optimizer, plain values")
# =============================================================================================
ckpt = os.path.join(work, "step-1000")
metas = dist.sim.run(4, lambda rank: dcp.save(state(rank, 4, SAVE_SPLIT, TRUTH), checkpoint_id=ckpt))
meta = metas[0]
assert all(m.to_json() == meta.to_json() for m in metas)   # every rank computed the same plan and returns it
names = sorted(os.listdir(ckpt))
print(f"{ckpt}:")
for name in names:
    print(f"  {name:42} {os.path.getsize(os.path.join(ckpt, name)):>10,} bytes")
shards = [n for n in names if n.endswith(".safetensors")]
assert names == [".metadata"] + shards and len(shards) == 4
RANK_OF = re.compile(r"^__(\d+)_\d+\.")


def writer(name):
    """The rank that wrote a shard file: its name says so (__<rank>_<k>.<save id>.safetensors)."""
    return int(RANK_OF.match(name).group(1))


assert sorted(writer(n) for n in shards) == [0, 1, 2, 3]
with open(os.path.join(ckpt, ".metadata")) as f:
    outer = json.load(f)
doc = outer["body"]   # (beside it, the CRC-32 of the body's text: a changed offset or dtype would be refused)
entry = doc["keys"]["model.head.weight"]
print("\n.metadata is JSON; its entry for 'model.head.weight' (replicated, 2 MiB):")
print(f'  "dtype": {json.dumps(entry["dtype"])}, "size": {entry["size"]}, "path": {json.dumps(entry["path"])},'
      f' "chunks":')
for chunk in entry["chunks"]:
    print(f"    {json.dumps(chunk)}")
assert [c["sizes"] for c in entry["chunks"]] == [[256, 512]] * 4
print(f"a plain value is kept in it: 'step' -> {json.dumps(doc['keys']['step'])}")
print(f"each file's size and the CRC-32 of each of its {doc['block_bytes'] // MiB} MiB blocks, e.g. {shards[0]}: "
      f"{doc['files'][shards[0]]}")
assert doc["keys"]["step"]["value"] == PLAIN["step"]
# (a list holding dicts is walked into, as torch names keys: each parameter group's entries are keys of their own)
group_keys = {f"optim.param_groups.0.{k}" for k in PLAIN["optim.param_groups"][0]}
assert set(doc["keys"]) == set(TRUTH) | {"step", "run"} | group_keys

# Every box the metadata lists, read back with the safetensors package: in exactly one file, the one named.
BOX = re.compile(r"^(.*)\[(.*)\]$")
found = {}
for name in shards:
    with safe_open(os.path.join(ckpt, name), framework="numpy") as f:
        for inside in f.keys():
            key, spans = BOX.match(inside).groups()
            where = tuple(slice(*map(int, s.split(":"))) for s in spans.split(",")) if spans else ()
            assert np.array_equal(f.get_tensor(inside), TRUTH[key][where]), inside
            found.setdefault(inside, []).append(name)
listed = {}
for key, entry in meta.state_dict_metadata.items():
    if key in TRUTH:
        cover = np.zeros(TRUTH[key].shape, np.int64)
        for c in entry.chunks:
            cover[region(c.offsets, c.sizes)] += 1
            name = f"{key}[{','.join(f'{o}:{o + s}' for o, s in zip(c.offsets, c.sizes))}]"
            listed[name] = meta.storage_data[MetadataIndex(key, c.offsets)].relative_path
        assert (cover == 1).all(), key          # the boxes tile the tensor: each element stored once
assert set(found) == set(listed) and all(found[n] == [listed[n]] for n in listed)
print(f"\n{len(listed)} boxes in the 4 files, each in exactly one file, the one .metadata names, and each equal to "
      f"its box of the truth.")

boxes_of = {key: [(c.offsets, c.sizes, writer(meta.storage_data[MetadataIndex(key, c.offsets)].relative_path))
                  for c in meta.state_dict_metadata[key].chunks] for key in TRUTH}
for key in ("model.head.weight", "model.pos"):          # replicated and >= 1 MiB: one piece of rows per rank
    assert sorted(r for _, _, r in boxes_of[key]) == [0, 1, 2, 3]
    assert sorted(o[0] for o, _, _ in boxes_of[key]) == [0, TRUTH[key].shape[0] // 4, TRUTH[key].shape[0] // 2,
                                                         3 * TRUTH[key].shape[0] // 4]
small = [k for k in TRUTH if k not in SAVE_SPLIT and TRUTH[k].nbytes < MiB]
for key in small:                                      # small replicas: whole, by one rank
    assert len(boxes_of[key]) == 1 and boxes_of[key][0][1] == TRUTH[key].shape
for key, dim in SAVE_SPLIT.items():                    # a split tensor: each rank's box, from that rank
    assert sorted((o, s, r) for o, s, r in boxes_of[key]) == [(*box(key, r, 4, dim), r) for r in range(4)]
load = [sum(int(np.prod(s)) * 4 for k in TRUTH for _, s, w in boxes_of[k] if w == r) for r in range(4)]
print(f"bytes each rank wrote: {load}")
assert max(load) - min(load) <= max(TRUTH[k].nbytes for k in small)
print(f"""
The planner gathered every rank's list of boxes (one all-gather) and each rank derived the same plan:
a split tensor's boxes from the ranks holding them; a replica once, the ones of at least 1 MiB cut
along their rows into one piece per holder, so 4 data-parallel ranks each write a quarter; the small
ones whole, each to the rank with the fewest bytes so far, so that the ranks' shares differ by at
most one small tensor ({max(load) - min(load)} bytes here). Plain values (numbers, strings, the param_groups
list) live in .metadata itself.""")



def as_2d(extent, fill):
    """A 0-d or 1-d box's offsets or sizes drawn as one row."""
    return tuple(extent) if len(extent) == 2 else (fill, *extent) if extent else (fill, fill)


colours = plt.get_cmap("tab10").colors
fig, axes = plt.subplots(2, 5, figsize=(15, 6))
for ax, key in zip(axes.flat, TRUTH):
    rows, cols = as_2d(TRUTH[key].shape, 1)
    for offsets, sizes, rank in boxes_of[key]:
        (top, left), (height, width) = as_2d(offsets, 0), as_2d(sizes, 1)
        ax.add_patch(Rectangle((left, top), width, height, facecolor=colours[rank], edgecolor="black", lw=0.8))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_title(f"{key}\n{list(TRUTH[key].shape)}", fontsize=8)
    ax.tick_params(labelsize=7)
    if TRUTH[key].ndim < 2:
        ax.set_yticks([])
fig.legend(handles=[Patch(color=colours[r], label=f"rank {r}") for r in range(4)], loc="lower center", ncol=4)
fig.suptitle("Which rank wrote which box (from the Metadata save returned; x: columns, y: rows)")
fig.tight_layout(rect=(0, 0.05, 1, 1))
path = os.path.join(out_dir, "checkpoint_boxes.png")
fig.savefig(path, dpi=90)
plt.close(fig)
assert os.path.getsize(path) > 0
print(f"\nthe boxes, coloured by the rank that wrote each: {path}")

# =============================================================================================
section("3. Load on 2 ranks with another split, and in one process")
# =============================================================================================


def blocks(meta, wanted):
    """(bytes the boxes need, bytes of the whole blocks holding them) for [(key, offsets, sizes)]: each needed
    element's byte position from numpy indexing, the blocks they fall in counted once per file."""
    need, touched = 0, {}
    for key, offsets, sizes in wanted:
        entry = meta.state_dict_metadata[key]
        item = entry.properties.dtype.itemsize
        for c in entry.chunks:
            low = [max(a, b) for a, b in zip(c.offsets, offsets)]
            high = [min(a + n, b + m) for a, n, b, m in zip(c.offsets, c.sizes, offsets, sizes)]
            if any(h <= lo for lo, h in zip(low, high)):
                continue
            where = meta.storage_data[MetadataIndex(key, c.offsets)]
            index = np.arange(np.prod(c.sizes, dtype=np.int64)).reshape(c.sizes)[
                tuple(slice(lo - o, h - o) for lo, h, o in zip(low, high, c.offsets))].ravel()
            first = where.offset + index * item
            need += index.size * item
            touched.setdefault(where.relative_path, set()).update(
                np.unique(np.concatenate([first // BLOCK_BYTES, (first + item - 1) // BLOCK_BYTES])).tolist())
    read = sum(min(BLOCK_BYTES, meta.files[f].size - b * BLOCK_BYTES) for f, bs in touched.items() for b in bs)
    return need, read


def load_on_two(rank):
    target = state(rank, 2, LOAD_SPLIT, None)
    reader = dcp.FileSystemReader(ckpt)
    dcp.load(target, storage_reader=reader)
    check_against(target, rank, 2, LOAD_SPLIT, TRUTH)
    each = {}
    for key in LOAD_SPLIT:                               # each split tensor alone, to see what it costs
        alone = dcp.FileSystemReader(ckpt)
        dcp.load({key: part(key, rank, 2, LOAD_SPLIT[key], None)}, storage_reader=alone)
        each[key] = alone.bytes_read
    return reader.bytes_read, each


on_two = dist.sim.run(2, load_on_two)
print("2 ranks: embed.weight and its exp_avg (saved by rows) loaded by columns, proj.weight (saved by columns)\n"
      "loaded by rows, the rest whole on both; each rank's tensors equal their boxes of the truth.\n")
print(f"{'':38} {'rank':>4} {'needs':>9} {'read':>9} {'read/needs':>10}")
bars = {}
for rank, (total, each) in enumerate(on_two):
    for key in LOAD_SPLIT:
        need, read = blocks(meta, [(key, *box(key, rank, 2, LOAD_SPLIT[key]))])
        assert each[key] == read                         # bytes_read is whole blocks, as counted in numpy
        bars[key, rank] = need, read
        print(f"{key:38} {rank:>4} {need / MiB:>7.2f} M {read / MiB:>7.2f} M {read / need:>10.2f}")
    need, read = blocks(meta, [(key, *box(key, rank, 2, LOAD_SPLIT.get(key))) for key in TRUTH])
    assert total == read
    print(f"{'everything (one load)':38} {rank:>4} {need / MiB:>7.2f} M {read / MiB:>7.2f} M {read / need:>10.2f}")
for rank in range(2):
    need, read = bars["model.proj.weight", rank]
    ranges = 4                                            # a contiguous half of each of the 4 stored boxes
    assert read <= need + 2 * ranges * BLOCK_BYTES and read / need < 1.3     # rows: close to what is needed
    for key in ("model.embed.weight", "optim.state.embed.weight.exp_avg"):
        need, read = bars[key, rank]
        assert need == TRUTH[key].nbytes // 2 and read >= TRUTH[key].nbytes   # columns: every block of every box
proj_runs = runs((0, 0), (2048, 1024), (0, 0), (1024, 1024))
embed_runs = runs((0, 0), (1024, 256), (0, 0), (1024, 128))
assert proj_runs == [(0, 1024 * 1024)] and len(embed_runs) == 1024 and embed_runs[1] == (256, 128)
row_cost, column_cost = (bars[key, 0][1] / bars[key, 0][0] for key in ("model.proj.weight", "model.embed.weight"))
print(f"""
bytes_read equals, to the byte, the whole 1 MiB blocks holding what each rank needs, counted above in
numpy from the metadata. The reader reads whole blocks because the metadata holds one CRC-32 per
1 MiB block of each file, and a block can be checked only if all of it is read.

A box is stored row-major. The top half of a (2048, 1024) stored box of proj.weight is one
contiguous run of {proj_runs[0][1] * 4 // MiB} MiB: a rank loading rows reads it plus at most part of a block at
each end ({row_cost:.2f}x what it needs). The left half of a (1024, 256) stored box of embed.weight
is 1024 runs of 512 bytes with 512-byte gaps: every block the box lies in holds some of them, so
each rank reads all of every box, and the neighbours sharing those blocks ({column_cost:.0f}x what it
needs: 1 MiB boxes that straddle two blocks each). Smaller blocks would waste less and make .metadata
longer; with 1 MiB, a cut across rows is the costly case, and the big
boxes of a tensor-parallel model make the waste at the ends of a run small.""")

fig, ax = plt.subplots(figsize=(9, 3.6))
labels = [f"{key.split('.', 1)[1] if key.startswith('model.') else 'exp_avg'}\nrank {rank}" for key, rank in bars]
x = np.arange(len(bars))
ax.bar(x - 0.2, [n / MiB for n, _ in bars.values()], 0.4, label="the rank's boxes need")
ax.bar(x + 0.2, [r / MiB for _, r in bars.values()], 0.4, label="FileSystemReader.bytes_read")
ax.set_xticks(x, labels, fontsize=8)
ax.set_ylabel("MiB")
ax.set_title("Loading on 2 ranks: proj.weight by rows (saved by columns), embed.weight by columns (saved by rows)",
             fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
path = os.path.join(out_dir, "bytes_read.png")
fig.savefig(path, dpi=90)
plt.close(fig)
assert os.path.getsize(path) > 0
print(f"\nneeded and read, per rank: {path}")

whole = state(0, 1, {}, None)
reader = dcp.FileSystemReader(ckpt)
dcp.load(whole, storage_reader=reader, no_dist=True)
check_against(whole, 0, 1, {}, TRUTH)
assert reader.bytes_read == sum(meta.files[n].size for n in shards)
print(f"\nOne process, no process group (no_dist=True): every tensor whole, equal to the truth; it read "
      f"{reader.bytes_read / MiB:.2f} MiB, all 4 files.")

# =============================================================================================
section("4. The commit: a save that never wrote its .metadata")
# =============================================================================================
NEXT = {k: a + np.float32(1) for k, a in TRUTH.items()}   # the next checkpoint's values


def interrupted_save(folder):
    """Save NEXT on 4 ranks with rank 0 (the coordinator) failing halfway through writing .metadata."""
    os.environ["MINIDL_FAULT"] = "rank=0 at=dcp_commit:1 do=raise"
    try:
        dist.sim.run(4, lambda rank: dcp.save(state(rank, 4, SAVE_SPLIT, NEXT), checkpoint_id=folder))
    except dcp.CheckpointException as e:
        return e
    finally:
        del os.environ["MINIDL_FAULT"]
        faults._plan.clear()      # (the parsed fault, and its count of calls, go with it)
    raise AssertionError("the save was meant to fail")


error = interrupted_save(ckpt)
print(f"a second save into {os.path.basename(ckpt)}, its coordinator failing mid-commit:\n  {error}")
assert 0 in error.failures and "dcp_commit" in str(error)
after = sorted(os.listdir(ckpt))
new_id = {n.split(".")[1] for n in after if n.endswith(".safetensors")} - {meta.save_id}
assert len(new_id) == 1 and set(shards) <= set(after)
print(f"the folder now: .metadata (still the first save's), and shard files of save "
      f"{', '.join(sorted({n.split('.')[1] for n in after if n.endswith('.safetensors')}))}: {len(after) - 1} files")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    again = state(0, 1, {}, None)
    dcp.load(again, checkpoint_id=ckpt, no_dist=True)
check_against(again, 0, 1, {}, TRUTH)
said = [str(w.message) for w in caught]
assert len(said) == 1 and new_id.pop() in said[0] and "never committed" in said[0], said
print(f"load: the previous checkpoint, equal to the truth, with a warning:\n  {said[0]}")

fresh = os.path.join(work, "fresh")
interrupted_save(fresh)
try:
    dcp.load(state(0, 1, {}, None), checkpoint_id=fresh, no_dist=True)
    raise AssertionError("an uncommitted checkpoint was loaded")
except RuntimeError as e:
    refused = str(e)
assert "incomplete checkpoint" in refused and fresh in refused
print(f"\nthe same into a fresh folder; load refuses:\n  {refused}")
print("""
Every rank wrote its files and synced them; .metadata came last, from the coordinator alone, once it
had every rank's file names and checksums, and it is written to a temporary name and renamed: a file
system's rename is atomic, so there is a .metadata naming the old files or one naming the new, never
half of one. Files of a save that no .metadata names are ignored (and named in the warning), and an
earlier save's files are deleted only after the new .metadata is in place: a crash at any moment
leaves the last committed checkpoint whole. The fault was raised rather than a SIGKILL because the
ranks here are threads of one process; tests/ kill real processes at each step.""")

# =============================================================================================
section("5. Corruption: one flipped byte")
# =============================================================================================
warnings.filterwarnings("ignore", message=".*never committed")   # (section 4's files are still there: known)
target = meta.storage_data[MetadataIndex("model.proj.weight", (0, 2048))]   # rank 2's box of proj.weight
at = target.offset + target.length // 4                                     # inside its first rows
bad = os.path.join(ckpt, target.relative_path)
with open(bad, "r+b") as f:
    f.seek(at)
    byte = f.read(1)[0]
    f.seek(at)
    f.write(bytes([byte ^ 0x01]))
try:
    dcp.load(state(0, 1, {}, None), checkpoint_id=ckpt, no_dist=True)
    raise AssertionError("a corrupted file was loaded")
except RuntimeError as e:
    complaint = str(e)
low, high = map(int, re.search(r"bytes (\d+)\.\.\.(\d+)", complaint).groups())
print(f"byte {at:,} of {target.relative_path} flipped (one bit); the load says:\n  {complaint}")
assert target.relative_path in complaint and "CRC-32" in complaint
assert low % BLOCK_BYTES == 0 and low <= at < high and high - low <= BLOCK_BYTES
assert os.path.getsize(bad) == meta.files[target.relative_path].size       # same size: only the CRC sees it


def load_split(rank):
    dcp.load(state(rank, 2, LOAD_SPLIT, None), checkpoint_id=ckpt)


try:
    dist.sim.run(2, load_split)
    raise AssertionError("a corrupted file was loaded on 2 ranks")
except dcp.CheckpointException as e:
    failures = e.failures
assert list(failures) == [0]      # proj.weight by rows: the byte is in rank 0's half, and only rank 0 read it
print(f"on 2 ranks only rank 0 reads that block; every rank raises CheckpointException naming rank {list(failures)}")
only = {"model.embed.weight": part("model.embed.weight", 0, 1, None, None)}
_, read = blocks(meta, [("model.embed.weight", *box("model.embed.weight", 0, 1, None))])
for c in meta.state_dict_metadata["model.embed.weight"].chunks:   # its boxes' blocks miss the flipped byte's
    where = meta.storage_data[MetadataIndex("model.embed.weight", c.offsets)]
    assert where.relative_path != target.relative_path or not (
        where.offset // BLOCK_BYTES <= at // BLOCK_BYTES <= (where.offset + where.length - 1) // BLOCK_BYTES)
dcp.load(only, checkpoint_id=ckpt, no_dist=True)
assert np.array_equal(only["model.embed.weight"].numpy(), TRUTH["model.embed.weight"])
print(f"""and a load of embed.weight alone, whose blocks ({read / MiB:.0f} MiB of the files) do not include it,
succeeds. The metadata records each file's size and the CRC-32 of each 1 MiB block: a truncated file fails
on its size, a changed byte on its block's CRC, and a file copied in from another save fails one
or the other, the error naming the save its header says it came from; .metadata carries a CRC-32 of
its own, so a changed offset or dtype there is refused too. Only blocks that are read are checked, so
a damaged block is found by whoever needs it: damage is named, not loaded (short of a CRC-32 collision,
one chance in 4 billion per damaged block).""")

# =============================================================================================
section("6. A DDP model: get_state_dict, save on 2 ranks, resume in one process")
# =============================================================================================
BATCH, LR = 8, 0.1


def build(seed):
    rs = np.random.RandomState(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).double()
    with minidl.no_grad():
        for p in model.parameters():
            p.copy_(minidl.from_numpy(rs.uniform(-0.5, 0.5, tuple(p.shape))))
    return model


def batch(rank, step):
    rs = np.random.RandomState([rank, step])
    return rs.randn(BATCH, 6), rs.randn(BATCH, 3)


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = ((model(minidl.from_numpy(x)) - minidl.from_numpy(y)) ** 2).mean()
    loss.backward()
    optimizer.step()


ddp_ckpt = os.path.join(work, "ddp")


def ddp_training(rank):
    model = DistributedDataParallel(build(0))
    optimizer = minidl.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for step in range(3):
        train_step(model, optimizer, *batch(rank, step))
    model_sd, optim_sd = get_state_dict(model, optimizer)
    at_save = {k: v.numpy().copy() for k, v in model_sd.items()}
    saved = dcp.save({"model": model_sd, "optim": optim_sd, "step": 3}, checkpoint_id=ddp_ckpt)
    train_step(model, optimizer, *batch(rank, 3))           # and on to step 4
    after = {k: v.detach().numpy().copy() for k, v in model.module.state_dict().items()}
    return at_save, after, saved


(at_save, after, ddp_meta), (at_save_1, after_1, _) = dist.sim.run(2, ddp_training)
assert all(np.array_equal(at_save[k], at_save_1[k]) for k in at_save)    # DDP keeps the replicas equal
written_by = {k: writer(ddp_meta.storage_data[MetadataIndex(k, c.offsets)].relative_path)
              for k, e in ddp_meta.state_dict_metadata.items() if hasattr(e, "chunks") for c in e.chunks}
print(f"keys (no 'module.': the names of the plain model) and the rank that wrote each:\n  {written_by}")
assert list(at_save) == ["0.weight", "0.bias", "2.weight", "2.bias"] and sorted(set(written_by.values())) == [0, 1]

model = build(7)                                            # other weights: the load must replace them all
optimizer = minidl.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
model_sd, optim_sd = get_state_dict(model, optimizer)       # (a fresh optimizer gets its momentum buffers)
resumed = {"model": model_sd, "optim": optim_sd, "step": 0}
dcp.load(resumed, checkpoint_id=ddp_ckpt, no_dist=True)
set_state_dict(model, optimizer, model_state_dict=resumed["model"], optim_state_dict=resumed["optim"])
assert resumed["step"] == 3
for k, v in model.state_dict().items():
    assert np.array_equal(v.detach().numpy(), at_save[k]), k
x0, y0 = batch(0, 3)
x1, y1 = batch(1, 3)
train_step(model, optimizer, np.concatenate([x0, x1]), np.concatenate([y0, y1]))   # both ranks' batch at once
gap = max(np.abs(v.detach().numpy() - after[k]).max() for k, v in model.state_dict().items())
assert gap < 1e-12
print(f"""resumed in one process: weights equal bit for bit to the ranks' at the save, step 3 back; one
step on both ranks' batches together lands {gap:.1e} from where the 2 DDP ranks got (DDP averages the
ranks' mean gradients: the mean over both batches; float64, summed in another order). The momentum
buffers came back too, or that step would differ.""")

single = os.path.join(work, "ddp.safetensors")
format_utils.dcp_to_torch_save(ddp_ckpt, single)
one = minidl.load(single)
assert sorted(one) == ["model", "optim", "step"] and one["step"] == 3
assert all(np.array_equal(one["model"][k].numpy(), at_save[k]) for k in at_save)
print(f"dcp_to_torch_save: one minidl.save file of {os.path.getsize(single):,} bytes, keys {sorted(one)}, "
      f"model {list(one['model'])}, equal to the saved weights.")

print(f"\nAll claims checked ({time.perf_counter() - began:.1f} s).")
