"""Gradient buckets of DistributedDataParallel (PyTorch's ``Reducer``, in Python).

Parameters are grouped, in reverse registration order (roughly the order backward
produces their gradients), into flat buffers of at most ``bucket_cap_mb`` (the first
bucket 1 MB, as in PyTorch, so communication starts early). Each parameter's
post-accumulate-grad hook copies its gradient into its bucket slot, pre-divided by the
world size; once every slot of a bucket is filled the bucket's all-reduce is launched
asynchronously, in bucket order on every rank, while backward goes on computing the
next gradients (MPI progresses in the hooks' ``Test`` calls and on
``ember.distributed.progress``'s thread). At the end of backward the reducer waits for
the all-reduces and copies the averaged gradients back into ``p.grad``. After the first
backward the buckets are rebuilt in the order the gradients actually became ready
(rank 0's order), as PyTorch's reducer does.
"""
from __future__ import annotations

import time

from ... import dtypes as _dt
from ...autograd.engine import queue_callback
from ...autograd.grad_mode import no_grad, state as _grad_state
from ...device import get_backend
from . import _traced

#: bytes of the first bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)
FIRST_BUCKET_BYTES = 1024 * 1024


def assign_buckets(params: list, cap_bytes: int, first_cap_bytes: int = FIRST_BUCKET_BYTES,
                   order=None):
    """Indices of ``params`` grouped into buckets, one dtype per bucket.

    Args:
        params: the parameters.
        cap_bytes: a bucket closes once it holds at least this many bytes...
        first_cap_bytes: ...the first one at this many (PyTorch: 1 MiB).
        order: the order to fill buckets in (default: reverse registration order; after
            the first backward, the order the gradients became ready).

    Example:
        >>> assign_buckets([a, b, c], cap_bytes=25 * 2**20)   # [[2, 1, 0]] when small
    """
    buckets, open_by_dtype = [], {}
    for i in (reversed(range(len(params))) if order is None else order):
        p = params[i]
        cur = open_by_dtype.get(p.dtype)
        if cur is None:
            cur = open_by_dtype[p.dtype] = [[], 0]
        cur[0].append(i)
        cur[1] += p.numel() * p.element_size()
        cap = first_cap_bytes if not buckets else cap_bytes
        if cur[1] >= cap:
            buckets.append(cur[0])
            del open_by_dtype[p.dtype]
    buckets.extend(c[0] for c in open_by_dtype.values() if c[0])
    return buckets


def default_cap_bytes(params: list, cap_bytes: int = 25 * 2**20, parts: int = 4) -> int:
    """Ember's default bucket size: PyTorch's 25 MiB, but at most 1/``parts`` of the
    model's gradient bytes (and at least the 1 MiB first bucket).

    NOTE: deviation from PyTorch, on purpose: a model whose gradients total less than the
    cap gets PyTorch's 1 MiB first bucket and ONE bucket with everything else, whose
    all-reduce can only start after backward ends (W3: 3.4 MB of gradients, 2.4 MB of
    them exposed). A few buckets let most of the communication overlap backward.
    """
    total = sum(p.numel() * p.element_size() for p in params)
    return max(FIRST_BUCKET_BYTES, min(cap_bytes, -(-total // parts)))


class _Bucket:
    """One flat gradient buffer, the parameters it holds and its in-flight all-reduce."""

    def __init__(self, params: list, indices: list) -> None:
        from ...ops.factories import zeros
        self.indices = indices
        self.params = [params[i] for i in indices]
        self.offsets, n = [], 0
        for p in self.params:
            self.offsets.append(n)
            n += p.numel()
        self.flat = zeros(n, dtype=self.params[0].dtype, device=self.params[0].device)
        self.slots = [self.flat[o:o + p.numel()].view(p.shape)
                      for o, p in zip(self.offsets, self.params)]
        self.pending = len(self.params)
        self.work = None
        self.traced = None   # under ember.compile: the all-reduced flat tensor

    def reset(self) -> None:
        self.pending, self.work = len(self.params), None


def graph_break(what: str) -> None:
    """Tell an ``ember.compile`` tracer that a collective runs here.

    NOTE: collectives move array data outside Ember ops, so a captured graph would replay
    the step WITHOUT them (silently unaveraged gradients). A graph break makes the traced
    call finish eagerly and that signature run eagerly from then on: correct, not fused;
    ``fullgraph=True`` raises ``GraphBreak`` instead.
    """
    for mode in reversed(_grad_state.modes):
        unsupported = getattr(mode, "unsupported", None)
        if unsupported is not None:
            unsupported(what)
            return


def _wait(work, spin_s: float = 0.05) -> None:
    """Wait for ``work``, polling it in a tight loop first.

    NOTE: ``Work.wait`` sleeps between polls after a short spin (it must not hog a core for
    a long wait); at the end of backward the remaining all-reduces usually finish within
    a millisecond, which the sleep granularity would double.
    """
    end = time.perf_counter() + spin_s
    while not work.is_completed():
        if time.perf_counter() > end:
            work.wait()
            return


def _fill_slot(slot, grad, world: int) -> None:
    """``slot = grad / world`` (the bucket's share of this gradient).

    NOTE: float32/float64 go straight to the backend's ``divide`` into the slot's array:
    the bucket is DDP's own buffer (no autograd, no version to bump), and two Ember ops
    per parameter (copy, divide) cost ~3x more in dispatch than the arithmetic on W3's
    53 parameters. The quotient is IEEE division either way, so results are unchanged.
    """
    out, g = slot._data, grad._data
    if g.dtype.kind == "f" and g.dtype.itemsize >= 4 and out.dtype == g.dtype:
        xp = get_backend(grad._device).xp
        if world > 1:
            xp.divide(g, world, out=out)
        else:
            xp.copyto(out, g)
        return
    with no_grad():
        slot.copy_(grad)
        if world > 1:
            slot.div_(world)


class Reducer:
    """Bucketed, overlapped gradient averaging for :class:`DistributedDataParallel`."""

    def __init__(self, params: list, names: list, dist, group, bucket_cap_mb: float,
                 find_unused_parameters: bool,
                 first_cap_bytes: int = FIRST_BUCKET_BYTES) -> None:
        self.params, self.names, self.dist, self.group = params, names, dist, group
        self.world = dist.get_world_size(group) if group is not None else dist.get_world_size()
        self.find_unused = find_unused_parameters
        self.cap, self.first_cap = int(bucket_cap_mb * 1024 * 1024), first_cap_bytes
        self._make_buckets(None)
        self.ready_order = []   # indices, in the order this backward's gradients were ready
        self.rebuilt = False    # buckets rebuilt in that order after the first backward
        self.used = [False] * len(params)
        self.next_launch = 0
        self.in_backward = False
        self.enabled = True
        self.tracer = self.last_traced = None   # the ember.compile tracer of this backward
        # events: ("ready", param index) and ("launch", bucket index) in the order they happened
        self.stats = {"comm_launch": [], "backward_end": None, "comm_done": None, "events": []}
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i))
                        for i, p in enumerate(params)]

    def _make_buckets(self, order) -> None:
        self.buckets = [_Bucket(self.params, idx)
                        for idx in assign_buckets(self.params, self.cap, self.first_cap,
                                                    order=order)]
        self.where = {}
        for b, bucket in enumerate(self.buckets):
            for k, i in enumerate(bucket.indices):
                self.where[i] = (b, k)

    def _rebuild(self) -> None:
        """Re-bucket in the order the first backward made the gradients ready (PyTorch's
        ``rebuild_buckets``), taking rank 0's order so every rank launches the same buckets.

        NOTE: reverse registration order is only a guess (a GPT's embeddings are registered
        first but their gradients are ready last, a shared weight is ready at its first
        use); a bucket that waits for a late gradient holds back all the ones after it.
        """
        from ...ops.factories import tensor
        self.rebuilt = True
        seen = set(self.ready_order)
        order = self.ready_order + [i for i in reversed(range(len(self.params)))
                                    if i not in seen]
        t = tensor(order, dtype=_dt.int64)
        src = self.group.ranks[0] if self.group is not None else 0
        self.dist.broadcast(t, src, group=self.group)
        self._make_buckets([int(i) for i in t.tolist()])

    # ------------------------------------------------------------------ hooks
    def _hook(self, i: int):
        def hook(p):
            if self.enabled:
                self._mark_ready(i, p)
        return hook

    def _mark_ready(self, i: int, p) -> None:
        if not self.in_backward:
            self._start_backward()
        b, k = self.where[i]
        bucket = self.buckets[b]
        if self.used[i]:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {self.names[i]} received its gradient "
                f"twice in one backward pass (a reentrant backward or a shared parameter "
                f"used across backward calls); this is not supported")
        self.used[i] = True
        self.ready_order.append(i)
        self.stats["events"].append(("ready", i))
        if self.tracer is None:
            _fill_slot(bucket.slots[k], p.grad, self.world)
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_ready()
        if self.tracer is not None:
            if self.last_traced is not None and self.next_launch > 0:
                _traced.poll_all_reduces(self.tracer, self.last_traced)
        else:
            self._progress()

    def _progress(self) -> None:
        """Drive in-flight all-reduces forward.

        NOTE: MPI moves a nonblocking collective's data only inside MPI calls, so each
        gradient hook polls the launched buckets: this is what lets communication overlap
        the rest of the backward pass without a progress thread.
        """
        for b in range(self.next_launch):
            work = self.buckets[b].work
            if work is not None and not work.is_completed():
                return   # NOTE: MPI completes collectives in order; one test suffices

    def _start_backward(self) -> None:
        self.tracer = _traced.active_tracer() if self.world > 1 else None
        if self.world > 1 and (self.tracer is None or self.find_unused):
            self.tracer = None
            graph_break("DistributedDataParallel's gradient all-reduce")
        if self.tracer is None:
            self.last_traced = None
        self.in_backward = True
        self.used = [False] * len(self.params)
        self.ready_order = []
        self.next_launch = 0
        for bucket in self.buckets:
            bucket.reset()
        self.stats["comm_launch"], self.stats["events"] = [], []
        queue_callback(self._finalize)

    def _launch_ready(self) -> None:
        """Launch the all-reduces of full buckets, in bucket order (the same on every rank)."""
        while self.next_launch < len(self.buckets) and \
                self.buckets[self.next_launch].pending == 0:
            bucket = self.buckets[self.next_launch]
            self.stats["comm_launch"].append(time.perf_counter())
            self.stats["events"].append(("launch", self.next_launch))
            if self.tracer is not None:
                self._launch_traced(bucket)
            elif self.world > 1:
                bucket.work = self.dist.all_reduce(bucket.flat, group=self.group, async_op=True)
            self.next_launch += 1

    def _launch_traced(self, bucket) -> None:
        """Under ``ember.compile``: the bucket's average as Ember ops + an all-reduce start
        node (its wait node is recorded at the end of backward, see ``_finalize``)."""
        from ...ops.join import cat
        with no_grad():
            flat = cat([p.grad.reshape(-1) for p in bucket.params]) / self.world
        bucket.traced = _traced.start_all_reduce(self.tracer, flat, self.last_traced,
                                                 self.dist, self.group)
        self.last_traced = bucket.traced

    # ------------------------------------------------------------------ end of backward
    def _finalize(self) -> None:
        self.in_backward = False
        self.stats["backward_end"] = time.perf_counter()
        missing = [i for i, u in enumerate(self.used) if not u]
        if missing and not self.find_unused:
            names = ", ".join(self.names[i] for i in missing[:8])
            raise RuntimeError(
                f"DistributedDataParallel: {len(missing)} parameter(s) received no gradient "
                f"in this backward pass ({names}); their buckets cannot be reduced. Pass "
                f"find_unused_parameters=True to the constructor if parts of the model are "
                f"not used by every forward, or make sure all outputs take part in the loss")
        for i in missing:   # locally unused: contribute zeros
            b, k = self.where[i]
            with no_grad():
                self.buckets[b].slots[k].zero_()
            self.buckets[b].pending -= 1
        self._launch_ready()
        global_used = self._global_usage() if self.find_unused else None
        if self.tracer is not None:   # the wait nodes: after every backward node so far
            for bucket in self.buckets:
                bucket.traced = _traced.wait_all_reduce(self.tracer, bucket.traced, _wait)
        for bucket in self.buckets:
            if bucket.work is not None:
                _wait(bucket.work)
        self.stats["comm_done"] = time.perf_counter()
        if self.tracer is not None:
            self._copy_back_traced()
            self.tracer = self.last_traced = None
        else:
            self._copy_back(global_used)
            if not self.rebuilt and not self.find_unused and self.world > 1:
                self._rebuild()

    def _copy_back_traced(self) -> None:
        with no_grad():
            for bucket in self.buckets:
                for p, o in zip(bucket.params, bucket.offsets):
                    p.grad.copy_(bucket.traced[o:o + p.numel()].view(p.shape))
                bucket.traced = None

    def _global_usage(self):
        """How many ranks used each parameter (PyTorch's ``local_used_map`` all-reduce)."""
        from ...ops.factories import tensor
        used = tensor([1.0 if u else 0.0 for u in self.used], dtype=_dt.float64)
        if self.world > 1:
            self.dist.all_reduce(used, group=self.group)
        return used.tolist()

    def _copy_back(self, global_used) -> None:
        with no_grad():
            for i, p in enumerate(self.params):
                b, k = self.where[i]
                if global_used is not None and global_used[i] == 0:
                    continue   # unused everywhere: .grad stays as it was (PyTorch)
                slot = self.buckets[b].slots[k]
                if p.grad is None:
                    p.grad = slot.clone()
                else:
                    p.grad.copy_(slot)

    def abandon(self) -> None:
        """Forget a backward pass that raised before its end-of-backward callback ran.

        Its launched all-reduces are waited for (the next backward reuses their buffers;
        every rank launched the same ones, as they failed at the same point).
        """
        if not self.in_backward:
            return
        for bucket in self.buckets:
            if bucket.work is not None:
                _wait(bucket.work)
            bucket.reset()
        self.in_backward = False
        self.tracer = self.last_traced = None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
