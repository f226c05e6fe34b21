"""Autograd hooks DistributedDataParallel builds on: post-accumulate-grad and queue_callback."""
import pytest

import ember
from ember.autograd.engine import queue_callback
from ember.errors import GraphError


def test_post_accumulate_hook_runs_once_after_all_contributions():
    w = ember.randn(3, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.clone()))
    ((w * w).sum() + (w * 2).sum() + w.sum()).backward()   # three edges into w
    assert len(seen) == 1
    assert (seen[0] - (2 * w.detach() + 3)).abs().max().item() < 1e-6


def test_post_accumulate_hook_sees_accumulated_grad_and_can_be_removed():
    w = ember.ones(2, requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (w * 3).sum().backward()
    (w * 3).sum().backward()
    assert seen == [[3.0, 3.0], [6.0, 6.0]]
    h.remove()
    (w * 3).sum().backward()
    assert len(seen) == 2


def test_post_accumulate_hook_not_run_under_autograd_grad():
    w = ember.ones(2, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(1))
    ember.autograd.grad((w * w).sum(), w)
    assert seen == []


def test_post_accumulate_hook_rejects_non_leaf():
    w = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)


def test_queue_callback_runs_at_end_of_backward():
    a = ember.ones(2, requires_grad=True)
    b = ember.ones(2, requires_grad=True)
    order = []

    def hook(t):
        order.append("a")
        queue_callback(lambda: order.append(("end", b.grad is not None)))

    a.register_post_accumulate_grad_hook(hook)
    (a * 2 + b * 3).sum().backward()
    assert order == ["a", ("end", True)]   # after every leaf's gradient, b's included
    with pytest.raises(GraphError, match="no backward pass"):
        queue_callback(lambda: None)
