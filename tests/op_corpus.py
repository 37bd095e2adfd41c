"""PyTorch's own per-op corpus (the OpInfo ``op_db`` of torch 2.13) as a judge of minidl.

Each op_db entry (a name, and a variant where it has one) whose name minidl has -- ``minidl.<name>``,
``minidl.nn.functional.<name>`` for ``nn.functional.*``, or a Tensor method or attribute -- is judged
on torch's CPU samples for float64, float32 and the integer dtypes both the entry and minidl support
(int64, int32, int16, uint8; minidl has no int8). Each sample is converted to minidl (tensors,
nested lists of them, dtypes, devices, sizes, parameter-free torch modules) and run by both; the
outputs (tensors, tuples, named tuples, lists, Python scalars) must agree in structure, shape, dtype
and values. For float64 samples
of differentiable entries, the gradients of every input torch marks as requiring grad must agree
too (the backward of one fixed random cotangent per float output, the same for both).

A sample is judged *pass* or *fail* (with a short reason; minidl raising where torch computes is a
failure), or is *not applicable* and left out: complex or sparse inputs, ``out=``, generators and
memory formats minidl does not name (features it does not model; a memory format is judged once
``minidl.<format>`` exists), dtypes minidl lacks, and samples torch itself raises on (nothing to
compare; a minidl that computes there is not judged). Entries whose values are random (draws,
dropout, ``dropout_p > 0``) or undefined (``empty``) are compared by shape and dtype only;
``as_strided`` of a view into a larger storage is not applicable (minidl gets a copy of the view's
values, not the storage). Eigen- and singular vectors, unique only up to sign, are compared in a
canonical form both sides compute the same way (``SIGN_FREE``).

op_db's entries call torch through lambdas (``lambda x, shape: x.view(shape)``, ``torch.einsum(eq,
tensors)``); those lambdas run again with their global ``torch`` bound to minidl, so the two sides
make the same call. Entries run in worker processes (forked from a server that imported torch and
op_db once), so a segfault or a hang is that sample's failure and the run goes on.

``python tests/op_corpus.py`` prints the figures (entries, entries passing every sample, samples
passing); ``--failures FILE`` writes every failing sample grouped by entry; ``--only NAME ...``
judges only those entries, ``--all-samples`` every sample (no caps). tests/test_op_corpus.py holds
the suite's test and op_corpus_allow.py its list of known differences.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time
import types
import zlib
from collections import Counter, defaultdict
from multiprocessing.connection import wait
from typing import NamedTuple

import numpy as np

SEED = 20260528
# samples judged per entry and dtype at most (a seeded choice among torch's), to keep the run short;
# --all-samples (this variable, read by the workers too) lifts the caps
CAP = {"float64": 10, "float32": 5}
CAP_INT = 3
ALL_SAMPLES = os.environ.get("MINIDL_CORPUS_ALL_SAMPLES") == "1"
SAMPLE_TIMEOUT_S = float(os.environ.get("MINIDL_CORPUS_TIMEOUT", 60))  # longer: a hang
TOLERANCE = {"float64": (1e-7, 1e-7), "float32": (1e-5, 1e-5)}  # (rtol, atol); integers and bools exact
JUDGED_DTYPES = ("float64", "float32", "int64", "int32", "int16", "uint8")
# entries whose values are random or undefined: compared by shape and dtype only
UNDEFINED_VALUES = {"bernoulli", "multinomial", "normal", "rand_like", "randn", "randn_like", "randint",
                    "randint_like", "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
                    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "uniform",
                    "exponential", "geometric", "log_normal", "cauchy"}

# entries whose index outputs may order equal values either way (unless stable=True; torch's docs leave it
# open): judged by the values their indices pick, which must not repeat. The value is the position of ``dim``
# among the positional arguments.
TIE_ORDER_FREE = {"sort": 0, "argsort": 0, "topk": 1}

# entries whose vectors are unique only up to sign (and, beyond the first min(m, n), up to a rotation of the
# subspace they span): LAPACK builds choose differently (torch's MKL, numpy's OpenBLAS). Both sides' outputs are
# judged in one canonical form, made by the same differentiable ops: each vector turned so that its largest
# element is positive (U's decides for the pair of singular vectors), and the full_matrices' extra vectors
# replaced by the projector onto their span. The value says where the vectors are: "eigh" (eigenvectors, the
# second output), "svd" (U and torch.svd's V, in columns) or "linalg.svd" (U in columns, Vh in rows).
SIGN_FREE = {"linalg.eigh": "eigh", "svd": "svd", "linalg.svd": "linalg.svd"}


class NotApplicable(Exception):
    """A sample that uses a feature minidl does not model (the message says which)."""


# ----------------------------------------------------------------------------- entries
def entry_key(op) -> str:
    """'name' or 'name:variant' (op_db's variants are separate entries)."""
    return f"{op.name}:{op.variant_test_name}" if op.variant_test_name else op.name


def minidl_function(name):
    """minidl's function, Tensor method or attribute of op_db's ``name``; None when it has none."""
    import minidl
    obj = minidl
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is not None and callable(obj):
        return obj
    if "." not in name and hasattr(minidl.Tensor, name):
        attr = getattr(minidl.Tensor, name)
        return attr if callable(attr) else (lambda x: getattr(x, name))
    return None


def _wrapper_set_seed(fn, *args, **kwargs):
    import minidl
    minidl.manual_seed(42)
    return fn(*args, **kwargs)


def minidl_op(op):
    """The callable that makes on minidl the call op_db's ``op.op`` makes on torch."""
    import minidl
    fn = op.op
    code = getattr(fn, "__code__", None)
    if code is not None and fn.__module__.startswith("torch.testing._internal."):  # (op_db's and opinfo's own)
        scope = dict(fn.__globals__, torch=minidl, wrapper_set_seed=_wrapper_set_seed)
        return types.FunctionType(code, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    return minidl_function(op.name)


def present_entries():
    """(index in op_db, op) of every entry minidl has, and the number of entries in op_db."""
    from torch.testing._internal.common_methods_invocations import op_db
    return [(i, op) for i, op in enumerate(op_db) if minidl_function(op.name) is not None], len(op_db)


# ----------------------------------------------------------------------------- conversion
def to_minidl(value):
    """A torch sample's argument as minidl's (leaves keep requires_grad); raises NotApplicable."""
    import torch
    import minidl
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise NotApplicable(f"{value.layout} input")
        if value.is_complex():
            raise NotApplicable("complex input")
        dtype = to_minidl(value.dtype)
        values = value.detach().float().numpy() if value.dtype == torch.bfloat16 else value.detach().numpy()
        out = minidl.tensor(values.copy(), dtype=dtype)
        return out.requires_grad_(True) if value.requires_grad else out
    if isinstance(value, torch.dtype):
        name = str(value).split(".")[-1]
        if not isinstance(getattr(minidl, name, None), type(minidl.float32)):
            raise NotApplicable(f"dtype {name}")
        return getattr(minidl, name)
    if isinstance(value, torch.device):
        return minidl.device(str(value))
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, torch.Generator):
        raise NotApplicable("generator")
    if isinstance(value, (torch.layout, torch.memory_format)):
        name = str(value).split(".")[-1]
        if not hasattr(minidl, name):
            raise NotApplicable(str(value))
        return getattr(minidl, name)
    if isinstance(value, complex):
        raise NotApplicable("complex scalar")
    if isinstance(value, torch.nn.Module):
        return _minidl_module(value)
    if isinstance(value, (list, tuple)):
        return type(value)(to_minidl(v) for v in value)
    if isinstance(value, dict):
        if "out" in value:
            raise NotApplicable("out=")
        return {k: to_minidl(v) for k, v in value.items()}
    return value


def _minidl_module(module):
    """A torch module given as an argument (a distance function, ...) as minidl.nn's module of its name, with
    its plain settings; not applicable where minidl.nn has none or it holds parameters."""
    import minidl
    cls = getattr(minidl.nn, type(module).__name__, None)
    if cls is None or next(module.parameters(), None) is not None:
        raise NotApplicable(f"torch.nn.{type(module).__name__} argument")
    out = cls()
    for name, setting in vars(module).items():
        if not name.startswith("_") and isinstance(setting, (bool, int, float, str)) and hasattr(out, name):
            setattr(out, name, setting)
    return out


def _leaves(value):
    """The tensors and other leaves of a (nested) call or output, in order."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)) and not _is_size(value):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _is_size(value):
    return type(value).__name__ == "Size"  # torch.Size or minidl.Size: a value, not a structure


def _numpy(t):
    t = t.detach()
    if _dtype_name(t.dtype) in ("bfloat16", "float16"):
        t = t.float()
    return np.asarray(t.numpy(force=True))  # (force: torch's gradients may be ZeroTensors)


def _dtype_name(dtype):
    return str(dtype).split(".")[-1]


def compare(expected, got, where="output"):
    """None when minidl's ``got`` matches torch's ``expected``, else a short reason."""
    import torch
    import minidl
    if isinstance(expected, torch.Tensor) and expected.is_sparse:
        if not hasattr(got, "to_dense"):
            return f"{where}: {type(got).__name__} where torch returns a sparse tensor"
        return compare(expected.to_dense(), got.to_dense(), where)
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, minidl.Tensor):
            return f"{where}: {type(got).__name__} where torch returns a tensor"
        if tuple(expected.shape) != tuple(got.shape):
            return f"{where}: shape {tuple(got.shape)}, torch {tuple(expected.shape)}"
        if _dtype_name(expected.dtype) != _dtype_name(got.dtype):
            return f"{where}: dtype {_dtype_name(got.dtype)}, torch {_dtype_name(expected.dtype)}"
        return _compare_values(_numpy(expected), _numpy(got), _dtype_name(expected.dtype), where)
    if isinstance(expected, torch.dtype):
        return None if _dtype_name(expected) == _dtype_name(got) else f"{where}: {got}, torch {expected}"
    if isinstance(expected, (bool, int, float)):
        if isinstance(got, minidl.Tensor) or not isinstance(got, (bool, int, float)):
            return f"{where}: {type(got).__name__} where torch returns a {type(expected).__name__}"
        return _compare_values(np.asarray(expected), np.asarray(got), "float64", where)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return f"{where}: {type(got).__name__} where torch returns a {type(expected).__name__}"
        if _is_size(expected):
            return None if tuple(expected) == tuple(got) else f"{where}: {tuple(got)}, torch {tuple(expected)}"
        if len(expected) != len(got):
            return f"{where}: {len(got)} items, torch {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            reason = compare(e, g, f"{where}[{i}]")
            if reason:
                return reason
        return None
    return None if expected == got else f"{where}: {got!r}, torch {expected!r}"


def _compare_values(expected, got, dtype, where):
    if expected.dtype.kind in "biu" and got.dtype.kind in "biu":
        bad = expected != got
    else:
        rtol, atol = TOLERANCE.get(dtype, (0, 0))
        e, g = expected.astype(np.float64), got.astype(np.float64)
        bad = ~(np.isclose(g, e, rtol=rtol, atol=atol) | (np.isnan(e) & np.isnan(g)))
    if not bad.any():
        return None
    i = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
    return f"{where}: wrong values ({int(bad.sum())} of {bad.size}; e.g. at {i}: {got[i]!r}, torch {expected[i]!r})"


def describe(sample) -> str:
    """A short account of a sample's arguments (shapes and dtypes of its tensors)."""
    import torch

    def short(v):
        if isinstance(v, torch.Tensor):
            return f"T{list(v.shape)}{_dtype_name(v.dtype)}"
        if isinstance(v, (list, tuple)):
            inner = ", ".join(short(x) for x in v[:6]) + (", ..." if len(v) > 6 else "")
            return f"[{inner}]" if isinstance(v, list) else f"({inner})"
        return repr(v)

    kw = ", ".join(f"{k}={short(v)}" for k, v in sample.kwargs.items())
    text = ", ".join(filter(None, [short(sample.input), ", ".join(short(a) for a in sample.args), kw]))
    return text if len(text) <= 160 else text[:157] + "..."


# ----------------------------------------------------------------------------- judging
def _requiring_grad(value, tensor_type):
    return [v for v in _leaves(value) if isinstance(v, tensor_type) and v.requires_grad]


def judge(op, fn, sample, dtype, rng) -> tuple:
    """(verdict, reason) of one sample: 'pass', 'fail' or 'na'."""
    import torch
    import minidl
    call = (sample.input, sample.args, sample.kwargs)
    if op.name.startswith("as_strided") and _partial_view(sample.input):
        return "na", "as_strided of a view into a larger storage (minidl gets a copy of the view's values)"
    try:
        m_input, m_args, m_kwargs = to_minidl(call)
    except NotApplicable as e:
        return "na", str(e)
    t_inputs = _requiring_grad(call, torch.Tensor)
    try:
        expected = op.op(sample.input, *sample.args, **sample.kwargs)
    except Exception as e:
        return "na", f"torch raises {type(e).__name__}"
    if any(isinstance(v, torch.Tensor) and v.is_complex() for v in _leaves(expected)):
        return "na", "complex output"
    try:
        got = fn(m_input, *m_args, **m_kwargs)
    except Exception as e:
        return "fail", f"raises {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    if op.name in UNDEFINED_VALUES or sample.kwargs.get("dropout_p", 0) > 0:
        return _verdict(compare(_shape_only(expected), _shape_only(got)))
    if op.name in TIE_ORDER_FREE and not sample.kwargs.get("stable") and sample.input.ndim:
        reason = compare(_shape_only(expected), _shape_only(got))
        if reason:
            return _verdict(reason)
        picked = _picked(op, sample, expected, got)
        if isinstance(picked, str):
            return _verdict(picked)
        expected, got = picked
    if op.name in SIGN_FREE and sample.kwargs.get("compute_uv", True):
        expected, got = (_canonical_vectors(SIGN_FREE[op.name], out) for out in (expected, got))
    reason = compare(expected, got)
    if reason or not t_inputs:
        return _verdict(reason)
    m_inputs = _requiring_grad((m_input, m_args, m_kwargs), minidl.Tensor)
    return _verdict(_compare_grads(expected, got, t_inputs, m_inputs, rng))


def _picked(op, sample, expected, got):
    """A TIE_ORDER_FREE entry's (expected, got) with the indices replaced by the input's values they pick; or
    the reason to fail when minidl's indices repeat along dim."""
    import torch
    import minidl
    position = TIE_ORDER_FREE[op.name]
    dim = sample.kwargs.get("dim", sample.args[position] if len(sample.args) > position else -1)
    x = sample.input.detach()
    e_indices = expected if op.name == "argsort" else expected[1]
    g_indices = torch.from_numpy((got if op.name == "argsort" else got[1]).numpy())
    if bool((g_indices.sort(dim).values.diff(dim=dim) == 0).any()):
        return "output: indices repeat along dim"
    e_picked = torch.take_along_dim(x, e_indices, dim)
    g_picked = minidl.tensor(torch.take_along_dim(x, g_indices, dim).numpy())
    if op.name == "argsort":
        return e_picked, g_picked
    return (expected[0], e_picked), (got[0], g_picked)


def _canonical_vectors(kind, out):
    """A SIGN_FREE entry's output in canonical form (see SIGN_FREE), by the ops of its own library."""
    if kind == "eigh":
        values, vectors = out
        return values, vectors * _column_signs(vectors)
    u, s, v = out
    v = v.mT if kind == "linalg.svd" else v   # (as columns)
    k = s.shape[-1]
    signs = _column_signs(u[..., :k])
    canonical = [u[..., :k] * signs, s, v[..., :k] * signs]
    for extra in (u[..., k:], v[..., k:]):   # (full_matrices: their span only)
        canonical.append(extra @ extra.mT)
    return tuple(canonical)


def _column_signs(vectors):
    """The sign of each column's largest element (by magnitude), as a constant (..., 1, n) factor."""
    vectors = vectors.detach()
    if vectors.numel() == 0:
        return 1
    return vectors.gather(-2, vectors.abs().argmax(-2, keepdim=True)).sign()


def _partial_view(t):
    return t.storage_offset() != 0 or t.untyped_storage().nbytes() != t.numel() * t.element_size()


def _verdict(reason):
    return ("fail", reason) if reason else ("pass", "")


def _shape_only(value):
    import torch
    import minidl
    if isinstance(value, (torch.Tensor, minidl.Tensor)):
        return (tuple(value.shape), _dtype_name(value.dtype))
    if isinstance(value, (list, tuple)) and not _is_size(value):
        return [_shape_only(v) for v in value]
    return value


def _compare_grads(expected, got, t_inputs, m_inputs, rng):
    """Gradients of every input torch differentiates, for one fixed random cotangent per float output."""
    import torch
    import minidl
    pairs = [(e, g) for e, g in zip(_leaves(expected), _leaves(got))
             if isinstance(e, torch.Tensor) and e.requires_grad and e.dtype.is_floating_point]
    if not pairs:
        return None
    if len(t_inputs) != len(m_inputs):
        return f"{len(m_inputs)} inputs require grad, torch {len(t_inputs)}"
    if any(not g.requires_grad for _, g in pairs):
        return "output does not require grad"
    cotangents = [rng.standard_normal(tuple(e.shape)) for e, _ in pairs]  # cast to each output's dtype
    t_grads = torch.autograd.grad([e for e, _ in pairs], t_inputs,
                                  [torch.from_numpy(c).to(e.dtype) for c, (e, _) in zip(cotangents, pairs)],
                                  allow_unused=True)
    try:
        m_grads = minidl.autograd.grad([g for _, g in pairs], m_inputs,
                                       [minidl.tensor(c).to(g.dtype) for c, (_, g) in zip(cotangents, pairs)],
                                       allow_unused=True)
    except Exception as e:
        return f"backward raises {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    for i, (t, x, m) in enumerate(zip(t_grads, t_inputs, m_grads)):
        t = torch.zeros_like(x) if t is None else t
        m = minidl.zeros(tuple(x.shape), dtype=minidl.float64) if m is None else m
        reason = compare(t, m, f"grad of input {i}")
        if reason:
            return reason
    return None


def _dtypes(op):
    import torch
    supported = {_dtype_name(d) for d in op.supported_dtypes("cpu")}
    return [name for name in JUDGED_DTYPES if name in supported and hasattr(torch, name)]


def _chosen(key, dtype, n):
    """Indices of the samples judged: all, or a seeded choice of CAP of them."""
    cap = CAP.get(dtype, CAP_INT)
    if ALL_SAMPLES or n <= cap:
        return list(range(n))
    return sorted(random.Random(f"{key}/{dtype}").sample(range(n), cap))


def judge_entry(op, send):
    """Judge every chosen sample of ``op``; ``send`` gets ('start', ...) before each and a record after."""
    import torch
    key, fn = entry_key(op), minidl_op(op)
    for dtype in _dtypes(op):
        torch.manual_seed(zlib.crc32(f"{SEED}/{key}/{dtype}".encode()))
        grad = dtype == "float64" and op.supports_autograd
        samples = list(op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=grad))
        for index in _chosen(key, dtype, len(samples)):
            sample = samples[index]
            send(("start", key, dtype, index, describe(sample)))
            rng = np.random.default_rng([SEED, zlib.crc32(key.encode()), index])
            verdict, reason = judge(op, fn, sample, dtype, rng)
            send(("record", key, dtype, index, verdict, reason))


# ----------------------------------------------------------------------------- worker processes
def _worker(conn):
    import torch
    import minidl
    from torch.testing._internal.common_methods_invocations import op_db
    import warnings
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    minidl.set_num_threads(1)
    while True:
        index = conn.recv()
        if index is None:
            return
        try:
            judge_entry(op_db[index], conn.send)
        except Exception as e:  # sample generation itself failed: the entry's failure
            conn.send(("record", entry_key(op_db[index]), "-", -1, "fail", f"harness: {type(e).__name__}: {e}"))
        conn.send(("done", index))


class Record(NamedTuple):
    """One judged sample: its entry, dtype and index, the verdict, why, and the sample's arguments."""
    key: str
    dtype: str
    index: int
    verdict: str
    reason: str
    about: str = ""


class _Worker:
    """A worker process, the entry it judges and the sample it is on (for the record if it dies)."""

    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.entry, self.current, self.since = None, None, time.monotonic()

    def lost(self, records, key, why):
        """The sample this worker was on fails with ``why``; the rest of its entry is not run."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()
        if self.entry is not None:
            key, dtype, index, about = self.current or (key, "-", -1, "")
            records.append(Record(key, dtype, index, "fail", why + "; the entry's later samples were not run", about))


def run(only=None, workers=None):
    """Judge every entry minidl has (or those named in ``only``): (records, entries present, op_db's size)."""
    entries, total = present_entries()
    if only:
        entries = [(i, op) for i, op in entries if entry_key(op) in only or op.name in only]
    keys = {i: entry_key(op) for i, op in entries}
    todo = list(keys)
    ctx = multiprocessing.get_context("forkserver")
    # (the server imports the slow modules once for every worker; not minidl, which each worker imports
    # by this process's sys.path: the server's own path is the working directory's)
    ctx.set_forkserver_preload(["torch", "torch.testing._internal.common_methods_invocations"])
    records, pool = [], {}

    def assign(w):
        w.entry, w.current, w.since = (todo.pop(0) if todo else None), None, time.monotonic()
        w.conn.send(w.entry)
        if w.entry is None:
            del pool[w.conn]
            w.proc.join()

    def replace(w, why):
        del pool[w.conn]
        w.lost(records, keys.get(w.entry), why)
        fresh = _Worker(ctx)
        pool[fresh.conn] = fresh
        assign(fresh)

    for _ in range(min(workers or os.cpu_count() or 1, len(todo))):
        w = _Worker(ctx)
        pool[w.conn] = w
        assign(w)
    while pool:
        for conn in wait(list(pool), timeout=1.0):
            w = pool[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):
                w.proc.join()
                replace(w, f"worker died (exit code {w.proc.exitcode})")
                continue
            w.since = time.monotonic()
            if message[0] == "start":
                w.current = message[1:]
            elif message[0] == "record":
                records.append(Record(*message[1:], w.current[3] if w.current else ""))
            else:
                assign(w)
        for w in [w for w in pool.values() if time.monotonic() - w.since > SAMPLE_TIMEOUT_S]:
            replace(w, f"hung (no result within {SAMPLE_TIMEOUT_S:.0f} s)")
    return records, len(entries), total


# ----------------------------------------------------------------------------- figures
def allowed(record, allow) -> str | None:
    """The allow-list's reason for a record's difference, if it names it."""
    for k in ((record.key, record.dtype, record.index), (record.key, record.dtype, None), (record.key, None, None)):
        if k in allow:
            return allow[k]
    return None


def summarize(records, present, total, allow):
    """The corpus figures, the failing records not allow-listed, and the allow-list's stale keys."""
    judged = [r for r in records if r.verdict != "na"]
    excused = [r for r in judged if r.verdict == "fail" and allowed(r, allow)]
    counted = [r for r in judged if not (r.verdict == "fail" and allowed(r, allow))]
    failing = [r for r in counted if r.verdict == "fail"]
    used = {k for r in excused for k in allow if allowed(r, {k: 1})}
    by_entry = defaultdict(list)
    for r in counted:
        by_entry[r.key].append(r)
    entries_passing = sum(all(r.verdict == "pass" for r in rs) for rs in by_entry.values())
    figures = {"op_db entries": total, "entries minidl has": present, "entries judged": len(by_entry),
               "entries passing every sample": entries_passing, "samples judged": len(counted),
               "samples passing": len(counted) - len(failing), "samples allow-listed": len(excused),
               "samples not applicable": len(records) - len(judged)}
    run_entries = {r.key for r in records}   # (a run of some entries judges only their keys)
    return figures, failing, sorted((k for k in set(allow) - used if k[0] in run_entries), key=str)


def format_figures(figures) -> str:
    lines = [f"{name}: {value}" for name, value in figures.items()]
    if figures["samples judged"]:
        lines.append(f"pass rate: {100 * figures['samples passing'] / figures['samples judged']:.2f}%")
    return "\n".join(lines)


def format_failures(failing) -> str:
    """Every failing sample, grouped by entry, most failures first."""
    groups = defaultdict(list)
    for r in failing:
        groups[r.key].append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append(f"{key}: {len(rs)} failing; " + "; ".join(f"{n}x {why}" for why, n in
                                                              Counter(_kind(r.reason) for r in rs).most_common(3)))
        out += [f"  [{r.dtype} #{r.index}] {r.reason}\n      sample: {r.about}" for r in rs]
    return "\n".join(out)


def _kind(reason):
    """A failure's reason without its particulars (the exception's message, the values)."""
    return reason.split(":")[0] if reason.startswith(("raises", "backward raises")) else reason.split(" (")[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Judge minidl by PyTorch's OpInfo corpus (op_db).")
    parser.add_argument("--failures", metavar="FILE", help="write every failing sample, grouped by entry, here")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="judge only these entries ('name' or 'name:variant')")
    parser.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    parser.add_argument("--all-samples", action="store_true", help="judge every sample (no caps; slower)")
    args = parser.parse_args(argv)
    if args.all_samples:
        os.environ["MINIDL_CORPUS_ALL_SAMPLES"] = "1"   # (set before the workers start: they judge)
    from op_corpus_allow import ALLOW
    records, present, total = run(args.only, args.workers)
    figures, failing, stale = summarize(records, present, total, ALLOW)
    print(format_figures(figures))
    if stale:
        print("allow-list keys that no longer fail:", *stale, sep="\n  ")
    if args.failures:
        with open(args.failures, "w") as f:
            f.write(format_figures(figures) + "\n\n" + format_failures(failing) + "\n\nnot applicable:\n")
            f.writelines(f"  {n}x {why}\n" for why, n in Counter(r.reason for r in records if r.verdict == "na")
                         .most_common())
        print(f"failing samples written to {args.failures}")
    return 0


if __name__ == "__main__":  # run as op_corpus (not __main__), so the workers find its functions by that name
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's minidl
    import op_corpus
    sys.exit(op_corpus.main())
