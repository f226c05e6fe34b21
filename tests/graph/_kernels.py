"""Helpers shared by the tests of passes that generate or call C kernels."""
import numpy as np
import pytest

from ember import codegen


def needs_compiler(why: str):
    """An autouse fixture: a fresh kernel cache per test; skip (saying ``why``) without a C
    compiler — each such module also tests its no-compiler path explicitly."""
    @pytest.fixture(autouse=True)
    def _need_compiler(tmp_path, monkeypatch):
        monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
        if not codegen.available():
            pytest.skip(f"no C compiler: {why}")
    return _need_compiler


def op_names(g) -> list:
    """The op names of graph ``g``'s nodes, in order."""
    return [n.op.name for n in g.nodes]


def eps(dt) -> float:
    """Machine epsilon of an Ember dtype."""
    return float(np.finfo(dt.np).eps)
