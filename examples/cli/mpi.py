"""The command line of an example launched by mpiexec: parsed on every rank, with one rank's
messages, and a clear error where the example was not launched that way."""
import contextlib
import importlib.util
import io
import sys

from minidl.dist.launch import launch_rank, launched_by_mpi


def parse_on_every_rank(parser, argv):
    """Every rank parses the command line; rank 0 alone prints the usage, help or error (after
    which argparse exits on every rank)."""
    if launch_rank() == 0:
        return parser.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return parser.parse_args(argv)


def require_mpi(what, example):
    """Exit (2) with one error line, printed by rank 0 alone, where the script was not started by
    mpiexec or mpi4py is missing: ``what`` the script does, ``example`` a command that launches it."""
    if not launched_by_mpi():
        problem = f"{what}; launch it with mpiexec, e.g.\n    {example}"
    elif importlib.util.find_spec("mpi4py") is None:
        problem = f"{what} over MPI, which needs mpi4py: pip install 'minidl[mpi]'"
    else:
        return
    if launch_rank() == 0:
        print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)
