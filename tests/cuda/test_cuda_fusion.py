"""Compiled graphs on a GPU-like device run the fusion pass's groups as CUDA kernels.

On the CPU stand-in with the GPU's capabilities (no ``host_kernels``, ``cuda_kernels``),
``ember.compile`` runs ``fuse_cuda`` in place of ``fuse``: every group renders to CUDA C,
which NVRTC compiles here (the real compiler, no GPU needed), and each fused node launches
through :mod:`ember.codegen.cuda_launch`. A fake module stands in for ``cupy``'s: its
functions read the launch's argument list the way the rendered kernel does (pointers at
the views' offsets, the shape and per-input strides, ``n``) and evaluate the kernel IR
with NumPy (:mod:`ember.codegen.interp`). So a wrong grid, argument order, stride or
merged axis changes the losses, which must equal the CPU's. The same programs on a GPU:
``tests/cuda/test_gpu_kernels.py``.
"""
import ctypes
import re
from dataclasses import replace

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention, cuda_cache, cuda_launch, interp, nvrtc
from ember.codegen.ir import Kernel, ReduceKernel
from ember.device.cuda_strict import host_view

NVRTC = nvrtc.available() and bool(nvrtc.include_dirs())


class FakeModule:
    """``cupy.cuda.function.Module`` for CI: launches run the kernel IR on the arguments."""

    def __init__(self, kernels, launches):
        self.kernels = {k.name: k for k in kernels}
        self.launches = launches

    def get_function(self, name):
        entry = name[-2:] if name not in self.kernels and name[-2:] in ("_c", "_r", "_m") \
            else ""
        if name not in self.kernels and "_cf_" in name:     # a column sum's final launch
            entry, name_k = "_cf", name.split("_cf_")[0]
        k = self.kernels[name_k if entry == "_cf" else name[:-2] if entry else name]
        run = {"_c": _emulate_contiguous, "_r": _emulate_rows, "_m": _emulate_multi,
               "_cf": _emulate_col_final, "": _emulate}[entry]

        def fn(grid, block, args, shared_mem=0):
            self.launches.append((name, grid, block))
            run(k, grid, block, [host_view(a) for a in args])
        return fn


def _emulate_rows(k, grid, block, args):
    """The ``NAME_r`` entry: inputs contiguous, one element, a row of ``cols`` repeated
    (bit ROW_BIT + j) or one value per row of ``cols`` (bit COL_BIT + j)."""
    from ember.codegen.render_cuda_ew import COL_BIT, ROW_BIT
    nin, nout = len(k.inputs), len(k.outputs)
    ins, outs = args[:nin], args[nin:nin + nout]
    flags, n, cols = int(args[-3]), int(args[-2]), int(args[-1])
    assert isinstance(k, Kernel) and all(n == o.size for o in outs) and n % cols == 0
    idx = np.arange(n)
    views = []
    for j, a in enumerate(ins):
        flat = np.ravel(a)
        if flags >> (ROW_BIT + j) & 1:
            assert a.size == cols
            views.append(flat[idx % cols])
        elif j < ROW_BIT - COL_BIT and flags >> (COL_BIT + j) & 1:
            assert a.size == n // cols
            views.append(flat[idx // cols])
        elif flags >> j & 1:
            views.append(np.broadcast_to(flat[:1], (n,)))
        else:
            assert a.size == n
            views.append(flat)
    interp.run_elementwise(_at(k, (n,)), views, out=outs[0].reshape(-1),
                           extra_outs=[o.reshape(-1) for o in outs[1:]])


def _emulate_contiguous(k, grid, block, args):
    """An elementwise kernel's ``NAME_c`` entry: inputs contiguous or one element (flag).
    NOTE: like the GPU, the shape comes from the launch, not from ``k`` (groups with the
    same text share one kernel name, whatever their shapes: ``fuse_cuda.content_name``)."""
    nin, nout = len(k.inputs), len(k.outputs)
    ins, outs = args[:nin], args[nin:nin + nout]
    flags, n = int(args[-2]), int(args[-1])
    assert isinstance(k, Kernel) and all(n == o.size for o in outs)
    assert block == (cuda_launch.BLOCK,) and 1 <= grid[0] <= cuda_launch.MAX_BLOCKS_EW
    views = []
    for j, a in enumerate(ins):
        views.append(np.lib.stride_tricks.as_strided(a, shape=(n,), strides=(
            0 if flags >> j & 1 else a.itemsize,), writeable=False))
    interp.run_elementwise(_at(k, (n,)), views, out=outs[0], extra_outs=list(outs[1:]))


def _at_address(ptr: int, dtype, count: int):
    """The ``count`` elements of ``dtype`` at address ``ptr`` (a stand-in array)."""
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(int(ptr)), dtype=dtype)


def _emulate_multi(k, grid, block, args):
    """The ``NAME_m`` entry (``render_cuda_ew.render_multi_entry``): each record of the
    table is one ``NAME_c`` launch over the arrays at its pointers; the records' first
    blocks ascend and the grid is their total."""
    table, nrec = args
    nin, nout = len(k.inputs), len(k.outputs)
    rows = np.asarray(table).reshape(int(nrec), nin + nout + 3)
    firsts = [int(r[-1]) for r in rows]
    assert firsts[0] == 0 and firsts == sorted(firsts) and firsts[-1] < grid[0]
    for rec in rows:
        flags, n = int(rec[-3]), int(rec[-2])
        ins = [_at_address(rec[j], s.dtype.np, 1 if flags >> j & 1 else n)
               for j, s in enumerate(k.inputs)]
        outs = [_at_address(rec[nin + j], o[0].np, n) for j, o in enumerate(k.outputs)]
        if n:
            _emulate_contiguous(k, (1,), block, ins + outs + [flags, n])


def _at(k, loop):
    """``k`` over the launch's loop shape (the interpreter reads only the shapes)."""
    ins = tuple(replace(s, strides=(0,) * len(loop)) for s in k.inputs)
    if isinstance(k, ReduceKernel):
        return replace(k, inputs=ins, shape=loop, naxes=1,
                       out=replace(k.out, shape=loop if k.full else loop[:-1]))
    return replace(k, inputs=ins, out=replace(k.out, shape=loop))


def _emulate_col_final(k, grid, block, args):
    """``NAME_cf_<dtype>`` (``codegen/cuda_rowcols.py``): ``C`` columns of the partial
    rows from column ``off`` added over ``nparts`` rows, rounded to the output's dtype."""
    part, out, nparts, ld, off, c = args
    nparts, ld, off, c = int(nparts), int(ld), int(off), int(c)
    assert part.shape == (nparts, ld) and out.size == c and off + c <= ld
    out[...] = part[:, off:off + c].astype(np.float64).sum(0).astype(out.dtype)


def _emulate_cols(k, loop, views, part, nparts):
    """A ColReduceKernel's partial rows: row 0 the column sums (over every row, in the
    kernel's layout: by dtype), the others zero (as blocks that had no rows)."""
    from ember.codegen.cuda_rowcols import _layout, acc_dtype
    acc = acc_dtype(k.cols[0][0])
    kk = _at(k, loop)
    kk = replace(kk, extra=kk.extra + tuple((acc, e, True) for _d, e in kk.cols), cols=())
    full = [np.empty(loop, acc.np) for _ in k.cols]
    outs = [np.empty(loop if f else loop[:-1], d.np) for d, _e, f in kk.outputs]
    interp.run_reduction(kk, views, out=outs[0], extra_outs=outs[1:len(k.outputs)] + full)
    m = loop[-1]
    assert part.size == int(nparts) * len(k.cols) * m
    p = part.reshape(int(nparts), len(k.cols) * m)
    p[...] = 0
    for q, j in enumerate(_layout(k)):
        p[0, q * m:(q + 1) * m] = full[j].reshape(-1, m).astype(np.float64).sum(0)


def _emulate(k, grid, block, args):
    nin, nout = len(k.inputs), len(k.outputs)
    ins, outs = args[:nin], args[nin:nin + nout]
    cols = getattr(k, "cols", ())
    if cols:                # the partials after the outputs, nparts last
        part, nparts = args[nin + nout], args[-1]
        args = args[:nin + nout] + args[nin + nout + 1:-1]
    shape, strides, ndim, n = args[nin + nout:]
    ndim, n, loop = int(ndim), int(n), tuple(int(s) for s in shape)
    assert len(loop) == ndim and strides.size == max(nin * ndim, 1)
    assert block == (cuda_launch.BLOCK,) and 1 <= grid[0] <= max(
        cuda_launch.MAX_BLOCKS, cuda_launch.MAX_BLOCKS_EW)
    rows = int(np.prod(loop[:-1])) if isinstance(k, ReduceKernel) else int(np.prod(loop))
    assert n == rows, (k.name, n, loop)
    assert outs[0].size == (rows if isinstance(k, ReduceKernel) and not k.outputs[0][2]
                            else int(np.prod(loop))), (k.name, outs[0].shape, loop)
    views = []
    for j, a in enumerate(ins):
        st = [int(s) * a.itemsize for s in strides[j * ndim:(j + 1) * ndim]]
        views.append(np.lib.stride_tricks.as_strided(a, shape=loop, strides=st,
                                                     writeable=False))
    if cols:
        _emulate_cols(k, loop, views, part, nparts)
    run = interp.run_reduction if isinstance(k, ReduceKernel) else interp.run_elementwise
    run(_at(k, loop), views, out=outs[0], extra_outs=list(outs[1:]))


@pytest.fixture
def gpu_like(fake_cuda, monkeypatch):
    """The stand-in with a GPU's capabilities and a fake module loader that compiles each
    source with NVRTC (when installed); yields ``(sources, launches)``."""
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    made, multis, sources, launches = {}, {}, [], []
    orig = cuda_launch.CudaModule.__init__

    def init(self, kernels, strategy="block", name="ember_cuda", multi=False):
        orig(self, kernels, strategy, name, multi)
        made[self.source] = self.kernels
        multis[self.source] = self.multi

    def loader(source, name):
        if source not in made:               # the attention kernels (cuda_attention)
            from test_cuda_attention import FlashModule
            return FlashModule(source)
        sources.append(source)
        if NVRTC:
            ptx = cuda_cache.ptx(source, name, "compute_90")
            entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
            assert entries == {k.name for k in made[source]} | {
                k.name + "_c" for k in made[source] if isinstance(k, Kernel)} | {
                k.name + "_r" for k in made[source] if cuda_launch.wants_rows(k)} | {
                n + "_m" for n in multis[source]} | {
                f"{k.name}_cf_{d.name}" for k in made[source] for d, _ in getattr(k, "cols", ())}
            _, log = nvrtc.compile_sass(source, name)     # ptxas: sm_90 machine code
            assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log
        return FakeModule(made[source], launches)
    monkeypatch.setattr(cuda_launch.CudaModule, "__init__", init)
    monkeypatch.setattr(cuda_cache, "module_loader", loader)
    monkeypatch.setattr(cuda_attention, "_modules", {})
    yield sources, launches


def _mlp_losses(dev, steps=3):
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(64, 256), em.nn.GELU(), em.nn.Linear(256, 10)).to(dev)
    opt = em.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = em.randn(128, 64).to(dev), em.randint(0, 10, (128,)).to(dev)

    def step(x, y):
        loss = em.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    f = em.compile(step)
    return [float(f(x, y)) for _ in range(steps)], str(f.explain())


def _cnn_losses(dev, steps=3):
    nn = em.nn
    em.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).to(dev)
    opt = em.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x, y = em.randn(16, 1, 8, 8).to(dev), em.randint(0, 10, (16,)).to(dev)

    def step(x, y):
        loss = em.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    f = em.compile(step)
    return [float(f(x, y)) for _ in range(steps)], str(f.explain())


def _block_grads(dev):
    nn, F = em.nn, em.nn.functional
    em.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                       norm_first=True).to(dev)
    x = em.randn(2, 16, 32).to(dev)

    def f(x):
        y = layer(x, is_causal=True, src_mask=nn.Transformer.generate_square_subsequent_mask(
            16, device=dev))
        loss = F.log_softmax(y, -1).mean()
        loss.backward()
        return loss
    cf = em.compile(f)
    cf(x)                     # NOTE: the traced call runs eagerly; the second runs the graph
    for p in layer.parameters():
        p.grad = None
    loss = float(cf(x))
    grads = [p.grad.cpu().numpy() for p in layer.parameters()]
    return loss, grads, str(cf.explain())


def test_mlp_step_launches_cuda_kernels_and_matches_cpu(gpu_like):
    sources, launches = gpu_like
    want, _ = _mlp_losses("cpu")
    got, report = _mlp_losses("cuda")
    assert "fuse_cuda" in report and sources and launches
    names = {n for n, _, _ in launches}
    assert len(names) >= 3, names        # GELU (fwd, bwd), softmax rows, AdamW's update...
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cnn_step_launches_cuda_kernels_and_matches_cpu(gpu_like):
    sources, launches = gpu_like
    want, _ = _cnn_losses("cpu")
    got, report = _cnn_losses("cuda")
    assert "fuse_cuda" in report and launches
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_transformer_block_launches_cuda_kernels_and_matches_cpu(gpu_like):
    sources, launches = gpu_like
    want_loss, want_grads, _ = _block_grads("cpu")
    em.manual_seed(0)
    loss, grads, report = _block_grads("cuda")
    assert "fuse_cuda" in report and launches
    assert any("ember_block_reduce" in s for s in sources)    # layer norm rows: a block each
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for a, b in zip(grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are not installed "
                    "(pip install 'ember[nvrtc]')")
def test_every_fused_group_compiles_with_nvrtc(gpu_like):
    sources, _ = gpu_like
    counts = []
    for run in (_mlp_losses, _cnn_losses, _block_grads):
        before = len(sources)
        run("cuda")
        counts.append(sum(len(re.findall(r'extern "C" __global__', s))
                          for s in sources[before:]))
    # each source went through NVRTC in the loader (PTX entries == the kernels' names)
    assert all(c >= 2 for c in counts), counts
    assert any("__shfl_down_sync" in s for s in sources)


def test_a_cpu_graph_keeps_the_c_fusion_pass(fake_cuda):
    _, report = _mlp_losses("cuda", steps=1)          # the stand-in: host kernels
    assert "fuse_cuda" not in report


def test_launch_plans_collapse_dims_so_kernels_skip_divisions():
    from ember import dtypes as dt
    from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, Reduce
    x = np.ones((8, 16, 32), np.float32)
    b = np.ones(32, np.float32)
    k = Kernel([InputSpec(dt.float32, (512, 32, 1)), InputSpec(dt.float32, (0, 0, 1))],
               OutSpec(dt.float32, (8, 16, 32)), Load(0) + Load(1))
    *_, args, _ = cuda_launch.launch_plan(k, [x, b])
    assert list(args[-4]) == [128, 32] and list(args[-3]) == [32, 1, 0, 1]   # bias rows
    *_, args, _ = cuda_launch.launch_plan(k, [x, x])
    assert list(args[-4]) == [4096] and int(args[-2]) == 1          # one dim: no division
    r = ReduceKernel([InputSpec(dt.float32, (512, 32, 1))], (8, 16, 32), 1,
                     [Reduce("sum", Load(0))], None, OutSpec(dt.float32, (8, 16)))
    grid, _, args, outs = cuda_launch.launch_plan(r, [x])
    assert list(args[-4]) == [128, 32] and int(args[-1]) == 128 and outs[0].shape == (8, 16)
    src = cuda_launch.render_cuda_many([k])
    assert "if (ndim == 1) {" in src


def test_a_large_lone_elementwise_op_gets_a_generated_kernel(gpu_like, monkeypatch):
    from ember.codegen import cuda_eager
    _, launches = gpu_like
    monkeypatch.setattr(cuda_eager, "THRESHOLD", 4096)
    f = em.compile(lambda x: em.exp(x))
    for n, fused in ((4096, True), (4095, False)):
        x = em.randn(n).to("cuda")
        f(x)                                        # the traced call runs eagerly
        before = len(launches)
        np.testing.assert_allclose(f(x).cpu().numpy(), np.exp(x.cpu().numpy()), rtol=1e-6)
        assert (len(launches) > before) == fused, (n, launches[before:])
