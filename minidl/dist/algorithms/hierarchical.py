"""Hierarchical all-reduce for several ranks per host: reduce onto each host's first rank
(binomial tree, over shared memory in practice), all-reduce among those leaders across hosts
(ring), then broadcast back within each host. Only one rank per host uses the network.
"""
from __future__ import annotations

from . import ring, tree


def all_reduce(local_ch, leaders_ch, buf, op, segment_bytes) -> None:
    """``local_ch``: this host's ranks (leader = rank 0); ``leaders_ch``: the hosts' leaders
    (None on the other ranks)."""
    tree.reduce(local_ch, buf, op, 0)
    if leaders_ch is not None:
        ring.all_reduce(leaders_ch, buf, op, segment_bytes)
    tree.broadcast(local_ch, buf, 0)
