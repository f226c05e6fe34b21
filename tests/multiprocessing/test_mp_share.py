"""ember.multiprocessing: tensors cross processes through shared memory (issue 17 item 6)."""
import pickle
import time

import numpy as np
import pytest

import ember
import ember.multiprocessing as mp


TIMEOUT = 60   # seconds: a hung child fails the test instead of hanging the suite


def _spawn(fn, args=(), nprocs=2):
    """``mp.spawn`` that never hangs: children still running after TIMEOUT are killed."""
    ctx = mp.spawn(fn, args=args, nprocs=nprocs, join=False)
    deadline = time.monotonic() + TIMEOUT
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fn.__name__}: children still running after {TIMEOUT} s")
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.kill()
            proc.join(5)


def _fill(i, t):
    t[i] = float(i + 1)


def _raise_in_one(i):
    if i == 1:
        raise ValueError("boom from child")


def _echo(q_in, q_out):
    t = q_in.get()
    t.add_(1.0)
    q_out.put(t[1:])                     # a view goes back by the same memory
    q_in.get()                           # NOTE: the sender lives until it was received


def _hogwild(i, model, x, y, steps):
    ember.manual_seed(i)
    opt = ember.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        idx = ember.randint(0, x.shape[0], (16,))
        loss = ((model(x[idx]) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_plain_pickle_still_refuses():
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(ember.zeros(2))


def test_spawn_args_share_memory_with_parent():
    t = ember.zeros(2)
    _spawn(_fill, args=(t,))
    assert t.is_shared()                 # moved into shared memory when sent
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])


def test_spawn_reraises_child_error_naming_the_index():
    with pytest.raises(mp.ProcessRaisedException, match=r"Process 1 terminated") as ei:
        _spawn(_raise_in_one)
    assert ei.value.error_index == 1 and "boom from child" in str(ei.value)


def test_queue_roundtrip_views_the_same_memory():
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    t = ember.arange(4, dtype=ember.float32).share_memory_()
    p = ctx.Process(target=_echo, args=(q_in, q_out))
    p.start()
    try:
        q_in.put(t)
        back = q_out.get(timeout=TIMEOUT)
        q_in.put(None)
        p.join(TIMEOUT)
    finally:
        if p.is_alive():
            p.kill()
            p.join(5)
    assert p.exitcode == 0
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0, 4.0])   # child's add_ seen
    np.testing.assert_array_equal(back.numpy(), [2.0, 3.0, 4.0])
    back[0] = 10.0                       # the received view writes into t's memory
    assert t[1].item() == 10.0 and back.is_shared()


def test_non_leaf_requiring_grad_is_refused():
    x = ember.ones(2, requires_grad=True) * 2
    q = mp.SimpleQueue()
    with pytest.raises(RuntimeError, match="non-leaf"):
        q.put(x)


def test_hogwild_linear_regression_converges():
    ember.manual_seed(0)
    x = ember.randn(256, 3)
    w_true = ember.tensor([[1.5], [-2.0], [0.5]])
    y = x @ w_true + 0.3
    model = ember.nn.Linear(3, 1)
    model.share_memory()
    _spawn(_hogwild, args=(model, x, y, 150))
    np.testing.assert_allclose(model.weight.detach().numpy().ravel(), [1.5, -2.0, 0.5],
                               atol=0.05)
    assert abs(model.bias.item() - 0.3) < 0.05
    assert isinstance(model.weight, ember.nn.Parameter) and model.weight.is_shared()


def _double(t):
    return t * 2


def test_pool_map_sends_and_returns_tensors():
    with mp.get_context("spawn").Pool(2) as pool:
        outs = pool.map_async(_double, [ember.full((2,), float(i)) for i in range(3)]).get(
            TIMEOUT)
    assert [o.tolist() for o in outs] == [[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]


def test_sharing_strategy_and_stdlib_names():
    assert mp.get_sharing_strategy() == "file_descriptor"
    assert mp.get_all_sharing_strategies() == {"file_descriptor"}
    with pytest.raises(ValueError, match="file_descriptor"):
        mp.set_sharing_strategy("file_system")
    assert mp.get_start_method(allow_none=True) in (None, "fork", "spawn", "forkserver")
    assert mp.Process is not None and mp.Queue is not None and mp.SimpleQueue is not None
