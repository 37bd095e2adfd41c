"""Starting the ranks of a benchmark as plain processes over gloo (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), each in a session of its own with its output in a file, and ending them all."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(command, n, folder, tag, env):
    """n processes of ``command`` over gloo (env://), their output in files: [(process, output file)]."""
    port, ranks = free_port(), []
    for r in range(n):
        out = open(Path(folder) / f"{tag}-{r}.out", "w+")
        launch = {"PYTHONPATH": str(ROOT), "RANK": str(r), "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(port)}
        ranks.append((subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, env={**os.environ, **launch, **env}), out))
    return ranks


def finish(ranks, timeout, spare=()):
    """Wait for every rank but those in ``spare``; kill them all at the end: their outputs, or None on a hang."""
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for i, (p, _) in enumerate(ranks) if i not in spare):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        return [out.seek(0) or out.read() for _, out in ranks]
    finally:
        for p, out in ranks:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            out.close()


def results(command, n, folder, tag, env, timeout=900):
    """Run n ranks of ``command``, each printing one line ``RESULT <json with its "rank">``: those results in
    rank order, or a string saying what failed (a hang, or a rank's last lines)."""
    outs = finish(start_ranks(command, n, folder, tag, env), timeout)
    if outs is None:
        return f"hung (killed after {timeout} s)"
    found = [re.search(r"^RESULT (.*)$", o, re.M) for o in outs]
    if not all(found):
        bad = next(o for o, f in zip(outs, found) if not f)
        return "failed: " + " | ".join(bad.strip().splitlines()[-3:])
    return sorted((json.loads(f.group(1)) for f in found), key=lambda r: r["rank"])
