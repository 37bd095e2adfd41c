"""torchrun's command line (torch 2.13's flags, both spellings, defaults and ``PET_*`` environment defaults),
and the checks that turn it into a launch plan before any worker starts."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import uuid
from dataclasses import dataclass, field

DEFAULT_C10D_PORT = 29400   # torchrun's port for a --rdzv-endpoint given without one
DEFAULT_MASTER_PORT = 29500


class _Env(argparse.Action):
    """A flag whose default comes from ``PET_<NAME>`` when set (torchrun's ``env`` action)."""

    def __init__(self, dest, default=None, required=False, **kwargs):
        default = os.environ.get(f"PET_{dest.upper()}", default)
        super().__init__(dest=dest, default=default, required=required and default is None, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class _EnvFlag(argparse.Action):
    def __init__(self, dest, default=False, **kwargs):
        default = os.environ.get(f"PET_{dest.upper()}", "0") == "1" or default
        super().__init__(dest=dest, const=True, default=default, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minidl.dist.run",
                                description="minidl's launcher for distributed training (torchrun's flags)")
    add = p.add_argument
    add("--nnodes", action=_Env, type=str, default="1:1",
        help="Number of nodes, or the range of nodes in form <minimum_nodes>:<maximum_nodes>.")
    add("--nproc-per-node", "--nproc_per_node", action=_Env, type=str, default="1",
        help="Number of workers per node; supported values: [auto, cpu, gpu, int].")
    add("--rdzv-backend", "--rdzv_backend", action=_Env, type=str, default="static", help="Rendezvous backend.")
    add("--rdzv-endpoint", "--rdzv_endpoint", action=_Env, type=str, default="",
        help="Rendezvous backend endpoint; usually in form <host>:<port>.")
    add("--rdzv-id", "--rdzv_id", action=_Env, type=str, default="none", help="User-defined group id.")
    add("--rdzv-conf", "--rdzv_conf", action=_Env, type=str, default="",
        help="Additional rendezvous configuration (<key1>=<value1>,<key2>=<value2>,...): join_timeout "
             "(seconds, default 600), last_call_timeout (30), keep_alive_interval (5), keep_alive_max_attempt "
             "(3) and is_host are read.")
    add("--standalone", action=_EnvFlag,
        help="Start a local standalone rendezvous backend that is represented by a C10d TCP store on a free "
             "port. Useful when launching single-node, multi-worker job. If specified --rdzv-backend, "
             "--rdzv-endpoint, --rdzv-id are auto-assigned and any explicitly set values are ignored.")
    add("--max-restarts", "--max_restarts", action=_Env, type=int, default=0,
        help="Maximum number of worker group restarts before failing.")
    add("--monitor-interval", "--monitor_interval", action=_Env, type=float, default=0.1,
        help="Interval, in seconds, to monitor the state of workers.")
    add("-m", "--module", action=_EnvFlag,
        help="Change each process to interpret the launch script as a Python module, executing with the same "
             "behavior as 'python -m'.")
    add("--no-python", "--no_python", action=_EnvFlag,
        help="Skip prepending the training script with 'python' - just execute it directly. Useful when the "
             "script is not a Python script.")
    add("--log-dir", "--log_dir", action=_Env, type=str, default=None,
        help="Base directory to use for log files. The same directory is reused for multiple runs (a unique "
             "job-level sub-directory is created with rdzv_id as the prefix).")
    add("-r", "--redirects", action=_Env, type=str, default="0",
        help="Redirect std streams into a log file in the log directory (e.g. [-r 3] redirects both "
             "stdout+stderr for all workers, [-r 0:1,1:2] redirects stdout for local rank 0 and stderr for "
             "local rank 1).")
    add("-t", "--tee", action=_Env, type=str, default="0",
        help="Tee std streams into a log file and also to console (see --redirects for format).")
    add("--node-rank", "--node_rank", action=_Env, type=int, default=0,
        help="Rank of the node for multi-node distributed training. It is only used for static rendezvous "
             "(i.e., when --rdzv-backend=static).")
    add("--master-addr", "--master_addr", action=_Env, type=str, default="127.0.0.1",
        help="Address of the master node (rank 0) that only used for static rendezvous.")
    add("--master-port", "--master_port", action=_Env, type=int, default=None,
        help="Port on the master node (rank 0) to be used for communication during distributed training. It "
             "is only used for static rendezvous. Defaults to 29500.")
    add("training_script", type=str,
        help="Full path to the training program/script to be launched in parallel, followed by all the "
             "arguments for the training script.")
    add("training_script_args", nargs=argparse.REMAINDER)
    return p


@dataclass
class Plan:
    """What the launcher does: ``nproc`` workers of ``cmd`` (the worker bootstrap and its target), their store
    served here (``host`` set) or reached at ``endpoint``, restarts, and where streams and error files go."""
    nproc: int
    cmd: list
    run_id: str
    host: str
    port: int
    serve: bool
    join_timeout: float
    backend: str
    min_nodes: int
    max_nodes: int
    node_rank: int | None   # the static backend's; c10d ranks nodes in the order they joined
    last_call: float
    keep_alive: float       # seconds without a beat after which a node counts as gone
    max_restarts: int
    monitor_interval: float
    log_dir: str | None
    redirects: dict = field(default_factory=dict)   # local rank -> 0..3 (none, out, err, both)
    tee: dict = field(default_factory=dict)
    # this launcher among the job's (its workers' MINIDL_RUN_NODE_ID): pids and host names can repeat across nodes
    node_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def nproc_of(value: str, error) -> int:
    """torchrun's --nproc-per-node: an int, cpu (the cores), gpu (the GPUs) or auto (GPUs, else cores)."""
    if value.lstrip("-").isdigit():
        n = int(value)
        if n < 1:
            error(f"--nproc-per-node must be at least 1, got {n}")
        return n
    if value not in ("cpu", "gpu", "auto"):
        error(f"Unsupported nproc_per_node value: {value} (expected an int, cpu, gpu or auto)")
    gpus = _gpu_count() if value != "cpu" else 0
    if value == "gpu" and not gpus:
        error("--nproc-per-node gpu: Cuda is not available.")
    return gpus or len(os.sched_getaffinity(0))


def _gpu_count() -> int:
    try:
        from ...cuda import device_count, is_available
        return device_count() if is_available() else 0
    except Exception:   # (no CUDA library at all counts as no GPU)
        return 0


def streams_of(text: str, nproc: int, flag: str, error) -> dict:
    """'3' for every local rank, or '0:1,1:2' rank by rank -> {local rank: 0..3}."""
    try:
        if ":" not in text:
            return dict.fromkeys(range(nproc), _std(int(text)))
        pairs = (part.split(":") for part in text.split(","))
        return {r: 0 for r in range(nproc)} | {int(r): _std(int(v)) for r, v in pairs}
    except ValueError:
        error(f"{flag} {text!r}: expected 0-3 (none, stdout, stderr, both) or LOCAL_RANK:0-3,...")


def _std(v: int) -> int:
    if not 0 <= v <= 3:
        raise ValueError(v)
    return v


def _nnodes(text: str, error) -> tuple:
    parts = text.split(":")
    try:
        lo, hi = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except (ValueError, IndexError):
        error(f'--nnodes {text!r} is not N or in "MIN:MAX" format')
    if len(parts) > 2 or not 0 < lo <= hi:
        error(f"--nnodes {text}: min_nodes must be > 0 and <= max_nodes, got min_nodes={lo}, max_nodes={hi}")
    return lo, hi


def _conf(text: str, error) -> dict:
    try:
        return dict(item.split("=", 1) for item in text.split(",") if item)
    except ValueError:
        error(f"--rdzv-conf {text!r}: expected key1=value1,key2=value2")


def _endpoint(text: str, default_port: int, error) -> tuple:
    host, _, port = text.rpartition(":") if ":" in text.strip("[]") else (text, "", str(default_port))
    if not host or not port.isdigit() or int(port) >= 2**16:
        error(f"rendezvous endpoint {text!r}: expected <host>[:<port>]")
    return host.strip("[]"), int(port)


_LOCAL = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def _is_local(host: str) -> bool:
    import socket
    return host in _LOCAL or host.startswith("127.") or host in (socket.gethostname(), socket.getfqdn())


def _seconds(conf, key, default, error) -> float:
    try:
        value = float(conf.get(key, default))
    except ValueError:
        value = -1.0
    if value < 0:
        error(f"--rdzv-conf {key}={conf[key]!r}: expected seconds (a number >= 0)")
    return value


def plan_of(args, error) -> Plan:
    lo, hi = _nnodes(args.nnodes, error)
    nproc = nproc_of(args.nproc_per_node, error)
    if args.max_restarts < 0:
        error(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if args.monitor_interval <= 0:
        error(f"--monitor-interval must be > 0, got {args.monitor_interval}")
    if args.rdzv_backend not in ("c10d", "static"):
        error(f"--rdzv-backend {args.rdzv_backend!r}: supported are c10d and static")
    conf = _conf(args.rdzv_conf, error)
    run_id = args.rdzv_id
    if args.standalone:
        host, port, serve, run_id = "localhost", 0, True, str(uuid.uuid4())
    elif args.rdzv_backend == "static" and not args.rdzv_endpoint:
        if lo != hi:
            error(f"--nnodes {args.nnodes}: the static rendezvous backend needs a fixed number of nodes")
        if not 0 <= args.node_rank < hi:
            error(f"--node-rank {args.node_rank}: expected 0..{hi - 1} for --nnodes {hi}")
        host = args.master_addr
        port = DEFAULT_MASTER_PORT if args.master_port is None else args.master_port
        if args.master_port is None and hi == 1:   # (torchrun, too, picks a free port for one node)
            host, port, run_id = "localhost", 0, str(uuid.uuid4())
        serve = args.node_rank == 0
    else:
        default = DEFAULT_C10D_PORT if args.rdzv_backend == "c10d" else DEFAULT_MASTER_PORT
        host, port = _endpoint(args.rdzv_endpoint, default, error)
        serve = conf["is_host"].lower() in ("1", "true", "yes") if "is_host" in conf else _is_local(host)
    static = args.rdzv_backend == "static" and not args.standalone
    keep_alive = (_seconds(conf, "keep_alive_interval", 5, error)
                  * _seconds(conf, "keep_alive_max_attempt", 3, error))
    return Plan(nproc=nproc, cmd=_command(args, error), run_id=run_id, host=host, port=port, serve=serve,
                join_timeout=_seconds(conf, "join_timeout", 600, error), backend="static" if static else "c10d",
                min_nodes=lo, max_nodes=hi, node_rank=args.node_rank if static else None,
                last_call=_seconds(conf, "last_call_timeout", 30, error), keep_alive=keep_alive,
                max_restarts=args.max_restarts,
                monitor_interval=args.monitor_interval, log_dir=args.log_dir,
                redirects=streams_of(args.redirects, nproc, "--redirects", error),
                tee=streams_of(args.tee, nproc, "--tee", error))


def _command(args, error) -> list:
    script, rest = args.training_script, list(args.training_script_args)
    if args.module and args.no_python:
        error("--no-python and -m cannot be used together")
    if args.no_python:
        if not (os.path.isfile(script) or shutil.which(script)):
            error(f"training program {script!r} does not exist (nor is it a command on PATH)")
        return [script] + rest
    if not args.module and not os.path.isfile(script):
        error(f"training script {script!r} does not exist")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
    return [sys.executable, worker, "-m" if args.module else "--path", script] + rest
