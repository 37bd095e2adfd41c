"""``python -m minidl.dist.ps --resume CHECKPOINT_DIR [--server K]``: restart a parameter server that
died, from its checkpoint and log (recovery.py); it serves the job's workers until the job ends."""
import argparse
import logging
import sys

from .durability import DurabilityError
from .recovery import restart


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m minidl.dist.ps", description=__doc__.split("\n\n")[0])
    p.add_argument("--resume", required=True, metavar="CHECKPOINT_DIR",
                   help="the checkpoint_dir the job's ps.init was given")
    p.add_argument("--server", type=int, default=None, help="which server (needed when the folder holds several)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        restart(args.resume, args.server)
    except (DurabilityError, ValueError, KeyError) as e:   # (a checkpoint it cannot use: named, not a traceback)
        sys.stderr.write(f"python -m minidl.dist.ps: --resume {args.resume}: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
