"""Hierarchical all-reduce for several ranks per host: reduce onto each host's first rank
(binomial tree, over shared memory in practice), all-reduce among those leaders across hosts
(ring), then broadcast back within each host. Only one rank per host uses the network.
"""
from __future__ import annotations

from . import ring, tree


def sent_elements(numel: int, hosts, r: int) -> int:
    """Elements group rank r sends in all_reduce of ``numel`` elements, the ranks' hosts being ``hosts`` (one name
    per rank; the hosts and their ranks in the order they first appear, as group.Hierarchy splits them): into its
    host's reduce, in the leaders' ring (a leader), in its host's broadcast."""
    local = [i for i, host in enumerate(hosts) if host == hosts[r]]
    n, mine = len(local), local.index(r)
    sent = numel * (tree.reduce_sends(n, mine, 0) + tree.broadcast_sends(n, mine, 0))
    if mine == 0:
        leaders = sorted(set(hosts), key=hosts.index)
        sent += ring.sent_elements(numel, len(leaders), leaders.index(hosts[r]))
    return sent


def all_reduce(local_ch, leaders_ch, buf, op, segment_bytes) -> None:
    """``local_ch``: this host's ranks (leader = rank 0); ``leaders_ch``: the hosts' leaders
    (None on the other ranks)."""
    tree.reduce(local_ch, buf, op, 0)
    if leaders_ch is not None:
        ring.all_reduce(leaders_ch, buf, op, segment_bytes)
    tree.broadcast(local_ch, buf, 0)
