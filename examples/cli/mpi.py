"""The command line of an example launched as ranks (by mpiexec, or with torch's RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT): parsed on every rank, with one rank's messages, and a clear error where it was not launched so."""
import contextlib
import importlib.util
import io
import sys

from minidl.dist.launch import launch_rank, launched_by_env, launched_by_mpi


def parse_on_every_rank(parser, argv):
    """Every rank parses the command line; rank 0 alone prints the usage, help or error (after
    which argparse exits on every rank)."""
    if launch_rank() == 0:
        return parser.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return parser.parse_args(argv)


def require_launch(what, example):
    """Exit (2) with one error line, printed by rank 0 alone, where the script was started neither by mpiexec
    (with mpi4py installed) nor with env://'s variables: ``what`` the script does, ``example`` a command that
    launches it."""
    if launched_by_env():
        return
    if not launched_by_mpi():
        problem = (f"{what}; launch it with mpiexec, e.g.\n    {example}\nor one process per rank with RANK, "
                   f"WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (minidl's gloo transport)")
    elif importlib.util.find_spec("mpi4py") is None:
        problem = f"{what} over MPI, which needs mpi4py: pip install 'minidl[mpi]'"
    else:
        return
    if launch_rank() == 0:
        print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)
