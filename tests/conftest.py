"""Shared test settings: seeded, derandomised hypothesis without deadlines (a first call may
compile a kernel), and one warm-up that compiles the CPU kernels before any test runs."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import minidl

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=300, deadline=None, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """Touch every kernel in every compute dtype once, so compilation is not charged to a test."""
    for dtype in (minidl.float32, minidl.float64, minidl.int64):
        x = minidl.arange(12, dtype=dtype).reshape(3, 4)
        y = x.t()
        (x + y.t(), x * 2, x.abs(), x.sum(0), x.amax(1), x.argmax(0), x.cumsum(1), x > 1, x[x > 1],
         minidl.where(x > 2, x, y.t()), x[[0, 2]], x @ y if dtype is not minidl.int64 else x)
        if dtype.is_floating_point:
            x.exp().log1p()
    minidl.tensor([True, False]) & minidl.tensor([True, True])
    minidl.zeros(40000).sum(), minidl.zeros(300, 200).sum(1), minidl.zeros(300, 200).cumsum(1)
    minidl.zeros(40000) + minidl.ones(40000)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)
