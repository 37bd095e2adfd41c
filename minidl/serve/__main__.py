"""``python -m minidl.serve SPEC ...``; see ``minidl.serve.cli``."""
from .cli import main

main()
