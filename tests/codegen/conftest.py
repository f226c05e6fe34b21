"""Codegen tests use a private kernel cache, never the user's (one per test session)."""
import os

import pytest

from ember.codegen import available


@pytest.fixture(scope="session", autouse=True)
def _kernel_cache(tmp_path_factory):
    old = os.environ.get("EMBER_KERNEL_CACHE")
    os.environ["EMBER_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kernels"))
    yield
    if old is None:
        os.environ.pop("EMBER_KERNEL_CACHE", None)
    else:
        os.environ["EMBER_KERNEL_CACHE"] = old


@pytest.fixture
def cc():
    """Skip (only) when this machine has no C compiler."""
    if not available():
        pytest.skip("no C compiler: generated kernels are disabled here")
