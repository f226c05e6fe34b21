import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# NOTE: tests monkeypatch passes' internals, which the graph cache's key can't see: it is
# off here (a user's ~/.cache is never read or written); tests/graph/test_disk_cache*.py
# turn it on over a temporary folder.
os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
