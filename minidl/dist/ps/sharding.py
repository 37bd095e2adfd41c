"""Where each part of a parameter lives: contiguous ranges over the servers. A dense parameter is
cut by element (of its flattened value), a row-addressed (sparse) one by row; server k holds
[bounds[k], bounds[k + 1]), the first ones one longer when the count does not divide."""
from __future__ import annotations


def bounds(count: int, servers: int) -> list:
    base, extra = divmod(count, servers)
    out = [0]
    for k in range(servers):
        out.append(out[-1] + base + (k < extra))
    return out
