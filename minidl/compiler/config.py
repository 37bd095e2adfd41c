"""Settings of ``minidl.compile``, read when a graph is built (as ``torch._inductor.config``'s are)."""

# Chains of elementwise launches become one generated kernel (``fusion.py``); False: every launch replays
# as captured (to tell a fused kernel's fault from the graph's, or to see the graph before fusion).
fuse = True
