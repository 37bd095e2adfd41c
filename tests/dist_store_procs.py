"""Child processes of tests/test_dist_store.py (started with spawn; kept apart from the test module so
a child imports minidl.dist only, not torch)."""
import time
from datetime import timedelta


def add_many(port, n, out):
    """Connect to the master at ``port`` and ``add`` n times; report every count seen."""
    from minidl.dist import TCPStore
    store = TCPStore("127.0.0.1", port, timeout=timedelta(seconds=30))
    out.put([store.add("counter", 1) for _ in range(n)])


def file_add_many(path, n, out):
    from minidl.dist import FileStore
    store = FileStore(path)
    out.put([store.add("counter", 1) for _ in range(n)])


def host_master(out):
    """Host a TCPStore master on a free port, say which, and stay up until killed."""
    from minidl.dist import TCPStore
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    store.set("hello", "from the master")
    out.put(store.port)
    time.sleep(120)
