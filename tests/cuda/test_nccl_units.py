"""The NCCL backend's plumbing, in one process, on the ``EMBER_FAKE_CUDA`` stand-in.

A fake ``nccl`` module (``tests/distributed/_fake_nccl.py``: CuPy's names and signatures,
recording every call, emulating it with NumPy on the stand-in's host pointers) is
injected with ``set_nccl_module``; the default process group is a one-rank
``NCCLCommunicator`` over a local host communicator, so no MPI starts in the test
process. The two-rank job through ``mpiexec`` is ``test_nccl_fake_job.py``; the real
GPU's one-rank run is ``test_gpu_nccl.py``.
"""
import pathlib
import sys

import numpy as np
import pytest

import ember as em
import ember.distributed as dist
from ember.distributed import groups, nccl as ember_nccl
from ember.distributed.backend import Communicator, DistributedError, ReduceOp, Request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "distributed"))
import _fake_nccl  # noqa: E402


class _Now(Request):
    def test(self) -> bool:
        return True


class _LocalHost(Communicator):
    """A one-rank host communicator (what MPI's COMM_WORLD is without mpiexec)."""

    rank, size = 0, 1

    def reduces(self, dtype):
        return True

    def allreduce(self, buf, op):
        return _Now()

    def broadcast(self, buf, root):
        return _Now()

    def allgather(self, send, recv):
        recv.reshape(-1).view(np.uint8)[:] = send.reshape(-1).view(np.uint8)
        return _Now()

    def reduce_scatter(self, send, recv, op):
        recv[...] = send.reshape(recv.shape)
        return _Now()

    def reduce(self, buf, op, root):
        return _Now()

    def gather(self, send, recv, root):
        return self.allgather(send, recv)

    def scatter(self, send, recv, root):
        return self.allgather(send, recv)

    def alltoallv(self, send, send_counts, recv, recv_counts):
        return self.allgather(send, recv)

    def send(self, buf, dst, tag):
        raise AssertionError("no peer")

    def recv(self, buf, src, tag):
        raise AssertionError("no peer")

    def poll(self, buf, tag):
        return None

    def barrier(self):
        return _Now()

    def split(self, ranks):
        return _LocalHost() if 0 in ranks else None

    def dup(self):
        return _LocalHost()

    def abort(self, code=1):
        raise AssertionError("abort")


@pytest.fixture
def nccl_world(fake_cuda, monkeypatch):
    """A one-rank NCCL default group on the stand-in, with the fake NCCL injected."""
    ember_nccl.set_nccl_module(_fake_nccl)
    _fake_nccl.calls.clear()
    comm = ember_nccl.NCCLCommunicator(_LocalHost(), _fake_nccl, fake_cuda)
    pg = groups.ProcessGroup(comm, [0], 5.0, False)
    monkeypatch.setattr(groups.group, "WORLD", pg)
    monkeypatch.setattr(groups._State, "groups", [pg])
    yield pg
    ember_nccl.set_nccl_module(None)


def _names():
    return [c[0] for c in _fake_nccl.calls]


def test_init_exchanges_a_unique_id_and_makes_one_communicator(nccl_world):
    assert _names()[:2] == ["get_unique_id", "NcclCommunicator"]
    assert _fake_nccl.calls[1][1] == {"ndev": 1, "rank": 0}
    assert dist.get_backend() == "nccl" and dist.get_world_size() == 1


def test_all_reduce_of_a_cuda_tensor_is_one_nccl_call(nccl_world):
    t = em.arange(6, dtype=em.float32, device="cuda").reshape(2, 3)
    _fake_nccl.calls.clear()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    (name, kw), = _fake_nccl.calls
    assert name == "allReduce" and kw["count"] == 6
    assert kw["datatype"] == _fake_nccl.NCCL_FLOAT32 and kw["op"] == _fake_nccl.NCCL_MAX
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.device.type == "cuda"


def test_bfloat16_reduces_natively_bool_in_float32(nccl_world):
    b = em.ones(4, dtype=em.bfloat16, device="cuda")
    _fake_nccl.calls.clear()
    dist.all_reduce(b, op=dist.ReduceOp.AVG)
    assert _fake_nccl.calls[0][1]["datatype"] == _fake_nccl.NCCL_BFLOAT16
    assert b.dtype == em.bfloat16 and b.cpu().float().tolist() == [1.0] * 4
    m = em.tensor([True, False], device="cuda")
    _fake_nccl.calls.clear()
    dist.all_reduce(m)
    assert _fake_nccl.calls[0][1]["datatype"] == _fake_nccl.NCCL_FLOAT32
    assert m.cpu().tolist() == [True, False]


def test_moves_go_as_bytes_and_gathers_are_grouped_p2p(nccl_world):
    x = em.arange(4, dtype=em.int64, device="cuda")
    _fake_nccl.calls.clear()
    dist.broadcast(x, src=0)
    assert _fake_nccl.calls[0] == ("broadcast", {"count": 32, "datatype": _fake_nccl.NCCL_UINT8,
                                                 "root": 0, "stream": 0})
    out = [em.zeros(4, dtype=em.int64, device="cuda")]
    dist.all_gather(out, x)
    assert out[0].cpu().tolist() == [0, 1, 2, 3]
    _fake_nccl.calls.clear()
    g = [em.zeros(4, dtype=em.int64, device="cuda")]
    dist.gather(x, g, dst=0)
    assert _names() == ["groupStart", "send", "recv", "groupEnd"]
    assert g[0].cpu().tolist() == [0, 1, 2, 3]
    o = em.zeros(4, dtype=em.int64, device="cuda")
    dist.all_to_all_single(o, x)
    assert o.cpu().tolist() == [0, 1, 2, 3]
    rs = em.zeros(2, 2, device="cuda")
    dist.reduce_scatter_tensor(rs, em.ones(2, 2, device="cuda") * 3)
    assert rs.cpu().tolist() == [[3.0, 3.0], [3.0, 3.0]]
    _fake_nccl.calls.clear()
    dist.barrier()
    assert _names() == ["allReduce"] and _fake_nccl.calls[0][1]["count"] == 1


def test_collective_runs_on_the_current_stream(nccl_world, monkeypatch):
    s = em.cuda.Stream()
    monkeypatch.setattr(s, "_raw", type("Raw", (), {"ptr": 4242, "done": True,
                                                    "synchronize": lambda self: None})())
    t = em.ones(3, device="cuda")
    _fake_nccl.calls.clear()
    with em.cuda.stream(s):
        dist.all_reduce(t)
    assert _fake_nccl.calls[0][1]["stream"] == 4242


def test_nccl_refuses_bitwise_ops_and_wildcard_receives(nccl_world):
    t = em.ones(2, dtype=em.int32, device="cuda")
    with pytest.raises(ValueError, match=r"all_reduce: ReduceOp.BAND is not supported by "
                                         r"the NCCL backend.*valid: ReduceOp.SUM"):
        dist.all_reduce(t, op=ReduceOp.BAND)
    comm = nccl_world.comm
    with pytest.raises(ValueError, match="cannot receive from any source"):
        comm.recv(t._data, None, 0)


def test_async_nccl_error_aborts_and_names_rank_and_collective(nccl_world):
    t = em.ones(2, device="cuda")
    nccl_world.comm.nc.async_error = "unhandled cuda error"
    with pytest.raises(DistributedError, match=r"\[rank 0\] all_reduce failed on the NCCL "
                                               r"backend.*unhandled cuda error.*aborted"):
        dist.all_reduce(t)
    assert "abort" in _names()
    with pytest.raises(DistributedError, match="was aborted.*cannot be used again"):
        dist.broadcast(t, src=0)


class _NeverDone:
    done = False

    def synchronize(self):
        raise AssertionError("a wait must poll, never block")


def test_a_collective_that_never_completes_times_out_and_aborts(nccl_world, fake_cuda,
                                                                monkeypatch):
    monkeypatch.setattr(fake_cuda.runtime, "new_event", lambda *a: _NeverDone())
    nccl_world.timeout = 0.3
    t = em.ones(2, device="cuda")
    with pytest.raises(DistributedError, match=r"(?s)\[rank 0\] all_reduce.*timed out after "
                                               r"0\.\d s.*ncclCommAbort"):
        dist.all_reduce(t)
    assert _names()[-1] == "abort"
    work = None
    with pytest.raises(DistributedError, match="aborted"):
        work = dist.all_reduce(t, async_op=True)
    assert work is None


def test_cuda_tensors_need_the_nccl_backend(nccl_world, monkeypatch):
    from ember.distributed.collectives import _check_tensor
    t = em.ones(1, device="cuda")
    assert _check_tensor(t, "all_reduce") is t
    monkeypatch.setattr(groups.group, "WORLD", None)    # no NCCL group: the MPI rule
    with pytest.raises(RuntimeError, match=r"all_reduce: the MPI backend handles CPU "
                                           r"tensors.*backend='nccl'"):
        _check_tensor(t, "all_reduce")


def test_new_group_splits_the_host_and_makes_a_new_nccl_comm(nccl_world):
    _fake_nccl.calls.clear()
    g = dist.new_group([0])
    # NOTE: the rendezvous is a barrier on the world's NCCL comm (a one-element all-reduce)
    assert _names() == ["allReduce", "get_unique_id", "NcclCommunicator"]
    assert g.name() == "nccl"
    t = em.ones(2, device="cuda")
    dist.all_reduce(t, group=g)
    dist.destroy_process_group(g)
    assert "destroy" in _names()


def test_without_cupy_init_names_the_install(monkeypatch):
    import builtins
    ember_nccl.set_nccl_module(None)
    real_import = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name.startswith("cupy"):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_cupy)
    with pytest.raises(ImportError, match=r"backend='nccl'.*pip install cupy-cuda12x"):
        dist.init_process_group("nccl")
    assert not dist.is_initialized() and not dist.is_nccl_available()


def test_without_a_gpu_init_names_the_missing_device(monkeypatch):
    from ember.device.base import reset_cuda_backend
    monkeypatch.delenv("EMBER_FAKE_CUDA", raising=False)
    reset_cuda_backend()
    ember_nccl.set_nccl_module(_fake_nccl)
    try:
        import importlib.util
        if importlib.util.find_spec("cupy") is not None:
            pytest.skip("CuPy is installed here: a GPU may be present")
        with pytest.raises(RuntimeError, match=r"backend='nccl'\): no CUDA device"):
            dist.init_process_group("nccl")
    finally:
        ember_nccl.set_nccl_module(None)
        reset_cuda_backend()
    assert not dist.is_initialized()


def test_waiting_for_the_unique_id_times_out_instead_of_hanging(fake_cuda):
    class _Never(Request):
        def test(self):
            return False

    class _SilentRoot(_LocalHost):
        rank, size = 1, 2

        def broadcast(self, buf, root):
            return _Never()
    with pytest.raises(DistributedError, match=r"\[rank 1\] init_process_group\(backend="
                                               r"'nccl'\): waited 0\.\d s for rank 0's NCCL "
                                               r"unique id"):
        ember_nccl.NCCLCommunicator(_SilentRoot(), _fake_nccl, fake_cuda, timeout=0.2)


def test_a_tensor_on_another_device_than_the_communicator_is_refused(nccl_world):
    class _OnDevice1(np.ndarray):
        device = type("D", (), {"id": 1})()
    t = em.ones(2, device="cuda")
    with pytest.raises(ValueError, match=r"all_reduce: rank 0's NCCL communicator is on "
                                         r"cuda:0 but a tensor is on cuda:1"):
        nccl_world.comm.allreduce(t._data.view(_OnDevice1), ReduceOp.SUM)


def test_backend_names_as_pytorch():
    assert dist.Backend("NCCL") == dist.Backend.NCCL == "nccl" and dist.Backend.MPI == "mpi"
    assert isinstance(dist.Backend.NCCL, str) and "nccl" in dist.Backend.backend_list
    with pytest.raises(TypeError, match="must be a string"):
        dist.Backend(3)
    with pytest.raises(ValueError, match="valid: \\['mpi', 'nccl'\\]"):
        dist.init_process_group(dist.Backend.GLOO)


_STUCK_INIT = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import _fake_nccl
from ember.distributed import nccl
from ember.device.base import cuda_backend
from test_nccl_units import _LocalHost

class Stuck(_fake_nccl.NcclCommunicator):
    def __init__(self, *a):
        time.sleep(60)           # a peer that never joins: ncclCommInitRank blocks
_fake_nccl.NcclCommunicator = Stuck
nccl.NCCLCommunicator(_LocalHost(), _fake_nccl, cuda_backend()[0], timeout=1.0)
print("returned")
"""


def test_a_stuck_nccl_init_ends_the_rank_instead_of_hanging():
    import os
    import subprocess
    here = pathlib.Path(__file__).resolve().parent
    env = dict(os.environ, EMBER_FAKE_CUDA="1",
               PYTHONPATH=os.pathsep.join([str(here), str(here.parents[1])]))
    res = subprocess.run([sys.executable, "-c", _STUCK_INIT, str(here.parent / "distributed")],
                         capture_output=True, text=True, timeout=50, env=env)
    assert res.returncode == 1 and "returned" not in res.stdout, res
    assert "[rank 0] init_process_group(backend='nccl'): ncclCommInitRank waited 1.0 s" \
        in res.stderr, res.stderr


@pytest.mark.parametrize("form", ["tuple", "bytes"])
def test_unique_id_round_trips_in_either_cupy_form(form):
    # CuPy < 14 gives NCCL's unique id as 128 signed chars, CuPy >= 14 as 128 bytes; the
    # broadcast array carries which, and every rank rebuilds the same object
    from ember.distributed.nccl import _uid_array, _uid_object
    raw = np.random.default_rng(0).integers(0, 256, 128, dtype=np.uint8)
    uid = raw.tobytes() if form == "bytes" else tuple(int(v) for v in raw.view(np.int8))
    arr = _uid_array(uid)
    assert arr.dtype == np.int8 and arr.shape == (129,)
    assert _uid_object(arr.copy()) == uid
