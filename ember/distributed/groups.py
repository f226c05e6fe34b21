"""Process groups: ``init_process_group``, ``new_group``, ranks and sizes.

The default group spans every process of the job (``MPI.COMM_WORLD``); ``new_group``
makes sub-groups. Ranks passed to the collectives (``src``, ``dst``) are *global*
ranks, as in PyTorch; a group translates them to its own numbering.
"""
from __future__ import annotations

import datetime
import os
import sys
import time

from . import debug
from .backend import Communicator, DistributedError, Work, seconds

#: PyTorch's default process-group timeout.
default_pg_timeout = datetime.timedelta(minutes=30)
_BACKENDS = ("mpi", "nccl")


class ProcessGroup:
    """A set of ranks that run collectives together (``torch.distributed.ProcessGroup``).

    ``rank()`` and ``size()`` are this process's rank in the group and the group's size.
    """

    def __init__(self, comm: Communicator | None, ranks: list[int], timeout: float,
                 debug_mode: bool):
        self.comm = comm                  # None on processes outside the group
        self.ranks = list(ranks)          # global rank of each group rank
        self.timeout = timeout
        self.debug = debug_mode
        self.ctrl = comm.control() if comm is not None else None   # debug / control (host)
        self.seq = 0                      # collectives called so far (debug fingerprints)

    def rank(self) -> int:
        return -1 if self.comm is None else self.comm.rank

    def size(self) -> int:
        return len(self.ranks)

    def group_rank(self, global_rank: int, what: str, op: str) -> int:
        """This group's rank of ``global_rank`` (a ``src``/``dst`` argument)."""
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"{op}: {what}={global_rank} is not a rank of the group "
                             f"{self.ranks}; valid: one of {self.ranks}") from None

    def name(self) -> str:
        return self.comm.name if self.comm is not None else "mpi"

    def __repr__(self) -> str:
        return f"ProcessGroup(ranks={self.ranks}, backend={self.name()!r})"


class group:   # noqa: N801 - PyTorch's name (``dist.group.WORLD``)
    """Holds ``WORLD``, the default process group (None before ``init_process_group``)."""

    WORLD: ProcessGroup | None = None


class _State:
    world_comm = None     # the backend communicator of COMM_WORLD (never freed)
    abort_on_error = False   # an uncaught exception aborts the job (until destroyed)
    groups: list = []


def is_available() -> bool:
    """True when the MPI backend can be imported (``pip install 'ember[distributed]'``)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def is_initialized() -> bool:
    """True between ``init_process_group`` and ``destroy_process_group``."""
    return group.WORLD is not None


def is_mpi_available() -> bool:
    return is_available()


def is_nccl_available() -> bool:
    """True when CuPy's NCCL bindings can be imported (``backend="nccl"``)."""
    try:
        from .nccl import load_nccl
        load_nccl()
    except ImportError:
        return False
    return True


def _require(op: str) -> ProcessGroup:
    if group.WORLD is None:
        raise ValueError(f"{op}: Default process group has not been initialized, please "
                         f"make sure to call init_process_group.")
    return group.WORLD


def resolve(grp, op: str) -> ProcessGroup:
    """``grp`` or the default group, checked."""
    world = _require(op)
    if grp is None:
        return world
    if not isinstance(grp, ProcessGroup):
        raise TypeError(f"{op}: group must be a ProcessGroup from new_group() or None, got "
                        f"{type(grp).__name__}")
    return grp


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout=None, world_size: int = -1, rank: int = -1, store=None,
                       group_name: str = "", device_id=None) -> None:
    """Join this process to the job's default process group.

    Ranks and world size come from MPI (``mpiexec -n N`` or ``ember run --nproc N``,
    which also set ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``); ``init_method="env://"`` and
    explicit ``rank``/``world_size`` are checked against them. A process started without
    ``mpiexec`` is a job of one rank. Installs an exception hook that prints
    ``[rank N]`` before an uncaught traceback and aborts the whole job, so peers never
    wait for a dead rank.

    Args:
        backend: ``"mpi"`` (the default; ``None`` means it too) or ``"nccl"``: CUDA
            tensors' collectives on NCCL (``nccl.py``; MPI still starts the job and carries
            NCCL's unique id, control messages and CPU tensors).
        init_method: None or ``"env://"``; MPI does the rendezvous.
        timeout: how long any collective may wait (``timedelta`` or seconds; default 30
            minutes). A collective that waits longer raises :class:`DistributedError`.
        world_size, rank: optional; must match MPI's when given.
        device_id: with ``"nccl"``, the CUDA device of this rank (index or ``"cuda:N"``;
            default: the current device, ``ember.cuda.set_device``).
        store, group_name: accepted for PyTorch compatibility; unused.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60))
        >>> dist.get_rank(), dist.get_world_size()
        (0, 2)
    """
    if group.WORLD is not None:
        raise ValueError("trying to initialize the default process group twice!")
    backend = "mpi" if backend is None else str(backend).lower()
    if backend not in _BACKENDS:
        raise ValueError(f"init_process_group: unknown or unavailable backend {backend!r}; "
                         f"valid: {list(_BACKENDS)}")
    if init_method not in (None, "env://"):
        raise ValueError(f"init_process_group: init_method={init_method!r} is not supported; "
                         f"MPI does the rendezvous: use None or 'env://' and start the job "
                         f"with `ember run --nproc N` or `mpiexec -n N`")
    if store is not None:
        raise ValueError("init_process_group: store= is not supported by the MPI backend")
    limit = seconds(default_pg_timeout if timeout is None else timeout)
    if limit <= 0:
        raise ValueError(f"init_process_group: timeout must be positive, got {timeout!r}")
    make = _nccl_maker(device_id) if backend == "nccl" else (lambda c, _limit: c)
    comm = _world_comm(limit)
    _check_env(comm, world_size, rank)
    _install_excepthook(comm.rank, comm.size)
    _State.abort_on_error = True
    _rendezvous(comm, limit, "init_process_group")
    group.WORLD = ProcessGroup(make(comm.dup(), limit), list(range(comm.size)), limit,
                               debug.enabled())
    _State.groups = [group.WORLD]
    _record(comm.rank, "pid", str(os.getpid()))


def _nccl_maker(device_id):
    """``host comm -> NCCLCommunicator``, after checking CuPy/NCCL and a CUDA device are
    there (before MPI starts, so the error is immediate); ``device_id`` (an index or
    ``cuda:N``) becomes the current CUDA device, as ``torch.cuda.set_device`` would."""
    from .nccl import NCCLCommunicator, cuda_backend_or_error, load_nccl
    nccl, be = load_nccl(), cuda_backend_or_error()
    if device_id is not None:
        from ..device import device as _device
        idx = device_id if isinstance(device_id, int) else _device(device_id).index
        be.current_index = be.check_index(idx, "init_process_group(device_id=)")
    return lambda host, limit: NCCLCommunicator(host, nccl, be, limit)


def _record(rank: int, what: str, text: str) -> None:
    """Tell ``ember run`` (through ``EMBER_RUN_DIR``) this rank's pid or its error."""
    run_dir = os.environ.get("EMBER_RUN_DIR")
    if run_dir and os.path.isdir(run_dir):
        with open(os.path.join(run_dir, f"rank{rank}.{what}"), "w") as f:
            f.write(text)


def _rendezvous(comm: Communicator, limit: float, op: str) -> None:
    """Wait (at most ``limit`` s) until every rank calls ``op``, whose MPI calls block."""
    def error(elapsed):
        return DistributedError(
            f"[rank {comm.rank}] {op} at {debug.caller_site()}: waited {elapsed:.1f} s for "
            f"all {comm.size} ranks to call {op}; some never did (they died, exited or are "
            f"stuck before it)")
    Work([comm.barrier()], timeout=limit, on_timeout=error).wait()


def _world_comm(limit: float) -> Communicator:
    if _State.world_comm is None:
        from .mpi import MPICommunicator, load_mpi
        from .sentinel import Sentinel
        sentinel = Sentinel(limit)   # NOTE: MPI_Init can block forever; see sentinel.py
        try:
            _State.world_comm = MPICommunicator(load_mpi().COMM_WORLD)
        finally:
            sentinel.stop()
    return _State.world_comm


def _check_env(comm, world_size: int, rank: int) -> None:
    env_rank, env_size = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    for what, given, actual in (("world_size", world_size, comm.size),
                                ("rank", rank, comm.rank),
                                ("WORLD_SIZE", env_size, comm.size),
                                ("RANK", env_rank, comm.rank)):
        if given not in (None, -1) and int(given) != actual:
            raise ValueError(
                f"init_process_group: {what}={given} but MPI says this process is rank "
                f"{comm.rank} of {comm.size}; start every rank with `ember run --nproc N "
                f"script.py` or `mpiexec -n N python script.py`")
    os.environ.setdefault("RANK", str(comm.rank))
    os.environ.setdefault("WORLD_SIZE", str(comm.size))
    os.environ.setdefault("LOCAL_RANK", os.environ.get("MPI_LOCALRANKID", str(comm.rank)))


def _install_excepthook(rank: int, size: int) -> None:
    previous = sys.excepthook

    def hook(kind, value, tb):
        if size == 1 or not _State.abort_on_error:
            return previous(kind, value, tb)
        sys.stderr.write(f"[rank {rank}] uncaught exception; aborting the job\n")
        import traceback
        for line in "".join(traceback.format_exception(kind, value, tb)).splitlines():
            sys.stderr.write(f"[rank {rank}] {line}\n")
        sys.stderr.flush()
        text = " ".join(line.strip() for line in str(value).splitlines())
        _record(rank, "error", f"{kind.__name__}: {text[:600]}")
        time.sleep(0.3)   # NOTE: lets mpiexec forward the traceback before it kills the job
        _State.world_comm.abort(1)

    hook.ember_rank_hook = True
    if not getattr(previous, "ember_rank_hook", False):
        sys.excepthook = hook


def destroy_process_group(grp: ProcessGroup | None = None) -> None:
    """Release ``grp`` (or every group, and uninitialize, when None)."""
    world = _require("destroy_process_group")
    targets = list(_State.groups) if grp is None or grp is world else [grp]
    for g in targets:
        for c in (g.comm, g.ctrl):
            if c is not None:
                c.free()
        g.comm = g.ctrl = None
        if g in _State.groups:
            _State.groups.remove(g)
    if grp is None or grp is world:
        group.WORLD = None
        _State.abort_on_error = False


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False) -> ProcessGroup:
    """A group of ``ranks`` (global ranks; default all). Every rank of the job must call it.

    On a process outside ``ranks`` the group exists but ``get_rank(group) == -1`` and
    collectives on it return None without doing anything (PyTorch's behaviour).

    Example:
        >>> evens = dist.new_group([0, 2])
        >>> dist.all_reduce(t, group=evens)     # ranks 1 and 3 skip it
    """
    world = _require("new_group")
    members = sorted(set(range(world.size()) if ranks is None else map(int, ranks)))
    bad = [r for r in members if not 0 <= r < world.size()]
    if bad:
        raise ValueError(f"new_group: ranks {bad} are not in the world of size "
                         f"{world.size()}; valid ranks are 0..{world.size() - 1}")
    limit = world.timeout if timeout is None else seconds(timeout)
    _rendezvous(world.comm, world.timeout, "new_group")
    g = ProcessGroup(world.comm.split(members), members, limit, world.debug)
    _State.groups.append(g)
    return g


def get_rank(group: ProcessGroup | None = None) -> int:   # noqa: F811 - PyTorch's name
    """This process's rank in ``group`` (default: the world); -1 outside the group."""
    return resolve(group, "get_rank").rank()


def get_world_size(group: ProcessGroup | None = None) -> int:   # noqa: F811
    """The number of ranks in ``group``; -1 on a process outside it (like PyTorch)."""
    g = resolve(group, "get_world_size")
    return -1 if g.comm is None else g.size()


def get_backend(group: ProcessGroup | None = None) -> str:   # noqa: F811
    """The backend's name (``"mpi"``)."""
    return resolve(group, "get_backend").name()


def get_process_group_ranks(group: ProcessGroup) -> list[int]:   # noqa: F811
    """The global ranks of ``group``'s members, in group-rank order."""
    return list(resolve(group, "get_process_group_ranks").ranks)


def get_global_rank(group: ProcessGroup, group_rank: int) -> int:   # noqa: F811
    """The global rank of ``group_rank`` in ``group``."""
    g = resolve(group, "get_global_rank")
    if not 0 <= group_rank < g.size():
        raise ValueError(f"get_global_rank: group rank {group_rank} is not in a group of "
                         f"size {g.size()}")
    return g.ranks[group_rank]


def timeout_error(grp: ProcessGroup, call: dict, elapsed: float) -> DistributedError:
    """The error of a collective that waited longer than the group's timeout.

    Probes the other ranks first (see ``health``) to name those that never arrived
    and what the others are waiting in.
    """
    from . import health
    me = grp.ranks[grp.comm.rank]
    grace = min(5.0, max(1.0, 0.25 * grp.timeout))
    states = health.probe(grp, call, time.monotonic() - elapsed, grace) if grp.size() > 1 \
        else {}
    note = grp.comm.on_timeout(call["op"])
    return DistributedError(
        f"[rank {me}] {debug.describe_call(call)} (collective #{call['seq']} on the group of "
        f"ranks {grp.ranks}) timed out after {elapsed:.1f} s:\n  "
        + health.explain(grp, call, states) + (f"\n  {note}" if note else ""))
