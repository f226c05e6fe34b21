"""``ember.compile(mode="reduce-overhead")``: compiled GPU programs replayed as CUDA graphs.

On the CPU stand-in the :class:`~ember.graph.cuda_graphs.GraphRunner` records the device
steps with the arrays they read and wrote and replays them on those arrays (a graph's
fixed addresses), so what a GPU needs besides the driver's capture is tested here: new
batches copied into the graph's inputs, parameters and optimizer state read and updated
in place, the host steps (optimizer step counts) and their uploads at every call, the
returned loss copied out, new gradients in the graph's buffers, and the fallbacks.
Every training run below must equal the same run compiled in the default mode, bit for
bit. ``tests/cuda/test_gpu_graphs.py`` runs the same checks with real capture on a GPU.
"""
import numpy as np
import pytest

import ember as em
from ember.graph import cuda_graphs

import _cuda_emu
from test_multi_launch import _TinyGPT, emu_gpu  # noqa: F401 - emu_gpu: a fixture

F = em.nn.functional


def _mlp():
    nn = em.nn
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def _program(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program


def _batches(n, gpt=False):
    rng = np.random.default_rng(1)
    if gpt:
        return [(em.tensor(rng.integers(0, 32, (2, 8))).to("cuda"),
                 em.tensor(rng.integers(0, 32, (2, 8))).to("cuda")) for _ in range(n)]
    return [(em.tensor(rng.standard_normal((6, 8)).astype(np.float32)).to("cuda"),
             em.tensor(rng.integers(0, 4, 6)).to("cuda")) for _ in range(n)]


def _train(mode, model_fn=_mlp, amp=False, steps=8, zero_first=False):
    """Losses (each call's returned tensor, kept), parameters and gradients after each
    call, and the compiled function, of ``steps`` AdamW steps on new batches."""
    em.manual_seed(0)
    model = model_fn().to("cuda")
    opt = em.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)

    def step(x, y):
        if zero_first:
            opt.zero_grad(set_to_none=True)
        with em.autocast("cuda", dtype=em.float16, enabled=amp):
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if not zero_first:
            opt.zero_grad(set_to_none=True)
        return loss
    fn = em.compile(step, mode=mode)
    losses, grads = [], []
    for x, y in _batches(steps, model_fn is _TinyGPT):
        losses.append(fn(x, y))
        grads.append([None if p.grad is None else p.grad.cpu().numpy().copy()
                      for p in model.parameters()])
    params = [p.detach().cpu().numpy() for p in model.parameters()]
    return [float(l.cpu()) for l in losses], params, grads, fn


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype
                                      and x.tobytes() == y.tobytes()) for x, y in zip(a, b))


def test_replayed_steps_equal_the_default_mode_bit_for_bit(fake_cuda):
    want = _train(None)
    got = _train("reduce-overhead")
    assert got[0] == want[0] and _same(got[1], want[1])
    g = _program(got[3]).cuda_graph
    # calls: untraced (AdamW makes its state), traced, plain, plain on the static inputs,
    # captured, then replays
    assert g.failed is None and g.captures == 1 and g.replays == 8 - 5
    assert _program(want[3]).cuda_graph is None


def test_the_returned_loss_is_a_copy_and_new_gradients_follow_each_call(fake_cuda):
    # losses collected before later calls ran keep their values (compared after all ran)
    want = _train(None, zero_first=True)
    got = _train("reduce-overhead", zero_first=True)
    assert got[0] == want[0] and _same(got[1], want[1])
    assert all(_same(a, b) for a, b in zip(got[2], want[2]))
    assert all(x is not None for x in got[2][-1])


def test_a_gpt_step_under_float16_autocast_with_host_step_counts(emu_gpu):
    # the stand-in given a GPU's capabilities: generated kernels (run by the emulator),
    # multi-tensor launches, AdamW's step counts computed on the host and uploaded
    want = _train(None, _TinyGPT, amp=True, steps=6)
    got = _train("reduce-overhead", _TinyGPT, amp=True, steps=6)
    assert got[0] == want[0] and _same(got[1], want[1])
    prog = _program(got[3])
    assert prog._hosting and prog.cuda_graph.replays == 1 and prog.cuda_graph.failed is None


def test_a_program_that_draws_random_numbers_stays_plain_and_says_why(fake_cuda):
    # (a draw on a cuda device is a graph break today; a CPU graph holds one: its program
    # given a runner directly)
    em.manual_seed(0)
    drop = em.nn.Dropout(0.5)
    fn = em.compile(lambda x: drop(x).sum())
    x = em.randn(4, 8)
    for _ in range(2):
        fn(x)
    prog = _program(fn)
    notes = []
    g = cuda_graphs.GraphRunner(prog, fake_cuda, note=notes.append)
    assert g.failed and "random" in g.failed
    assert notes and "not replayed as a CUDA graph" in notes[0]
    outs = [float(g.run([x._data])[0]) for _ in range(5)]
    assert g.captures == 0 and len(set(outs)) > 1        # fresh draws every call


def test_cpu_programs_run_as_in_the_default_mode():
    em.manual_seed(0)
    w = em.randn(4, 4)
    fn = em.compile(lambda x: (x @ w).relu().sum(), mode="reduce-overhead")
    x = em.randn(3, 4)
    for _ in range(4):
        got = fn(x)
    assert _program(fn).cuda_graph is None
    assert float(got) == float((x @ w).relu().sum())


def test_an_unknown_mode_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="reduce-overhead"):
        em.compile(lambda x: x, mode="fast")


def test_an_input_read_in_place_that_moves_is_captured_again_then_given_up(fake_cuda,
                                                                          monkeypatch):
    em.manual_seed(0)
    w = em.randn(4).to("cuda")

    def f(x):
        return (x * w).sum()
    fn = em.compile(f, mode="reduce-overhead")
    xs = [em.randn(4).to("cuda") for _ in range(4)]
    for x in xs:
        fn(x)
    g = _program(fn).cuda_graph
    assert g.captures == 1 and g.replays == 0
    # the runner sees w's array change under it (the guards would retrace a new tensor
    # object; here the same program is called with another array in w's slot)
    prog = _program(fn)
    wi = next(i for i, a in enumerate(g.inplace) if a is not None)
    base = [g.inplace[i] if g.static[i] is None else fake_cuda.asarray(np.ones(4, np.float32))
            for i in range(len(g.inplace))]
    ws = {k: fake_cuda.asarray(np.full(4, float(k), np.float32)) for k in (2, 3, 5)}
    r0 = g.replays
    monkeypatch.setattr(cuda_graphs, "MAX_CAPTURES", 2)
    for k in (2, 2, 2):                     # w moves to a new array: captured again
        arrays = list(base)
        arrays[wi] = ws[k]
        out = prog.run(arrays)
        assert float(out[0]) == pytest.approx(4.0 * k)
    assert g.captures == 2 and g.failed is None and g.replays == r0
    assert float(prog.run(list(base[:wi]) + [ws[2]] + list(base[wi + 1:]))[0]) == 8.0
    assert g.replays == r0 + 1
    for k in (3, 3, 5):                     # and moves again: the runner gives up
        arrays = list(base)
        arrays[wi] = ws[k]
        assert float(prog.run(arrays)[0]) == pytest.approx(4.0 * k)
    assert g.failed is not None and "different array" in g.failed and g.captures == 2


# ---------------------------------------------------------------- ember.cuda.CUDAGraph
def test_capture_by_hand_on_the_stand_in_is_refused_saying_why(fake_cuda):
    g = em.cuda.CUDAGraph()
    for call in (lambda: em.cuda.graph(g), em.cuda.graph_pool_handle,
                 lambda: g.capture_begin()):
        with pytest.raises(RuntimeError, match="needs a GPU.*reduce-overhead"):
            call()
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()
    with pytest.raises(RuntimeError, match="capture_begin was not called"):
        g.capture_end()
    assert em.cuda.is_current_stream_capturing() is False


def test_a_cuda_random_draw_inside_a_capture_is_refused(fake_cuda, monkeypatch):
    from ember.device import cuda_graph
    monkeypatch.setattr(cuda_graph._local, "keep", [], raising=False)
    assert em.cuda.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="inside a CUDA graph capture.*repeat"):
        em.randn(3, device="cuda")
    em.randn(3)                         # the CPU's draws are not a device's work
    monkeypatch.setattr(cuda_graph._local, "keep", None)
    assert em.randn(3, device="cuda").shape == (3,)


def test_capture_modes_are_checked():
    from ember.device import cuda_graph
    assert cuda_graph.MODES == {"global": 0, "thread_local": 1, "relaxed": 2}
    with pytest.raises(ValueError, match="capture_error_mode"):
        with cuda_graph.capture(object(), "strict"):
            pass


# ---------------------------------------------------------------- a compiled model
def _train_model(mode, steps=8, accumulate=1):
    """A compiled model (forward and backward graphs) trained with eager loss, backward
    and AdamW; ``accumulate`` forwards before each backward (of their summed losses)."""
    em.manual_seed(0)
    model = _mlp().to("cuda")
    cm = em.compile(model, mode=mode)
    opt = em.optim.AdamW(model.parameters(), lr=1e-2)
    batches = _batches(steps * accumulate)
    losses = []
    for i in range(steps):
        loss = sum(F.cross_entropy(cm(x), y)
                   for x, y in batches[i * accumulate:(i + 1) * accumulate])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.cpu()))
    return losses, [p.detach().cpu().numpy() for p in model.parameters()], cm


def _runners(cm):
    e = [e for e in cm._compiled._cache.values() if not e.eager and e.program is not None][-1] \
        if hasattr(cm, "_compiled") else None
    return e


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_compiled_models_forward_and_backward_graphs_equal_the_default_mode(fake_cuda,
                                                                             accumulate):
    want = _train_model(None, accumulate=accumulate)
    got = _train_model("reduce-overhead", accumulate=accumulate)
    assert got[0] == want[0] and _same(got[1], want[1])
    e = [e for e in _compiled_fn(got[2])._cache.values() if e.program is not None][-1]
    fwd, bwd = e.program.cuda_graph, e.joint.bwd_program.cuda_graph
    assert fwd.failed is None and bwd.failed is None
    if accumulate == 1:                 # forward, backward, forward...: both replay
        assert fwd.replays >= 3 and bwd.replays >= 1
    else:   # two forwards before each backward: the second never overwrites the first's
        assert fwd.replays >= 3 and 0 < fwd.replays < 2 * 8 - 3


def _compiled_fn(cm):
    from ember.graph.compile import CompiledFunction
    for v in vars(cm).values():
        if isinstance(v, CompiledFunction):
            return v
    return next(v for v in cm.__dict__.get("_modules", {}).values()
                if isinstance(v, CompiledFunction))


def test_a_second_backward_after_the_next_replay_is_refused(fake_cuda):
    em.manual_seed(0)
    model = _mlp().to("cuda")
    cm = em.compile(model, mode="reduce-overhead")
    xs = _batches(8)
    for x, _ in xs[:5]:
        cm(x).sum().backward()
    out = cm(xs[5][0]).sum()            # a replay whose saved values ...
    out.backward(retain_graph=True)
    cm(xs[6][0]).sum().backward()       # ... the next replay overwrites
    with pytest.raises(RuntimeError, match="overwrote"):
        out.backward()


def test_an_input_returned_as_is_is_the_callers_tensor_not_the_graphs_buffer(fake_cuda):
    fn = em.compile(lambda x: (x.view(-1), (x * 2).sum()), mode="reduce-overhead")
    xs = [em.randn(2, 3).to("cuda") for _ in range(7)]
    got = [fn(x) for x in xs]
    assert _program(fn).cuda_graph.replays >= 2
    for x, (v, s) in zip(xs, got):        # each call's view and sum kept their values
        assert v.cpu().numpy().tobytes() == x.reshape(-1).cpu().numpy().tobytes()
        assert float(s.cpu()) == pytest.approx(float((x * 2).sum().cpu()))


def test_make_graphed_callables_compiles_warms_up_and_replays(fake_cuda):
    em.manual_seed(0)
    model = _mlp().to("cuda")
    ref = _mlp().to("cuda")
    ref.load_state_dict(model.state_dict())
    x = em.randn(6, 8, device="cuda")
    g = em.cuda.make_graphed_callables(model, (x,))
    assert g is model and all(p.grad is None for p in model.parameters())
    fn = em.cuda.make_graphed_callables(lambda a: (a * 3).relu().sum(),
                                        (em.randn(4, device="cuda"),))
    for xb, _ in _batches(3):
        out = model(xb)
        out.sum().backward()
        want = ref(xb)
        want.sum().backward()
        assert out.detach().cpu().numpy().tobytes() == want.detach().cpu().numpy().tobytes()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert p.grad.cpu().numpy().tobytes() == q.grad.cpu().numpy().tobytes()
    e = [e for e in _compiled_fn(model)._cache.values() if e.program is not None][-1]
    g = e.program.cuda_graph       # the sample input was copied in: no capture again
    assert g.captures == 1 and g.replays >= 5 and e.joint.bwd_program.cuda_graph.replays >= 3
    v = em.randn(4, device="cuda")
    assert float(fn(v).cpu()) == pytest.approx(float((v * 3).relu().sum().cpu()))
    assert _program(fn).cuda_graph.replays >= 1
    with pytest.raises(ValueError, match="sample_args"):
        em.cuda.make_graphed_callables((model, model), ((x,),))


def test_dropout_on_a_cuda_device_compiles_draws_as_eager_and_stays_plain(fake_cuda):
    # the cuda generator is made on the device's first draw, inside the traced call: it
    # is the device's default generator, not the function's own (was a graph break)
    def run(mode):
        em.manual_seed(0)
        model = em.nn.Sequential(em.nn.Linear(8, 8), em.nn.Dropout(0.5)).to("cuda")
        fn = em.compile(lambda x: model(x).sum(), mode=mode) if mode != "eager" else \
            (lambda x: model(x).sum())
        x = em.ones(4, 8).to("cuda")
        return [float(fn(x).cpu()) for _ in range(6)], fn
    want, _ = run("eager")
    got, fn = run("reduce-overhead")
    assert got == want and len(set(got)) > 1
    assert "0 graph break(s)" in str(fn.explain())
    g = _program(fn).cuda_graph
    assert g.failed and "random" in g.failed and g.captures == 0
