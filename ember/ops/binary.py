"""(stub: filled in by its op family)."""
from __future__ import annotations

__all__: list = []
