"""Where generated fused kernels are kept between processes: ``$MINIDL_COMPILE_CACHE``, else
``$XDG_CACHE_HOME/minidl/compile`` or ``~/.cache/minidl/compile``. A kernel's file is named by its
program's key (a hash of the program and the generators' version), so an edited generator writes
new files and never reads a stale one; the CPU's machine code is cached by Numba beside its file."""
import os
import tempfile


def cache_dir(device_type: str) -> str:
    root = os.environ.get("MINIDL_COMPILE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "minidl", "compile")
    path = os.path.join(root, device_type)
    os.makedirs(path, exist_ok=True)
    return path


def keep(device_type: str, name: str, text: str) -> str:
    """The path of ``name`` holding ``text`` in the cache, written (atomically) only if it is not there
    already: rewriting it would change its time and make Numba compile it again."""
    path = os.path.join(cache_dir(device_type), name)
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    fd, scratch = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(scratch, path)
    return path
