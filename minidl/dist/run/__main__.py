"""``python -m minidl.dist.run``: exit 1 when the job failed (the summary is already on stderr)."""
import sys

from . import ChildFailedError, main

try:
    main()
except ChildFailedError:
    sys.exit(1)
