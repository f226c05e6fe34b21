"""The ``multi_launch`` pass (``ember/graph/passes/multi_launch.py``) on the CPU stand-in.

Given a GPU's capabilities, ``ember.compile`` runs ``fuse_cuda`` and then ``multi_launch``:
independent launches of one generated kernel (AdamW's per-parameter updates) become one
node launching the kernel's ``NAME_m`` entry, and so do autocast's casts of parameters
(hoisted to the first one's place, as one generated cast kernel). The kernels run from
their CUDA text on the CPU emulator (``_cuda_emu``), so the training steps below really
execute the multi-launch entry, and their losses and parameters must equal, bit for
bit, the same steps compiled without the pass (one ``NAME_c`` launch per parameter), in
float32 and under float16 autocast (a small GPT-like model: embedding, two pre-norm
causal encoder layers, a head). Grouping keeps data dependence (a launch reading another's
output through a matmul stays out of its group; one whose output is read before the next
launch is not moved), and CPU graphs are untouched.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention, cuda_cache, cuda_gemm
from ember.graph.passes import DEFAULT_PASSES, PASSES
from ember.graph.passes.multi_launch import MultiFusedOp

import _cuda_emu

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")

WITHOUT = [p for p in DEFAULT_PASSES if p != "multi_launch"]


@pytest.fixture
def emu_gpu(fake_cuda, monkeypatch, tmp_path_factory):
    """The stand-in with a GPU's capabilities, CUDA modules run by the emulator (at most 2
    blocks a grid-stride launch; a multi-launch's grid is never cut); yields the
    emulated modules (their ``launches``)."""
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    mods = []
    work = str(tmp_path_factory.getbasetemp())      # NOTE: one .so per text for the session

    def loader(source, name):
        fused = "ember_flash_" not in source
        mods.append(_cuda_emu.EmuModule(source, work, 2 if fused else None))
        return mods[-1]
    monkeypatch.setattr(cuda_cache, "module_loader", loader)
    monkeypatch.setattr(cuda_attention, "_modules", {})
    monkeypatch.setattr(cuda_gemm, "matmul", _matmul)
    return mods


def _matmul(xp, x, y, tf32=False, out=None):
    """cuBLAS's float16 GEMM on the stand-in: float32 sums, rounded once."""
    r = np.matmul(x.astype(np.float32), y.astype(np.float32)).astype(x.dtype)
    if out is None:
        return r
    out[...] = r
    return out


def _launches(mods) -> list:
    return [n for m in mods for n in m.launches]


def _program(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program


def _mlp():
    nn = em.nn
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(),
                         nn.Linear(32, 4))


class _TinyGPT(em.nn.Module):
    def __init__(self, vocab=32, d=32, t=8):
        super().__init__()
        nn = em.nn
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(
            d, 2, 2 * d, dropout=0.0, batch_first=True, norm_first=True) for _ in range(2)])
        self.head = nn.Linear(d, vocab)
        self.t = t

    def forward(self, idx):
        x = self.tok(idx) + self.pos(em.arange(self.t, device=idx.device))
        mask = em.nn.Transformer.generate_square_subsequent_mask(self.t, device=idx.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(x)


def _train(passes, model_fn, amp: bool, steps=3):
    em.manual_seed(0)
    model = model_fn().to("cuda")
    opt = em.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    if isinstance(model, _TinyGPT):
        x = em.randint(0, 32, (2, 8)).to("cuda")
        y = em.randint(0, 32, (2, 8)).to("cuda")
    else:
        x, y = em.randn(8, 16).to("cuda"), em.randint(0, 4, (8,)).to("cuda")

    def step(x, y):
        with em.autocast("cuda", dtype=em.float16, enabled=amp):
            out = model(x)
            loss = em.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                  y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    fn = em.compile(step, passes=passes)
    losses = [float(fn(x, y)) for _ in range(steps)]
    return losses, [p.detach().cpu().numpy() for p in model.parameters()], fn


@pytest.mark.parametrize("model_fn,amp", [(_mlp, False), (_TinyGPT, True)],
                         ids=["mlp-float32", "gpt-float16-autocast"])
def test_step_with_the_pass_equals_the_step_without_bit_for_bit(emu_gpu, model_fn, amp):
    want_losses, want_params, fn0 = _train(WITHOUT, model_fn, amp)
    n0 = len(_launches(emu_gpu))
    losses, params, fn = _train(DEFAULT_PASSES, model_fn, amp)
    got = _launches(emu_gpu)[n0:]
    assert losses == want_losses
    for a, b in zip(params, want_params):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    multi = [n for n in _program(fn).graph.nodes if isinstance(n.op, MultiFusedOp)]
    assert multi and not any(isinstance(n.op, MultiFusedOp) for n in _program(fn0).graph.nodes)
    assert any(n.endswith("_m") for n in got)
    # one launch a group instead of one a member, each compiled call; autocast's weight
    # casts (CuPy's, no generated launch without the pass) become one generated launch
    casts = [n for n in multi if n.op.ops == "cast"]
    assert bool(casts) == amp and all(x in _program(fn).graph.inputs for n in casts
                                      for x in n.inputs)
    saved = sum(-1 if n in casts else len(n.op.kernels) - 1 for n in multi)
    assert saved > 0 and n0 - len(got) > 0 and (n0 - len(got)) % saved == 0


def test_a_launch_reading_a_members_output_stays_out_of_its_group(emu_gpu):
    def g(x):
        return (x * 2.0 + x.tanh()) * x

    def f(a, b, m):
        u, v = g(a), g(b)
        return u, v, g(u @ m)
    a, b, m = (em.randn(16, 16).to("cuda") for _ in range(3))
    eager = f(a, b, m)
    fn0, fn = em.compile(f, passes=WITHOUT), em.compile(f)
    fn0(a, b, m), fn(a, b, m)               # NOTE: the traced calls run eagerly
    want, got = fn0(a, b, m), fn(a, b, m)
    for x, y, z in zip(got, want, eager):
        assert x.cpu().numpy().tobytes() == y.cpu().numpy().tobytes()
        np.testing.assert_allclose(x.cpu().numpy(), z.cpu().numpy(), rtol=1e-5)
    nodes = _program(fn).graph.nodes
    multi = [n for n in nodes if isinstance(n.op, MultiFusedOp)]
    assert len(multi) == 1 and len(multi[0].op.kernels) == 2
    fused = [n for n in nodes if type(n.op).__name__ == "CudaFusedOp"]
    assert len(fused) == 1 and fused[0].op.kernel.name == multi[0].op.kernels[0].name
    at = {id(n): i for i, n in enumerate(nodes)}
    assert at[id(multi[0])] < at[id(fused[0])]


def test_a_launch_whose_output_is_read_before_the_next_member_is_not_moved(emu_gpu):
    def g(x):
        return (x * 2.0 + x.tanh()) * x

    def f(a, b, m):
        u = g(a)
        s = u @ m                       # reads u before the second launch: no group
        return s, g(b + s)
    a, b, m = (em.randn(16, 16).to("cuda") for _ in range(3))
    eager = f(a, b, m)
    fn = em.compile(f)
    fn(a, b, m)
    got = fn(a, b, m)
    for x, z in zip(got, eager):        # NOTE: eager's GEMM sums in another order
        np.testing.assert_allclose(x.cpu().numpy(), z.cpu().numpy(), rtol=1e-5, atol=1e-5)
    nodes = _program(fn).graph.nodes
    assert not any(isinstance(n.op, MultiFusedOp) for n in nodes)
    assert sum(type(n.op).__name__ == "CudaFusedOp" for n in nodes) == 2


def test_cpu_graphs_are_untouched():
    em.manual_seed(0)
    model = _mlp()
    opt = em.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = em.randn(8, 16), em.randint(0, 4, (8,))

    def step(x, y):
        loss = em.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    fn = em.compile(step)
    for _ in range(2):
        fn(x, y)
    assert "multi_launch" in PASSES and "multi_launch" in DEFAULT_PASSES
    assert not any(isinstance(n.op, MultiFusedOp) for n in _program(fn).graph.nodes)


def test_inference_casts_of_large_weights_stay_where_they_are(emu_gpu):
    """Forward only: each float16 weight copy is read once, right after its cast; hoisted,
    all would be alive at once. Only the small casts (biases, the batch) join one launch."""
    em.manual_seed(0)
    nn = em.nn
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to("cuda")
    x = em.randn(4, 1024).to("cuda")

    def f(x):
        with em.no_grad(), em.autocast("cuda", dtype=em.float16):
            return model(x)
    fn = em.compile(f)
    fn(x)
    got = fn(x)
    np.testing.assert_allclose(got.float().cpu().numpy(), f(x).float().cpu().numpy(),
                               rtol=2e-2, atol=2e-2)
    nodes = _program(fn).graph.nodes
    casts = [n for n in nodes if isinstance(n.op, MultiFusedOp) and n.op.ops == "cast"]
    assert len(casts) == 1 and [x.shape for x in casts[0].inputs] == [(4, 1024), (1024,),
                                                                      (1024,)]
    weights = [n for n in nodes if n.op.name == "cast" and n.inputs[0].shape == (1024, 1024)]
    assert len(weights) == 2
