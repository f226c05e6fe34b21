"""A compiled program's device steps replayed as one CUDA graph (``mode="reduce-overhead"``).

``ember.compile(step, mode="reduce-overhead")`` (PyTorch's name) gives a program on a
``cuda`` device a :class:`GraphRunner`. Its calls go:

1. a plain run (the program's first);
2. a plain run on *static inputs*: each device input that was a new array at this call
   (a batch) is copied into a buffer of the runner's own, the ones that were the very
   same arrays both times (parameters, gradients, optimizer moments: updated in place)
   are read where they are. It runs on the runner's stream and private pool
   (:class:`ember.device.cuda_graph.GraphPool`), so every layout-keyed launch plan the
   capture will need exists;
3. the capture: the host steps run (optimizer step counts, with NumPy), then the device
   steps are captured as one graph and launched;
4. every later call: the new batch copied into the static inputs, the host steps and
   their one upload, one graph launch. The Python time of a GPT step's ~250 launches
   is gone; what is left is the guards, the input copies and the write-backs.

Outputs live in the graph's memory and are rewritten by the next replay. The tensors a
call *returns* are copies (a loss: one small copy) so holding them is safe; new
gradients (``p.grad`` after ``zero_grad(set_to_none=True)`` inside the step) are the
graph's buffers, as PyTorch's are under CUDA graphs: a reference to last step's
``.grad`` sees this step's values. In-place state (parameters, moments) is the user's
own arrays, updated in place as before.

A compiled *model* (``ember.compile(model, mode="reduce-overhead")``, eager loss,
``backward()`` and optimizer) has a forward and a backward program, each with a runner.
The forward's saved values stay in its graph's buffers for the backward graph, so a
forward replays only once the previous replay's backward has run (or its outputs are
gone): two forwards before one backward (gradient accumulation) run the second plainly,
and a second ``backward(retain_graph=True)`` after the next replay raises instead of
reading overwritten values. The backward captures once the forward has a graph, runs
plainly when fed by a plain forward, and its gradients are copied out (autograd
accumulates into them later).

Memory: ``ember.cuda.memory_allocated()`` is the default mode's at every point of a
step — live tensors (parameters, gradients, optimizer state, the returned copies) and,
while its backward is pending, a replayed forward's saved values. The graph's own buffers
(the static input copies, intermediates) are no tensors' memory, as PyTorch's private
pool's are not (its static inputs are non-owning once recorded): on a GPU they count in
``memory_reserved()``. Replays allocate nothing, so neither grows across replays.

The runner falls back to plain runs, and says why in ``explain()``, when the program
cannot be a graph: a random op drawn on the host (its draws would repeat; the draws a GPU
graph generates on the device, :mod:`ember.graph.passes.philox` — uniform, Bernoulli
with a number or tensor ``p``, normal, float64 ones too, and int32/int64 ``randint`` —
read their (seed, offset) from a device array refilled before each replay, so they do
not; ``randperm``, ``exponential_`` and other dtypes' integer draws stay on the host), a
capture the
driver refuses (an op that waits for the device, e.g. a data-dependent shape), or an input
read in place that moved (a parameter replaced: it captures again, at most
:data:`MAX_CAPTURES` times).

On the CPU stand-in (``EMBER_FAKE_CUDA``) there is no driver to capture with: the runner
*records* the device steps with the arrays they read and wrote and a replay runs those
steps again on the same arrays, writing into the recorded outputs — the addresses-fixed
semantics of a graph, so the staging, host steps, output copies and fallbacks above are
tested in CI.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from ..autograd.grad_mode import state as _state
from ..device.base import _backends

__all__ = ["GraphRunner", "MODES", "attach", "MAX_CAPTURES"]

#: ``ember.compile`` modes that replay device programs as CUDA graphs (PyTorch's).
MODES = ("reduce-overhead", "max-autotune")

#: captures of one program before it stays plain (an input read in place kept moving).
MAX_CAPTURES = 3

#: the capture's ``cudaStreamCaptureMode`` (``$EMBER_CUDA_GRAPH_MODE``): ``relaxed`` as
#: CuPy's default, because the private pool may ``cudaMalloc`` during a capture, which
#: the stricter modes refuse; CuPy's device-to-host reads synchronize the stream, which
#: fails a capture in every mode, so none is recorded with stale data.
CAPTURE_MODE = os.environ.get("EMBER_CUDA_GRAPH_MODE", "relaxed")


def attach(prog, copy_outputs, note=None, after=None, n_args=0) -> "GraphRunner | None":
    """Give ``prog`` a :class:`GraphRunner` when it runs on a cuda device; returns it.
    ``copy_outputs``: positions of outputs the caller hands out (copied at each call);
    ``note(text)``: where to say why the program stays plain; ``after``: the forward
    program's runner when ``prog`` is its backward (module doc: compiled models);
    ``n_args``: the leading inputs that are the call's arguments (always copied into the
    graph's buffers, as PyTorch's non-static inputs: the same batch tensor passed twice
    must not pin the graph to it)."""
    be = _backends.get("cuda")
    if be is None or prog.xp is not be.xp or prog.alloc is not be.allocator or prog.parallel:
        return None
    prog.cuda_graph = GraphRunner(prog, be, copy_outputs, note, after, n_args)
    return prog.cuda_graph


class GraphRunner:
    """Runs :class:`~ember.graph.executor.Program` ``prog`` as a CUDA graph (module doc)."""

    def __init__(self, prog, backend, copy_outputs=(), note=None, after=None, n_args=0):
        self.p = prog
        self.be = backend
        # NOTE: an output that is an input (returned as is) is the caller's own memory
        self.copy_outputs = frozenset(k for k in copy_outputs
                                      if prog.output_ids[k] not in prog.input_ids)
        self.note = note or (lambda text: None)
        self.calls = 0
        self.captures = 0
        self.replays = 0
        self.failed = None          # why the program stays plain
        self.prev = None            # the last plain call's input keys
        self.prev_arrays = None     # ... and its arrays, held until the staging call
        self.static = None          # per input: None (read in place / host) or its buffer
        self.inplace = None         # per input: the array read in place, or None
        self.graph = None           # Captured (GPU) or a _Recording (stand-in)
        self.fresh = ()             # ((slot, host var id, device buffer), ...)
        self.host_in = ()           # ((input position, device copy), ...) of CPU inputs
        self.raw = None             # the graph's output values
        self.ins = frozenset(prog.input_ids)
        at = {v: k for k, v in enumerate(prog.input_ids)}
        # NOTE: handed-out outputs that are inputs; a forward's saved values keep the
        # graph's buffers (its backward graph reads them there)
        self.out_inputs = tuple((at[prog.output_ids[j]], j) for j in sorted(set(copy_outputs))
                                if prog.output_ids[j] in at)
        self.gp = None              # a GPU's GraphPool, made when first needed
        self.after = after          # a backward's forward runner: capture once it has
        self.n_args = n_args        # leading inputs always staged (the call's arguments)
        self.replayed = False       # whether the last call ran on the static inputs
        #                             (staged, captured or replayed): its outputs may be
        #                             the graph's buffers or views of the static inputs
        self.epoch = 0              # such calls so far (a forward's saved values' version)
        self.pending = None         # a forward: weakref to the last replay's pending user
        self.held = 0               # a forward: bytes of its saved values (counted, held)
        # NOTE: a device draw's key (passes/philox.py) is a host step run before each replay
        random = [n.params.get("what", n.op.name) for n in prog.graph.nodes
                  if getattr(n.op, "random", False) and
                  not getattr(n.op, "device_random", False)]
        if random:
            self._give_up(f"it draws random numbers on the host ({random[0]}): a graph would "
                          f"replay the same draws (a GPU graph makes its uniform, Bernoulli, "
                          f"normal and int32/int64 randint draws on the device)")

    # ------------------------------------------------------------------ calls
    def run(self, arrays, hold=None) -> list:
        self.replayed = False
        if self.failed is not None or _state.profiler is not None or self._busy():
            return self.p.run_plain(arrays, hold)
        if self.graph is not None:
            if self._in_place_ok(arrays):
                self.replays += 1
                self.epoch += 1
                self.replayed = True
                return self._replay(arrays)
            if self.after is not None:          # NOTE: a backward fed by a plain forward
                return self.p.run_plain(arrays, hold)
            self._drop("an input the graph reads in place is a different array now")
            if self.failed is not None:
                return self.p.run_plain(arrays, hold)
        self.calls += 1
        keys = [_key(a, self.p.xp) for a in arrays]
        if self.prev is None:
            # NOTE: its arrays are held till the next call, so no new array there can take
            # one's address (a fresh batch or lifted lr at a freed one's address would look
            # read in place, then move: the graph dropped, captured again, given up)
            self.prev, self.prev_arrays = keys, list(arrays)
            return self.p.run_plain(arrays, hold)
        self.replayed = True
        self.epoch += 1
        if self.static is None:
            self._stage(arrays, keys)
            self.prev_arrays = None
            with self._stream():
                outs = self.p.run_plain(self._inputs(arrays), hold)
            return self._hand_out(self._own(outs, arrays))
        return self._capture(arrays, hold)

    def _busy(self) -> bool:
        """Whether this call must not replay: a forward whose last replay's saved values
        still wait for their backward (a replay would overwrite them: two forwards, then
        one backward), or a backward whose forward has no graph yet (its saved values
        are new arrays each call)."""
        if self.after is not None:
            return self.after.graph is None
        user = self.pending() if self.pending is not None else None
        return user is not None and not user.consumed

    def _stream(self):
        """The runner's stream and private pool (GPU; nothing on the stand-in)."""
        rt = self.be.runtime
        if rt.is_fake:
            return contextlib.nullcontext()
        if self.gp is None:
            from ..device.cuda_graph import GraphPool
            self.gp = GraphPool(rt.cupy)
            self.be.allocator.graph_pools.add(self.gp)
        return self.gp.use()

    # ------------------------------------------------------------------ staging
    def _stage(self, arrays, keys) -> None:
        """Decide per input: read in place (the same array at the last two calls) or
        copied into a buffer of the runner's own (allocated from its pool)."""
        xp = self.p.xp
        self.static, self.inplace = [], []
        with self._stream():
            for j, (a, k, k0) in enumerate(zip(arrays, keys, self.prev)):
                if k is None:                       # a host (NumPy) input
                    self.static.append(None)
                    self.inplace.append(None)
                elif k == k0 and j >= self.n_args:
                    self.static.append(None)
                    self.inplace.append(a)
                else:
                    self.static.append(xp.empty(a.shape, a.dtype))
                    self.inplace.append(None)

    def _inputs(self, arrays) -> list:
        """``arrays`` with the staged inputs copied into their buffers."""
        out = list(arrays)
        for k, s in enumerate(self.static):
            if s is not None:
                if arrays[k] is not s:
                    s[...] = arrays[k]
                out[k] = s
        return out

    def _in_place_ok(self, arrays) -> bool:
        """Whether every input read in place is where the graph reads it."""
        xp = self.p.xp
        for a, keep in zip(arrays, self.inplace):
            if keep is not None and a is not keep and _key(a, xp) != _key(keep, xp):
                return False
        return True

    def _drop(self, why: str) -> None:
        self.graph, self.static, self.inplace, self.prev = None, None, None, None
        self.prev_arrays = None
        self.fresh, self.host_in, self.raw = (), (), None
        self.calls = 0
        if self.captures >= MAX_CAPTURES:
            self._give_up(f"{why}, after {self.captures} captures")
        else:
            self.note(f"CUDA graph dropped ({why}): captured again in two calls")

    def _give_up(self, why: str) -> None:
        self.failed = why
        # NOTE: what a graph would have read goes (a caller's local copy may live on)
        self.graph, self.static, self.inplace, self.prev, self.raw = None, None, None, None, None
        self.fresh, self.host_in, self.gp, self.prev_arrays = (), (), None, None
        self.note(f"not replayed as a CUDA graph: {why}")

    # ------------------------------------------------------------------ capture
    def _capture(self, arrays, hold=None) -> list:
        p = self.p
        self.captures += 1
        with self._stream():
            ins = self._inputs(arrays)
            vals, own = p.bind(ins)
            self.host_in = tuple((k, vals[p.input_ids[k]]) for k in p._host_inputs)
            try:
                p.run_host(vals, own)
                self.fresh = tuple((slot, vid, vals[slot]) for slot, vid in p._uploads.fresh)
                if self.gp is not None:
                    from ..device.cuda_graph import capture
                    with capture(self.gp, CAPTURE_MODE) as got:
                        p.run_device(vals, own)
                    self.graph = got
                    got.launch(self.gp.stream)
                else:
                    rec = _Recording(p.nslots)
                    p.run_device(vals, own, rec)
                    self.graph = rec
            except Exception as e:   # noqa: BLE001 - any refusal: run plainly from now on
                p.alloc.current -= sum(own)
                self._give_up(f"the capture failed ({type(e).__name__}: {e})")
                self.graph = None
                return p.run_plain(ins, hold)
            self.raw = [vals[i] for i in p.output_ids]
            outs = p.finish(vals, own, hold)
            self.held = p.last_held
        return self._hand_out(self._own(outs, arrays))

    # ------------------------------------------------------------------ replay
    def _replay(self, arrays) -> list:
        p = self.p
        # NOTE: the saved values (the graph's buffers) count as allocated till the
        # backward's Held releases them, as the default mode's do: memory_allocated is
        # the same in both modes at every point of a step (module doc)
        p.last_held = self.held
        if self.held:
            p.alloc.track(self.held)
        with self._stream():
            ins = self._inputs(arrays)
            vals = p.bind_host(ins)
            for k, dev in self.host_in:
                self.be.upload_into(dev, np.asarray(arrays[k], dtype=dev.dtype))
                vals[p.input_ids[k]] = dev
            if p._hosting:
                p.run_host(vals, None, fresh=self.fresh)
            if self.gp is not None:
                self.graph.launch(self.gp.stream)
            else:
                self.graph.replay(p.xp)
            live = p.hostv | self.ins
            for vid, r in zip(p.output_ids, self.raw):
                if vid not in live:             # NOTE: the graph's buffers
                    vals[vid] = r
            outs = p.collect(vals)
        return self._hand_out(self._own(outs, arrays))

    def _own(self, outs, arrays) -> list:
        """``outs`` with each output that *is* a staged input (returned as is) the caller's
        array again, not the runner's buffer."""
        for k, vid in self.out_inputs:
            if self.static[k] is not None:
                outs[vid] = arrays[k]
        return outs

    def _hand_out(self, outs) -> list:
        """The outputs the caller hands out, copied (see the module doc)."""
        if not self.copy_outputs:
            return outs
        outs = list(outs)
        nd = self.p.xp.ndarray
        for k in self.copy_outputs:
            o = outs[k]
            if o.__class__ is nd or isinstance(o, nd):
                outs[k] = o.copy()
        return outs


class _Recording:
    """The stand-in's graph: each device step with the arrays it read and wrote; a replay
    runs the steps again (:func:`~.executor._exec`) on those arrays and writes each
    result into the array the recorded run left it in (a graph's fixed addresses)."""

    __slots__ = ("steps", "slots")

    def __init__(self, nslots: int):
        self.steps = []
        self.slots = [None] * nslots

    def step(self, s, vals, own, alloc, xp, free: bool = True) -> None:
        """Run executor step ``s`` as :func:`~.executor._exec` does, recording the arrays
        it read (argument, buffer and output-buffer slots) and its outputs."""
        from .executor import _exec, release
        reads = [(i, vals[i]) for i in s.args]
        if s.buf >= 0:
            reads.append((s.buf, vals[s.buf]))
        if s.bufs is not None:
            reads += [(b, vals[b]) for b in s.bufs if b >= 0]
        _exec(s, vals, own, alloc, xp, free=False)
        self.steps.append((s, reads, [vals[o] for o in s.outs]))
        if free:
            release(s, vals, own, alloc)

    def replay(self, xp) -> None:
        from .executor import _exec
        vals = self.slots
        for s, reads, outs in self.steps:
            for i, a in reads:
                vals[i] = a
            _exec(s, vals, None, None, xp, free=False)
            for o, want in zip(s.outs, outs):
                r = vals[o]
                if want is None or r is want or (r.shape == want.shape and
                                                 r.strides == want.strides and
                                                 _addr(r) == _addr(want)):
                    continue
                want[...] = r


def _addr(a) -> int:
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr


def _key(a, xp):
    """What must match for an input to be read in place: address, shape, strides,
    dtype (None for a host value: a NumPy array of a GPU program, a number)."""
    if not hasattr(a, "strides") or (xp is not np and isinstance(a, np.ndarray)):
        return None
    return (_addr(a), a.shape, a.strides, a.dtype.str)
