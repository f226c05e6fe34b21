"""Write ``ember/device/_cupy_loops.py``: the input types of every CuPy ufunc's loops, which
the strict stand-in (``ember/device/cuda_strict.py``) uses to refuse what CuPy refuses.

Needs CuPy (imports without a GPU) and ml_dtypes in the running Python, not Ember's
dependencies: ``python scripts/cupy_tables.py`` in a scratch environment with
``pip install cupy-cuda12x ml_dtypes``; it also prints the names NumPy has and CuPy lacks
(``cuda_strict.CUPY_LACKS``'s source).
"""
from __future__ import annotations

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, os.pardir, "ember", "device", "_cupy_loops.py")


def main() -> None:
    import cupy
    import numpy
    from cupy._core._kernel import ufunc
    lines = [f'"""Input types of CuPy {cupy.__version__}\'s ufunc loops, in CuPy\'s order (type '
             f'characters;',
             '``E`` is ml_dtypes\' bfloat16). Written by ``scripts/cupy_tables.py``: do not '
             'edit."""',
             f'CUPY_VERSION = "{cupy.__version__}"', "", "LOOPS = {"]
    for name in sorted(dir(cupy)):
        f = getattr(cupy, name)
        if isinstance(f, ufunc):
            seen = []
            for t in f.types:
                ins = t.split("->")[0]
                if ins not in seen:
                    seen.append(ins)
            lines.append(f'    "{name}": "{" ".join(seen)}",')
    lines.append("}")
    with open(OUT, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    for mod in ("", ".linalg", ".random", ".lib", ".polynomial"):
        n, c = importlib.import_module("numpy" + mod), importlib.import_module("cupy" + mod)
        lacks = sorted({x for x in dir(n) if not x.startswith("_")} -
                       {x for x in dir(c) if not x.startswith("_")} - {"test"})
        print(f"numpy{mod}: {' '.join(lacks)}")
    print(f"wrote {os.path.relpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
