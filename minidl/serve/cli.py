"""``python -m minidl.serve``: the command line. With ``--workers`` > 1 uvicorn starts that many processes, each
building the app from the arguments it finds in the environment (uvicorn needs an import string for that)."""
from __future__ import annotations

import argparse
import json
import os

import uvicorn

from .app import build_app
from .spec import SpecError, load_runner

__all__ = ["main", "app_from_environment"]

_ENV = "MINIDL_SERVE_ARGS"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minidl.serve", description="Serve a minidl model over HTTP.")
    p.add_argument("spec", help="path/module.py:factory, a model folder (minidl.models.from_pretrained) or a "
                   "model.onnx (ONNX Runtime)")
    p.add_argument("--weights", help="a state dict file (minidl.save) loaded strictly into the factory's module")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--max-batch-size", type=int, default=32, help="examples per model call at most")
    p.add_argument("--max-wait-ms", type=float, default=5, help="how long a batch waits for more after its first")
    p.add_argument("--max-body-mb", type=float, default=16, help="larger request bodies are refused (413)")
    p.add_argument("--max-sequences", type=int, default=32,
                   help="a language model's sequences decoding at once (/v1/generate); more wait in order")
    p.add_argument("--max-tokens", type=int, help="a generate request's prompt plus new tokens at most")
    p.add_argument("--example-ndim", type=int, help="dimensions of one example (tells one from a list)")
    p.add_argument("--workers", type=int, default=1, help="processes, each with its own copy of the model")
    p.add_argument("--log-level", default="info")
    return p


def app_from_arguments(args: dict):
    runner = load_runner(args["spec"], weights=args["weights"], example_ndim=args["example_ndim"])
    return build_app(runner, max_batch_size=args["max_batch_size"], max_wait_ms=args["max_wait_ms"],
                     max_body_mb=args["max_body_mb"], max_sequences=args["max_sequences"],
                     max_tokens=args["max_tokens"])


def app_from_environment():
    """The app a worker process builds (uvicorn's factory for ``--workers`` > 1)."""
    return app_from_arguments(json.loads(os.environ[_ENV]))


def main(argv=None) -> None:
    args = vars(parser().parse_args(argv))
    for name in ("workers", "max_sequences", "max_tokens"):
        if args[name] is not None and args[name] < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {args[name]}")
    common = {"host": args["host"], "port": args["port"], "log_level": args["log_level"]}
    try:                                   # (with several workers too: a bad SPEC fails here, not in each worker)
        app = app_from_arguments(args)
    except SpecError as error:
        raise SystemExit(f"python -m minidl.serve: {error}") from None
    if args["workers"] == 1:
        uvicorn.run(app, **common)
    else:
        os.environ[_ENV] = json.dumps(args)
        uvicorn.run("minidl.serve.cli:app_from_environment", factory=True, workers=args["workers"], **common)
