"""Sphinx configuration of Ember's API reference (``sphinx-build -W docs docs/_build``).

Sphinx is optional (``pip install -e '.[docs]'``); ``tests/test_docs.py`` builds this with
``-W`` (warnings are errors) when Sphinx is installed. The ``api/*.rst`` pages are written
at build time (:func:`write_api_pages`): one page per package, an ``autoclass`` or
``autofunction`` for every public name it exports that has a docstring, so a new layer or
function appears without editing the docs.
"""
import importlib
import inspect
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, os.pardir)))

project = "Ember"
author = "Ember developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_typehints = "none"
exclude_patterns = ["_build"]
html_theme = "alabaster"

#: (page, package, title) of the reference.
PACKAGES = [
    ("ember", "ember", "tensors, factories and ops"),
    ("nn", "ember.nn", "modules, layers and parameters"),
    ("functional", "ember.nn.functional", "functional layers, activations and losses"),
    ("optim", "ember.optim", "optimizers"),
    ("lr_scheduler", "ember.optim.lr_scheduler", "learning-rate schedules"),
    ("data", "ember.data", "datasets, samplers, DataLoader (= ember.utils.data)"),
    ("func", "ember.func", "function transforms"),
    ("distributed", "ember.distributed", "collectives and process groups"),
    ("amp", "ember.amp", "automatic mixed precision"),
]


def _public(mod):
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    for name in sorted(set(names)):
        obj = getattr(mod, name, None)
        if inspect.ismodule(obj) or obj is None or not inspect.getdoc(obj):
            continue
        if inspect.isclass(obj):
            yield "autoclass", name
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            yield "autofunction", name


def write_api_pages() -> None:
    """Write ``api/<page>.rst`` for every package of :data:`PACKAGES`."""
    os.makedirs(os.path.join(HERE, "api"), exist_ok=True)
    seen = set()          # NOTE: an object exported twice is indexed on its first page only
    for page, pkg, title in PACKAGES:
        mod = importlib.import_module(pkg)
        head = f"``{pkg}``: {title}"
        lines = [head, "=" * len(head), "", f".. automodule:: {pkg}", ""]
        for directive, name in _public(mod):
            lines += [f".. {directive}:: {pkg}.{name}"]
            key = id(getattr(mod, name))
            lines += ["   :no-index:", ""] if key in seen else [""]
            seen.add(key)
        text = "\n".join(lines)
        path = os.path.join(HERE, "api", f"{page}.rst")
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)


write_api_pages()
