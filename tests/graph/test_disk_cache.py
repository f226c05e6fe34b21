"""The persistent graph cache (:mod:`ember.graph.disk_cache`): a second compile of the same
traced graph -- in this process or a new one -- loads the optimised graph instead of running
the passes, gives bitwise the same results, and never trusts a damaged or foreign entry."""
import hashlib
import os
import pickle
import sys
import textwrap

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.codegen import find_compiler
from ember.graph import disk_cache, graph_pickle

from ._processes import run_twice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def gcache(monkeypatch, tmp_path):
    """The graph cache on (keyed by the trace: no warm starts, see test_warm_start.py), over a
    fresh private folder; its counters reset."""
    if find_compiler() is None:
        pytest.skip("no C compiler")
    d = tmp_path / "graphs"
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "trace")
    monkeypatch.setenv("EMBER_GRAPH_CACHE_DIR", str(d))
    monkeypatch.setattr(disk_cache, "stats", {k: 0 for k in disk_cache.stats})
    monkeypatch.setattr(disk_cache, "_warned", set())
    return d


def _setup(seed=0):
    ember.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 5))
    opt = ember.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed)
    x = ember.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    y = ember.tensor(rng.integers(0, 5, 64))

    @ember.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, model, x, y


def _train(n=4):
    step, model, x, y = _setup()
    losses = [float(step(x, y)) for _ in range(n)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], step


def _entries(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".graph")) if d.exists() else []


def test_second_compile_loads_the_graph_and_matches_bitwise(gcache):
    fresh, pf, s1 = _train()
    assert disk_cache.stats["stored"] == 1 and len(_entries(gcache)) == 1
    loaded, pl, s2 = _train()
    assert disk_cache.stats["hits"] == 1
    assert any(p["pass"] == "graph cache" for p in s2.explain().captures[-1].passes)
    assert not any(p["pass"] == "graph cache" for p in s1.explain().captures[-1].passes)
    assert loaded == fresh                       # bitwise: floats compared exactly
    for a, b in zip(pf, pl):
        np.testing.assert_array_equal(a, b)
    assert str(s2.graph) == str(s1.graph)


def test_off_switch_writes_nothing(gcache, monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    _train(2)
    assert _entries(gcache) == [] and disk_cache.stats["stored"] == 0


def test_corrupted_entry_is_rebuilt_not_trusted(gcache):
    fresh, _, _ = _train()
    (name,) = _entries(gcache)
    path = gcache / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    again, _, _ = _train()
    assert disk_cache.stats["rebuilt"] == 1 and disk_cache.stats["hits"] == 0
    assert again == fresh
    good = path.read_bytes()                  # rewritten: loads again
    assert good != bytes(data)
    _train()
    assert disk_cache.stats["hits"] == 1


def test_forged_entry_naming_other_code_is_refused(gcache, tmp_path):
    """A payload with a matching checksum that names a callable outside the allow-list (as
    a tampered entry would) is not loaded, and nothing in it runs."""
    _train()
    (name,) = _entries(gcache)
    marker = tmp_path / "RAN"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    head = pickle.dumps([])
    body = (graph_pickle.FORMAT.to_bytes(2, "little") + len(head).to_bytes(8, "little") +
            head + pickle.dumps({"graph": Evil(), "report": []}))
    (gcache / name).write_bytes(disk_cache.MAGIC + hashlib.sha256(body).hexdigest().encode()
                                + b"\n" + body)
    _train()
    assert not marker.exists()
    assert disk_cache.stats["hits"] == 0 and disk_cache.stats["rebuilt"] == 1


def test_flag_or_version_change_misses(gcache, monkeypatch):
    _train(2)
    monkeypatch.setenv("EMBER_SOME_FLAG", "1")        # every EMBER_* variable is keyed
    _train(2)
    assert disk_cache.stats["hits"] == 0 and len(_entries(gcache)) == 2
    monkeypatch.delenv("EMBER_SOME_FLAG")
    monkeypatch.setattr(ember, "__version__", "0.0.0-other")
    monkeypatch.setattr(disk_cache, "_env_memo", {})
    _train(2)
    assert disk_cache.stats["hits"] == 0 and len(_entries(gcache)) == 3
    monkeypatch.undo()


def test_other_pipeline_misses(gcache):
    _train(2)
    step, _, x, y = _setup()
    ember.compile(step.fn, passes=["simplify", "dce"])(x, y)
    assert disk_cache.stats["hits"] == 0


def test_shared_folder_is_not_used(gcache):
    gcache.mkdir(mode=0o700)
    os.chmod(gcache, 0o777)                       # writable by others, not sticky
    with pytest.warns(UserWarning, match="not using the graph cache"):
        losses, _, _ = _train(2)
    assert _entries(gcache) == [] and len(losses) == 2


def test_size_bound_evicts_least_recently_used(gcache, monkeypatch):
    _train(2)
    (first,) = _entries(gcache)
    size = (gcache / first).stat().st_size
    os.utime(gcache / first, (1, 1))              # the oldest access
    monkeypatch.setenv("EMBER_GRAPH_CACHE_MAX_BYTES", str(size + size // 2))
    monkeypatch.setenv("EMBER_SOME_FLAG", "2")    # another key
    _train(2)
    assert first not in _entries(gcache) and len(_entries(gcache)) == 1
    assert disk_cache.stats["evicted"] == 1


CHILD = textwrap.dedent("""
    import hashlib, json, sys
    sys.path.insert(0, {tests!r})
    from graph.test_disk_cache import _train
    from ember.graph import disk_cache
    losses, params, _ = _train()
    print(json.dumps({{"losses": [repr(v) for v in losses], "stats": disk_cache.stats,
                      "p": [p.tobytes().hex() for p in params],
                      "env": hashlib.sha256(disk_cache.environment().encode()).hexdigest()}}))
""")


def test_new_process_loads_the_graph(gcache):
    import json
    env = dict(os.environ, EMBER_GRAPH_CACHE="trace", EMBER_GRAPH_CACHE_DIR=str(gcache))
    code = CHILD.format(tests=os.path.join(ROOT, "tests"))
    runs = run_twice(code, env)
    assert runs[0]["stats"]["stored"] == 1 and runs[0]["stats"]["hits"] == 0
    assert runs[1]["stats"]["hits"] == 1 and runs[1]["stats"]["stored"] == 0
    assert runs[1]["losses"] == runs[0]["losses"] and runs[1]["p"] == runs[0]["p"]


def test_cli_info_and_clear_include_graphs(gcache, capsys):
    from ember import cli
    _train(2)
    size = sum((gcache / n).stat().st_size for n in _entries(gcache))
    cli.main(["cache", "info"])
    out = capsys.readouterr().out
    assert f"graphs:     {gcache} (on)" in out and f"entries:  1, {size} bytes" in out
    cli.main(["cache", "clear"])
    assert f"removed 1 graph entries, {size} bytes" in capsys.readouterr().out
    assert _entries(gcache) == []
