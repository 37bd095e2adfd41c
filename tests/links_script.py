"""A worker for tests/test_dist_links.py: connects to the Listener at argv[1] as id argv[2], says
"linked" on stdout, then idles (to be killed or stopped); with argv[3] == "send" it sends one
1 MiB message first (MINIDL_FAULT may kill it half-way), with "exit" it sends one and exits."""
import sys
import time

import numpy as np

from minidl.dist.communicators import links

link = links.connect(sys.argv[1], int(sys.argv[2]), [], lambda link, parts: None, lambda link, why: None)
print("linked", flush=True)
if sys.argv[3:] in (["send"], ["exit"]):
    link.send([b"head", np.full(1 << 20, 7, np.uint8)])
if sys.argv[3:] != ["exit"]:
    time.sleep(60)
