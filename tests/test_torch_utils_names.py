"""``ember.utils._pytree``, ``ember.utils.hooks``, ``ember.hub``, ``ember.types``,
``backends.cuda.sdp_kernel``, ``backends.opt_einsum`` and ``nn.modules.module``'s hooks."""
import hashlib
import os
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Union

import numpy as np
import pytest

import ember as em
import ember.utils._pytree as pytree

P = namedtuple("P", "x y")
TREES = [{"b": 1, "a": [2, None, (3, 4)]}, P(1, [2, 3]), OrderedDict(z=1, a=2),
         [None, {"k": None}], 5, (), {"x": {}}, defaultdict(list, a=[1]), deque([1, [2]])]


@pytest.mark.parametrize("tree", TREES, ids=range(len(TREES)))
def test_pytree_round_trips_in_insertion_order(tree):
    leaves, spec = pytree.tree_flatten(tree)
    assert pytree.tree_unflatten(leaves, spec) == tree and spec.num_leaves == len(leaves)
    doubled = pytree.tree_map(lambda v: v if v is None else v * 2, tree)
    assert pytree.tree_leaves(doubled) == [v if v is None else v * 2 for v in leaves]
    torch_pytree = pytest.importorskip("torch.utils._pytree")
    assert torch_pytree.tree_leaves(tree) == leaves


def test_pytree_registration_and_helpers():
    class Box:
        def __init__(self, a, b):
            self.a, self.b = a, b
    pytree.register_pytree_node(Box, lambda bx: ([bx.a, bx.b], "box"),
                                lambda children, ctx: Box(*children))
    try:
        out = pytree.tree_map(lambda t: t + 1, {"k": Box(em.ones(2), 3)})
        assert isinstance(out["k"], Box) and out["k"].a.tolist() == [2.0, 2.0] and out["k"].b == 4
        with pytest.raises(ValueError, match="already registered"):
            pytree.register_pytree_node(Box, None, None)
    finally:
        del pytree.SUPPORTED_NODES[Box]
    mixed = [em.ones(1), 2, "s"]
    assert pytree.tree_map_only(int, lambda v: -v, mixed)[1:] == [-2, "s"]
    assert pytree.tree_all(lambda v: v > 0, [1, (2, 3)]) and pytree.tree_any(lambda v: v > 2, [1, 3])
    assert pytree.tree_map(lambda a, b: a + b, [1, (2,)], [10, (20,)]) == [11, (22,)]
    with pytest.raises(ValueError, match="different structures"):
        pytree.tree_map(lambda a, b: a, [1, 2], [1, (2,)])
    with pytest.raises(ValueError, match="holds 2 items"):
        pytree.tree_unflatten([1], pytree.tree_structure([1, 2]))
    assert pytree.tree_leaves([1, [2]], is_leaf=lambda x: isinstance(x, list) and len(x) == 1) \
        == [1, [2]]


def test_hooks_handle_and_module_hook_paths():
    from ember.nn.modules.module import register_module_forward_hook
    m = em.nn.Linear(2, 2)
    handle = m.register_forward_hook(lambda *a: None)
    assert isinstance(handle, em.utils.hooks.RemovableHandle)
    seen = []
    g = register_module_forward_hook(lambda mod, args, out: seen.append(type(mod).__name__))
    try:
        m(em.ones(1, 2))
    finally:
        g.remove()
    assert seen == ["Linear"]
    x = em.ones(2, requires_grad=True)
    seen = []
    with x.register_hook(lambda g: seen.append(1)) as th:     # tensor hooks' handles too
        (x * 2).sum().backward()
    (x * 2).sum().backward()
    assert isinstance(th, em.utils.hooks.RemovableHandle) and seen == [1]
    f = em.utils.hooks.unserializable_hook(lambda g: g)
    assert f.__torch_unserializable__


def _serve(tmp_path, name, payload):
    path = tmp_path / name
    path.write_bytes(payload)
    return path.as_uri()


def test_hub_downloads_once_checks_the_hash_and_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(em.hub, "_dir", [])
    src = tmp_path / "src"
    src.mkdir()
    em.save({"w": em.arange(4.0)}, src / "tmp.ckpt")
    payload = (src / "tmp.ckpt").read_bytes()
    digest = hashlib.sha256(payload).hexdigest()
    url = _serve(src, f"net-{digest[:8]}.ckpt", payload)
    em.hub.set_dir(tmp_path / "hub")
    sd = em.hub.load_state_dict_from_url(url, check_hash=True, progress=False)
    assert sd["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    cached = tmp_path / "hub" / "checkpoints" / f"net-{digest[:8]}.ckpt"
    assert cached.read_bytes() == payload
    os.unlink(src / f"net-{digest[:8]}.ckpt")          # a second call reads the cache
    assert em.hub.load_state_dict_from_url(url, progress=False)["w"].tolist() == \
        [0.0, 1.0, 2.0, 3.0]
    bad = _serve(src, "net-deadbeef.ckpt", payload)
    with pytest.raises(RuntimeError, match="invalid hash value"):
        em.hub.load_state_dict_from_url(bad, check_hash=True, progress=False)
    left = sorted(os.listdir(tmp_path / "hub" / "checkpoints"))
    assert left == [f"net-{digest[:8]}.ckpt"]           # no partial file, no bad file


def test_hub_loads_models_from_a_local_hubconf(tmp_path):
    (tmp_path / "hubconf.py").write_text(
        "dependencies = ['numpy']\n"
        "import ember\n"
        "def tiny(width=3):\n"
        "    '''A one-layer model.'''\n"
        "    return ember.nn.Linear(2, width)\n"
        "def _private():\n"
        "    pass\n")
    assert em.hub.list(str(tmp_path)) == ["tiny"]
    assert em.hub.help(str(tmp_path), "tiny") == "A one-layer model."
    m = em.hub.load(str(tmp_path), "tiny", width=5)
    assert tuple(m.weight.shape) == (5, 2)
    with pytest.raises(RuntimeError, match="source='local'"):
        em.hub.load("pytorch/vision", "resnet18", source="github")
    with pytest.raises(RuntimeError, match="Cannot find callable nope"):
        em.hub.load(str(tmp_path), "nope")


def test_types_storage_and_backend_flags():
    assert em.types.Number == Union[int, float, bool]
    assert em.storage.UntypedStorage is type(em.ones(2).untyped_storage())
    from ember.backends.cuda import flash_sdp_enabled, math_sdp_enabled
    with em.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True):
        assert not flash_sdp_enabled() and math_sdp_enabled()
    assert flash_sdp_enabled()
    a, b, c = (em.randn(4, 5), em.randn(5, 6), em.randn(6, 3))
    want = np.einsum("ij,jk,kl->il", a.numpy(), b.numpy(), c.numpy())
    for enabled, strategy in ((True, "auto"), (False, "auto"), (True, "optimal")):
        em.backends.opt_einsum.enabled, em.backends.opt_einsum.strategy = enabled, strategy
        try:
            got = em.einsum("ij,jk,kl->il", a, b, c).numpy()
        finally:
            em.backends.opt_einsum.enabled, em.backends.opt_einsum.strategy = True, "auto"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_untyped_storage_counts_bytes_as_pytorchs():
    s = em.arange(3.0).untyped_storage()
    assert s.nbytes() == s.size() == len(s) == 12 and s.element_size() == 1
    assert em.zeros(2, 3, dtype=em.float64)[1].untyped_storage().nbytes() == 48   # the base's
