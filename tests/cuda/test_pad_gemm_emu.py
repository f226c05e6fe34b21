"""The ``pad_gemm`` pass in a compiled LM-head step, its kernels run from their CUDA text.

On the stand-in given a GPU's ``cuda_kernels`` (``_cuda_emu`` runs the generated kernels;
cuBLAS is ``test_cuda_gemm``'s NumPy model) with padding forced (``PAD_MIN_FLOPS = 1``),
an odd vocabulary's float16 step (head, cross-entropy, backward) is compiled with and
without the pass: the loss and both gradients must be the same bits, and the pass must
leave one copy of the five (the weight, padded once; the loss's backward kernel reads the
logits in the padded product's buffer and writes the logits gradient into a zero-padded
one: ``cuda_pitch``'s ``NAME_rp`` entry).
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_gemm as cg
from ember.graph.passes import DEFAULT_PASSES

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture
from test_cuda_gemm import run_plan

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")
B, T, D, V = 2, 8, 32, 37


def _run(passes, copies):
    """(loss, x.grad, W.grad, copies per call, pad nodes) of the third compiled call."""
    em.manual_seed(0)
    head = em.nn.Linear(D, V, bias=False).cuda()
    x = (em.randn(B, T, D) * 0.5).cuda().requires_grad_()
    tgt = em.randint(0, V, (B, T)).cuda()

    def step(x, tgt):
        with em.autocast("cuda", dtype=em.float16):
            loss = em.nn.functional.cross_entropy(head(x).view(-1, V), tgt.view(-1))
        loss.backward()
        return loss
    fn = em.compile(step, passes=passes)
    for _ in range(3):
        x.grad, head.weight.grad = None, None
        copies.clear()
        loss = fn(x, tgt)
    names = [n.op.name for e in fn._cache.values() if getattr(e, "program", None) is not None
             for n in e.program.graph.nodes]
    return (loss.detach().cpu().numpy(), x.grad.cpu().numpy(),
            head.weight.grad.cpu().numpy(), len(copies), names)


def test_lm_head_step_pads_once_with_the_same_bits(emu_gpu, monkeypatch):  # noqa: F811
    copies = []
    real = cg._copy

    def copy(dst, src):
        copies.append(dst.nbytes)
        real(dst, src)
    monkeypatch.setattr(cg, "_copy", copy)
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    monkeypatch.setattr(cg, "_cublas", lambda p: run_plan(dict(p, copy=False)))
    without = [p for p in DEFAULT_PASSES if p != "pad_gemm"]
    *want, n_before, names0 = _run(without, copies)
    launched = len(_launched(emu_gpu, ""))
    *got, n_after, names = _run(DEFAULT_PASSES, copies)
    assert not {"pad_gemm_rows", "fused_pitched", "matmul_pitched"} & set(names0)
    # the weight padded once; the loss's backward kernel writes dlogits padded, reading
    # the logits where the padded product left them (its NAME_rp entry)
    assert names.count("pad_gemm_rows") == 1 and "pad_gemm" not in names
    assert names.count("fused_pitched") == 1 and names.count("matmul_pitched") == 1
    assert [n for n in _launched(emu_gpu, "")[launched:] if n.endswith("_rp")]
    assert n_before == 5 and n_after == 1       # copies: the weight, once
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert np.isfinite(got[0]) and np.abs(got[2]).sum() > 0


def test_gpt_steps_keep_their_bits_with_the_pass(emu_gpu, monkeypatch):  # noqa: F811
    """Four compiled AdamW steps of ``bench/cuda_compile.py``'s GPT (one layer, d=32,
    vocab 67, float16 autocast): the losses (which read every earlier step's updates,
    the LM head's dx and dW included) are the same bits with and without the pass."""
    import os
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "bench")
    monkeypatch.syspath_prepend(bench)
    from cuda_compile import _step
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    monkeypatch.setattr(cg, "_cublas", lambda p: run_plan(dict(p, copy=False)))
    res = {}
    for label, passes in (("without", [p for p in DEFAULT_PASSES if p != "pad_gemm"]),
                          ("with", DEFAULT_PASSES)):
        step, inputs = _step(em, 1, 32, 1, 8, 2, V + 30)
        fn = em.compile(step, passes=passes)
        with np.errstate(all="ignore"):
            res[label] = [fn(*inputs).detach().cpu().numpy().tobytes() for _ in range(4)]
        names = {n.op.name for e in fn._cache.values()
                 if getattr(e, "program", None) is not None for n in e.program.graph.nodes}
        assert ("fused_pitched" in names) == (label == "with")
    assert res["with"] == res["without"] and len(set(res["with"])) == 4
