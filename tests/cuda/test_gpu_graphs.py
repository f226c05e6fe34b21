"""``ember.compile(mode="reduce-overhead")`` on a real GPU (skip: "no CUDA GPU/CuPy"): the
device steps captured with CuPy's stream capture and replayed as one CUDA graph give the
default mode's losses, parameters and gradients bit for bit over steps on new batches
(float32 MLP; float16-autocast GPT-like model with AdamW's host step counts and
multi-tensor launches); the graph really was captured and replayed, its private pool is
counted in ``memory_reserved``, and the returned loss survives later calls. The stand-in
runs the same checks with recorded steps: ``test_cuda_graphs.py``.

Run: ``python3 -m pytest -q tests/cuda/test_gpu_graphs.py``.
"""
import pytest

import ember as em
from test_cuda_graphs import _mlp, _program, _same, _train
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture
from test_multi_launch import _TinyGPT


@pytest.mark.parametrize("model_fn,amp", [(_mlp, False), (_TinyGPT, True)],
                         ids=["mlp-float32", "gpt-float16-autocast"])
def test_gpu_graph_replays_equal_the_default_mode(gpu, model_fn, amp):  # noqa: F811
    want = _train(None, model_fn, amp=amp, steps=8, zero_first=True)
    got = _train("reduce-overhead", model_fn, amp=amp, steps=8, zero_first=True)
    assert got[0] == want[0] and _same(got[1], want[1])
    assert all(_same(a, b) for a, b in zip(got[2], want[2]))
    g = _program(got[3]).cuda_graph
    assert g.failed is None, g.failed
    assert g.captures == 1 and g.replays >= 3 and g.graph.graph is not None
    assert em.cuda.memory_reserved() >= g.gp.total_bytes() > 0


def test_gpu_gemm_runs_on_the_current_stream(gpu):  # noqa: F811
    a, b = em.randn(256, 256, device="cuda"), em.randn(256, 256, device="cuda")
    want = (a @ b).cpu().numpy()
    s = em.cuda.Stream()
    with em.cuda.stream(s):
        got = a @ b
    s.synchronize()
    assert got.cpu().numpy().tobytes() == want.tobytes()


def test_gpu_cuda_graph_by_hand_replays_a_forward_and_backward(gpu, tmp_path):  # noqa: F811
    em.manual_seed(0)
    model = em.nn.Sequential(em.nn.Linear(32, 64), em.nn.ReLU(), em.nn.Linear(64, 8)).cuda()
    static_x = em.randn(16, 32, device="cuda")
    s = em.cuda.Stream()
    s.wait_stream(em.cuda.current_stream())
    with em.cuda.stream(s):                     # warm-up on a side stream
        for _ in range(3):
            model(static_x).sum().backward()
    em.cuda.current_stream().wait_stream(s)
    for p in model.parameters():
        p.grad = None
    g = em.cuda.CUDAGraph()
    with em.cuda.graph(g):
        static_y = model(static_x)
        static_y.sum().backward()
    assert em.cuda.memory_reserved() > 0
    for k in range(3):
        x = em.randn(16, 32, device="cuda")
        static_x.copy_(x)
        for p in model.parameters():
            p.grad.zero_()
        g.replay()
        em.cuda.synchronize()
        want = model(x)
        assert static_y.cpu().numpy().tobytes() == want.detach().cpu().numpy().tobytes()
        params = list(model.parameters())
        wg = em.autograd.grad(want.sum(), params)
        for p, w in zip(params, wg):
            assert p.grad.cpu().numpy().tobytes() == w.cpu().numpy().tobytes()
    g.debug_dump(str(tmp_path / "g.dot"))
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    with pytest.raises(RuntimeError, match="default stream"):
        em.cuda.CUDAGraph().capture_begin()
    h = em.cuda.graph_pool_handle()
    g2 = em.cuda.CUDAGraph()
    with em.cuda.graph(g2, pool=h):
        y2 = static_x * 2
    g2.replay()
    em.cuda.synchronize()
    assert y2.cpu().numpy().tobytes() == (static_x * 2).cpu().numpy().tobytes()
