"""Key-value stores, torch.distributed's control plane: ranks find each other, agree on a round and
swap small values (addresses, ids) through one of them before any communicator exists.

HashStore lives in one process (threads); FileStore is a file shared by processes of one machine;
TCPStore is a server thread in one process (the master's, or a launcher's that outlives the workers)
reached by clients over TCP; PrefixStore gives a job its own key space inside another store.
"""
from .base import DistNetworkError, DistStoreError, Store
from .file import FileStore
from .hash import HashStore
from .prefix import PrefixStore
from .tcp import TCPStore

__all__ = ["DistNetworkError", "DistStoreError", "FileStore", "HashStore", "PrefixStore", "Store", "TCPStore"]
