"""Where the CPU kernels' machine code is cached, and the one line said while it is first made.

Numba caches a ``cache=True`` kernel beside its source (``__pycache__``) or in a folder named
after the source's absolute path, so every clone and virtual environment of minidl compiled all
kernels again (about half a minute). Here Numba gets a locator of our own for the kernel modules
of ``jit/``: their cache lives in one per-user folder (``$NUMBA_CACHE_DIR`` if the user set it,
else ``$XDG_CACHE_HOME/minidl`` or ``~/.cache/minidl``), named by the numba version, the module
and a hash of the text of *every* module in ``jit/``. Numba's own key is the kernel's file
alone, which misses an edit to a helper inlined from another file (a formula, a library
function); with the package's hash any edit there recompiles every kernel that could depend on
it. Every copy of the same sources shares one cache; an edited source gets fresh folders, which is
how stale entries are invalidated (the newest few are kept, so switching between branches
doesn't recompile).

Numba's locator classes are internal API, stable from 0.59 to 0.68: pyproject.toml bounds numba
to those versions and tests/test_kernel_cache.py checks the behaviour.
"""
import functools
import hashlib
import os
import shutil
import sys
import time

import numba
from numba.core import caching, event

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jit")
KEEP = 4                    # source versions kept per module ...
PRUNE_AFTER = 24 * 3600     # ... beyond which a folder unused for a day is removed


def cache_root() -> str:
    return os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "minidl")


@functools.lru_cache(maxsize=None)
def sources_digest(folder: str) -> str:
    """A hash of the names and text of every Python file in ``folder``."""
    digest = hashlib.sha256()
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".py")):
        with open(os.path.join(folder, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read() + b"\0")
    return digest.hexdigest()


_touched: set = set()


def _mark_used(folder: str) -> None:
    """Set a folder's time to now, once per process: the prune below keeps the recently used."""
    if folder not in _touched:
        _touched.add(folder)
        os.utime(folder)


def _prune(parent: str, stem: str) -> None:
    """Remove the folders of ``stem``'s older sources: all but the KEEP most recently used, and
    only those idle for a day (another process may still be using a recent one)."""
    folders = [os.path.join(parent, name) for name in os.listdir(parent) if name.startswith(stem + "-")]
    folders.sort(key=os.path.getmtime, reverse=True)
    for folder in folders[KEEP:]:
        if time.time() - os.path.getmtime(folder) > PRUNE_AFTER:
            shutil.rmtree(folder, ignore_errors=True)


class KernelCacheLocator(caching._CacheLocator):
    """Numba's cache of a kernel in ``jit/``: per user, keyed by the package's text, not by path."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file   # (Numba's warning that a kernel cannot be cached names it: NUMBA_OPT=0 does that)
        self._lineno = py_func.__code__.co_firstlineno
        self._digest = sources_digest(os.path.dirname(os.path.abspath(py_file)))
        self._stem = os.path.splitext(os.path.basename(py_file))[0]
        self._cache_path = os.path.join(cache_root(), f"cpu-numba-{numba.__version__}",
                                        f"{self._stem}-{self._digest[:16]}")

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return self._digest

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) != HERE:
            return None  # not ours: Numba's own locators decide
        self = cls(py_func, py_file)
        fresh = not os.path.isdir(self._cache_path)
        try:
            self.ensure_cache_path()
            _mark_used(self._cache_path)
            if fresh:
                _prune(os.path.dirname(self._cache_path), self._stem)
        except OSError:
            return None  # not writable: Numba's own locators take over
        return self


class FirstCompileNotice(event.Listener):
    """Says once per process, on stderr, that minidl's kernels are being compiled: a fresh cache
    takes about half a minute, which would otherwise pass in silence."""

    said = False

    def on_start(self, ev):
        dispatcher = ev.data["dispatcher"]
        where = getattr(dispatcher._cache, "cache_path", None)   # (None: an inlined helper, cached with its caller)
        if not self.said and where and dispatcher.py_func.__module__.startswith(("minidl.", "minidl_fused")):
            FirstCompileNotice.said = True
            print(f"minidl: compiling CPU kernels, first use only (cached in {where})", file=sys.stderr, flush=True)

    def on_end(self, ev):
        pass


def install() -> None:
    """Put our locator first; must run before the kernel modules are imported (``cache=True``
    picks its locator when the decorator runs)."""
    if KernelCacheLocator not in caching.CacheImpl._locator_classes:
        caching.CacheImpl._locator_classes.insert(0, KernelCacheLocator)
        event.register("numba:compile", FirstCompileNotice())
