"""A device graph's view steps run inside their one reader (``ember/graph/view_chains.py``).

On the CPU stand-in (a ``cuda`` device over NumPy), a compiled function whose views
(reshape, permute, slice) feed one step each runs fewer executor steps: neighbouring
views as one step, views read by one step as that step's prologue. The results are the
very arrays the unchained program makes (bitwise, eager too), a strided reshape that
copies is still counted by the allocator, a second call replays the same steps, and a
CPU graph's steps are left alone.
"""
import numpy as np

import ember as em
from ember.graph.view_chains import Prologue, ViewChain


def _f(x, w, b):
    h = (x.reshape(4, 2, 3, 8).permute(0, 2, 1, 3).reshape(4, 3, 16) @ w.t()) + b
    q = h.reshape(4, 3, 2, 5)[:, :, 0].reshape(12, 5)
    k = h.reshape(4, 3, 2, 5)[:, :, 1].reshape(12, 5)
    return (q * k).sum(-1), h.permute(2, 0, 1).reshape(10, 12)


def _inputs(device, seed=0):
    rng = np.random.default_rng(seed)
    mk = lambda *s: em.tensor(rng.standard_normal(s).astype(np.float32), device=device)
    return mk(4, 6, 8), mk(10, 16), mk(10)


def _program(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program


def _merged(prog):
    return [s for s in prog._serial if s.kernel.__class__ in (ViewChain, Prologue)]


def test_device_views_run_inside_their_reader_with_the_same_results(fake_cuda, monkeypatch):
    x, w, b = _inputs("cuda")
    want = [t.cpu().numpy() for t in _f(x, w, b)]
    fn = em.compile(_f)
    for _ in range(3):          # traced, then replayed: the same steps each call
        got = [t.cpu().numpy() for t in fn(x, w, b)]
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g, e)
    prog = _program(fn)
    assert _merged(prog) and len(prog._serial) < len(prog._dev_steps)
    assert any(isinstance(s.kernel, Prologue) for s in prog._serial)
    assert any(isinstance(s.kernel, ViewChain) for s in prog._serial)
    # the same graph unchained: the same values
    from ember.graph import executor
    monkeypatch.setattr(executor, "chain_views", lambda serial, *a: serial)
    fn2 = em.compile(_f)
    got2 = [t.cpu().numpy() for t in fn2(x, w, b)]
    assert not _merged(_program(fn2))
    for g, e in zip(got2, want):
        np.testing.assert_array_equal(g, e)
    x2, w2, b2 = _inputs("cuda", 1)         # new values, same layout: replayed
    for g, e in zip(fn(x2, w2, b2), _f(x2, w2, b2)):
        np.testing.assert_array_equal(g.cpu().numpy(), e.cpu().numpy())


def test_a_copying_reshape_inside_a_chain_is_counted(fake_cuda):
    # permute then reshape: the reshape copies (a strided input); its bytes are counted
    # while the result lives and released with it, as when it was a step of its own
    def f(x):
        return x.permute(1, 0).reshape(48) * 2.0

    x = em.tensor(np.arange(48, dtype=np.float32).reshape(6, 8), device="cuda")
    fn = em.compile(f)
    fn(x)
    before = em.cuda.memory_allocated()
    y = fn(x)
    assert _merged(_program(fn))
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(48, dtype=np.float32).reshape(
        6, 8).T.reshape(48) * 2)
    assert em.cuda.memory_allocated() == before + 48 * 4
    del y
    assert em.cuda.memory_allocated() == before


def test_cpu_programs_keep_their_view_steps():
    x, w, b = _inputs("cpu")
    fn = em.compile(_f)
    for g, e in zip(fn(x, w, b), _f(x, w, b)):
        np.testing.assert_array_equal(g.cpu().numpy(), e.cpu().numpy())
    prog = _program(fn)
    assert not _merged(prog)
    assert any(s.name in ("reshape", "permute") for s in prog._serial)
