"""All OpInfo tables. Each family module defines ``OPINFOS``; add new families here."""
from importlib import import_module

FAMILIES = ("arith", "unary", "binary", "reduce", "movement", "index", "linalg", "conv",
            "misc", "breadth", "random_dists",
            "special", "complex", "linalg_lapack", "linalg_complex", "fft",
            "ctc", "rnn", "sparse")

OPINFOS = []
for _f in FAMILIES:
    OPINFOS.extend(import_module(f"{__name__}.{_f}").OPINFOS)
