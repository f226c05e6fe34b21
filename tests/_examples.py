"""Loading the scripts under ``examples/`` in tests (the folder is not a package)."""
from __future__ import annotations

import importlib.util
import os

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load_example(name: str):
    """Imports ``examples/<name>.py`` as a new module ``ember_example_<name>``."""
    spec = importlib.util.spec_from_file_location(f"ember_example_{name}",
                                                  os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
