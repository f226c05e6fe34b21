"""(stub: custom autograd Function; filled in by its owner)."""
