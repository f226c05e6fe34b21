"""Count how many of PyTorch's public names Ember has, per namespace.

Run where PyTorch is installed (it is only the yardstick, never imported by Ember)::

    .venv/bin/python scripts/api_coverage.py            # the summary table
    .venv/bin/python scripts/api_coverage.py --missing  # plus the missing names
    .venv/bin/python scripts/api_coverage.py --freeze tests/data/api_names.json

``after allowlist`` leaves out of the total the names ``tests/api_allowlist.py`` lists as
deliberately absent (each with its reason); ``tests/test_api_coverage.py`` checks the
targets there. ``--freeze`` writes the names Ember has now, per namespace, as the frozen
list that test checks where PyTorch is not installed.

A *public name* is an attribute of the PyTorch object whose name has no leading
underscore, leaving out modules that are not submodules of that namespace (``torch.nn``'s
``torch`` re-export, ``functional``'s ``math``) . The same name is looked up on Ember's
object under the same path (``torch.utils.data`` -> ``ember.utils.data``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types

#: (PyTorch path, Ember path, attribute of the imported module or None)
NAMESPACES = [
    ("torch", "ember", None),
    ("torch", "ember", "Tensor"),
    ("torch.nn", "ember.nn", None),
    ("torch.nn.functional", "ember.nn.functional", None),
    ("torch.nn.utils", "ember.nn.utils", None),
    ("torch.optim", "ember.optim", None),
    ("torch.optim.lr_scheduler", "ember.optim.lr_scheduler", None),
    ("torch.utils.data", "ember.utils.data", None),
    ("torch.special", "ember.special", None),
    ("torch.linalg", "ember.linalg", None),
    ("torch.fft", "ember.fft", None),
    ("torch.distributions", "ember.distributions", None),
    ("torch.func", "ember.func", None),
    ("torch.cuda", "ember.cuda", None),
    ("torch.autograd", "ember.autograd", None),
    ("torch.autograd.functional", "ember.autograd.functional", None),
    ("torch.autograd.forward_ad", "ember.autograd.forward_ad", None),
    ("torch.autograd.graph", "ember.autograd.graph", None),
    ("torch.amp", "ember.amp", None),
    ("torch.testing", "ember.testing", None),
    ("torch.utils.dlpack", "ember.utils.dlpack", None),
    ("torch.nn.utils.rnn", "ember.nn.utils.rnn", None),
    ("torch.nn.attention", "ember.nn.attention", None),
    ("torch.jit", "ember.jit", None),
    ("torch.compiler", "ember.compiler", None),
]


def allowlist() -> dict:
    """``tests/api_allowlist.py``'s ALLOWLIST ({namespace label: {name: reason}})."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests")
    sys.path.insert(0, os.path.abspath(here))
    try:
        import api_allowlist
    finally:
        sys.path.pop(0)
    return api_allowlist.ALLOWLIST


def _resolve(path: str, attr: str | None):
    """The module (or ``module.attr``) at ``path``, or None where it does not import."""
    try:
        mod = importlib.import_module(path)
    except ImportError:
        return None
    return getattr(mod, attr, None) if attr else mod


def public_names(obj, path: str) -> list[str]:
    """Public names of a PyTorch module or class (see the module docstring)."""
    names = []
    for name in dir(obj):
        if name.startswith("_"):
            continue
        val = getattr(obj, name, None)
        if isinstance(val, types.ModuleType) and not val.__name__.startswith(path + "."):
            continue
        names.append(name)
    return sorted(names)


def coverage(torch_path: str, ember_path: str, attr: str | None, callables: bool = False):
    """(label, present count, total, missing names) for one namespace; with ``callables``,
    only its functions (callable names that are not classes or modules)."""
    ref = _resolve(torch_path, attr)
    mine = _resolve(ember_path, attr)
    names = public_names(ref, torch_path)
    if callables:
        names = [n for n in names if callable(getattr(ref, n, None)) and not isinstance(
            getattr(ref, n), (type, types.ModuleType))]
    missing = [n for n in names if mine is None or not hasattr(mine, n)]
    label = (f"{torch_path}.{attr}" if attr else torch_path) + (" (functions)" if callables
                                                                else "")
    return label, len(names) - len(missing), len(names), missing


def main(argv=None) -> int:
    """Print the coverage table (and the missing names with ``--missing``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--missing", action="store_true", help="list the missing names")
    ap.add_argument("--freeze", metavar="PATH", help="write the names Ember has as JSON")
    args = ap.parse_args(argv)
    import torch  # noqa: F401 - the yardstick
    import ember  # noqa: F401
    rows = [coverage(*ns) for ns in NAMESPACES]
    rows.insert(1, coverage("torch", "ember", None, callables=True))
    allow = allowlist()
    print(f"{'namespace':28s} {'present':>8s} {'total':>6s} {'coverage':>9s} "
          f"{'allowlisted':>11s} {'after allowlist':>15s}")
    size = sum(len(v) for v in allow.values())
    for label, have, total, missing in rows:
        n_allow = sum(1 for n in missing if n in _allow_of(allow, label))
        print(f"{label:28s} {have:8d} {total:6d} {have / max(total, 1):9.1%} {n_allow:11d} "
              f"{have / max(total - n_allow, 1):15.1%}")
    print(f"\nallowlist: {size} names in {len(allow)} namespaces (tests/api_allowlist.py)")
    if args.missing:
        for label, _, _, missing in rows:
            left = [n for n in missing if n not in _allow_of(allow, label)]
            print(f"\n{label} missing, not allowlisted ({len(left)}):\n  " + " ".join(left))
    if args.freeze:
        freeze(args.freeze)
    return 0


def _allow_of(allow: dict, label: str) -> dict:
    """A row's allowlist (``torch (functions)`` shares ``torch``'s)."""
    return allow.get(label.replace(" (functions)", ""), {})


def freeze(path: str) -> None:
    """Write ``{"paths": {label: [ember path, attr]}, "names": {label: [names Ember has]}}``
    for every namespace of :data:`NAMESPACES` (the test's fallback without PyTorch)."""
    out = {"paths": {}, "names": {}}
    for torch_path, ember_path, attr in NAMESPACES:
        label, _, _, missing = coverage(torch_path, ember_path, attr)
        names = public_names(_resolve(torch_path, attr), torch_path)
        out["paths"][label] = [ember_path, attr]
        out["names"][label] = sorted(set(names) - set(missing))
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    raise SystemExit(main())
