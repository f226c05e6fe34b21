"""(stub: torch.func-style transforms; filled in by its owner)."""
