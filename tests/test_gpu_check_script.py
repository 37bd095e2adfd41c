"""benchmarks/gpu_check.sh stays runnable on the GPU session's one try: its syntax (and that of the script
that builds the Numba cache it can carry), and every command it would run, checked here without running
them. The script is run with a stand-in Python that records its arguments, in the GPU mode and in the
dry-run mode; then each recorded script must exist and accept every flag it was given (its --help lists
it), and each test path given to pytest must exist."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_numba_cache.sh"])
def test_the_scripts_parse(script):
    done = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / script)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def recorded_calls(tmp_path, **env):
    """The argument lists the script hands to Python, which a stand-in records instead of running."""
    log = tmp_path / "calls.jsonl"
    stub = tmp_path / "python"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    stub.chmod(0o755)
    out = tmp_path / "out"
    environ = dict(os.environ, PYTHON=str(stub), OUT=str(out), WHEELS=str(tmp_path / "no-wheels"), **env)
    environ.pop("MINIDL_CUDA_SIM", None)
    subprocess.run(["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert (out / "summary.log").exists()
    return [json.loads(line) for line in log.read_text().splitlines()]


def scripts_and_flags(calls):
    """{script path: the --flags it was given}, for each call that runs a file of the repository."""
    found = {}
    for args in calls:
        if args and args[0].endswith(".py"):
            found.setdefault(args[0], set()).update(a.split("=")[0] for a in args[1:] if a.startswith("--"))
    return found


def pytest_paths(calls):
    return [a for args in calls if args[:2] == ["-m", "pytest"] for a in args[2:] if a.startswith("tests/")]


@pytest.mark.parametrize("mode", ["gpu", "dry run"])
def test_every_command_names_files_and_flags_that_exist(tmp_path, mode):
    calls = recorded_calls(tmp_path, **({"DRY_RUN": "1"} if mode == "dry run" else {}))
    scripts = scripts_and_flags(calls)
    assert {"examples/train_digits.py", "examples/char_gpt.py", "benchmarks/gpu_warm.py", "benchmarks/gpu_ops.py",
            "benchmarks/gpu_train_step.py"} <= set(scripts)
    helps = {path: subprocess.Popen([sys.executable, path, "--help"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                    env=dict(os.environ, PYTHONPATH=str(ROOT)))
             for path in scripts}
    for path, flags in scripts.items():
        text = helps[path].communicate(timeout=120)[0]
        assert helps[path].returncode == 0, path
        assert {flag for flag in flags if flag not in text} == set(), path
    tests = pytest_paths(calls)
    assert "tests/test_dist_nccl.py" in tests
    assert all((ROOT / path).is_file() for path in tests), tests
    if mode == "gpu":
        assert set(tests) >= {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_cuda_*.py")}
