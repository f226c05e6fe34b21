"""(stub: seedable Generator, manual_seed; filled in by its owner)."""
