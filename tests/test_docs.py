"""The API reference builds without warnings (``sphinx-build -W``), where Sphinx is
installed (the optional ``docs`` extra); "Coming from PyTorch" names what it should."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)


def test_sphinx_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    out = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-E", "-q",
                          os.path.join(ROOT, "docs"), str(tmp_path / "html")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    page = (tmp_path / "html" / "api" / "nn.html").read_text()
    assert "ember.nn.Linear" in page and "ember.nn.LazyLinear" in page


def test_coming_from_pytorch_lists_the_differences():
    with open(os.path.join(ROOT, "docs", "coming_from_pytorch.md")) as f:
        text = f.read()
    for needle in ("import ember as torch", "safetensors", "ember.utils.data", "pickl",
                   "tests/api_allowlist.py"):
        assert needle in text, needle
