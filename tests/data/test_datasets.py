"""ember.datasets: digits (optional sklearn), spirals, MNIST IDX reader, CharText."""
import gzip
import struct

import numpy as np
import pytest

import ember as em
from ember.data import DataLoader, transforms as T
from ember.datasets import MNIST, CharText, Digits, load_digits, make_spirals, read_idx


# ------------------------------------------------------------------ digits
def test_digits_split_and_scaling():
    pytest.importorskip("sklearn")
    x_tr, y_tr, x_te, y_te = load_digits(seed=0)
    assert tuple(x_tr.shape) == (1438, 1, 8, 8) and tuple(x_te.shape) == (359, 1, 8, 8)
    assert x_tr.dtype == em.float32 and y_tr.dtype == em.int64
    assert 0.0 <= float(x_tr.min()) and float(x_tr.max()) == 1.0
    assert set(y_te.tolist()) == set(range(10))
    again = load_digits(seed=0)
    assert again[3].tolist() == y_te.tolist()
    assert load_digits(seed=1)[3].tolist() != y_te.tolist()
    from sklearn.datasets import load_digits as sk
    ref = sk()
    full = np.concatenate([x_tr.numpy(), x_te.numpy()]).reshape(-1, 64) * 16
    assert sorted(map(tuple, full.astype(int))) == sorted(map(tuple, ref.data.astype(int)))
    flat = load_digits(flatten=True)[0]
    assert tuple(flat.shape) == (1438, 64)
    ds = Digits(train=False, transform=lambda x: x * 2)
    x, y = ds[0]
    assert len(ds) == 359 and tuple(x.shape) == (1, 8, 8) and float(x.max()) <= 2.0


def test_digits_without_sklearn_says_how_to_install(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_sklearn(name, *a, **k):
        if name.startswith("sklearn"):
            raise ImportError("No module named 'sklearn'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(ImportError, match=r"pip install 'ember\[examples\]'"):
        load_digits()


# ------------------------------------------------------------------ spirals
def test_spirals_shape_labels_determinism():
    x, y = make_spirals(40, 3, noise=0.1, seed=0)
    assert tuple(x.shape) == (120, 2) and x.dtype == em.float32 and y.dtype == em.int64
    assert np.bincount(y.numpy()).tolist() == [40, 40, 40]
    r = np.linalg.norm(x.numpy(), axis=1)
    np.testing.assert_allclose(r[:40], np.linspace(0, 1, 40), atol=1e-6)  # radius = t
    assert make_spirals(40, 3, noise=0.1, seed=0)[0].tolist() == x.tolist()
    assert make_spirals(40, 3, noise=0.1, seed=1)[0].tolist() != x.tolist()
    x0, _ = make_spirals(5, 2, noise=0.0)
    t = np.linspace(0, 1, 5)
    np.testing.assert_allclose(x0.numpy()[5:], np.stack([t * np.sin(4 + 4 * t),
                                                          t * np.cos(4 + 4 * t)], 1), atol=1e-6)
    with pytest.raises(ValueError):
        make_spirals(0)


def test_spirals_not_linearly_separable():
    x, y = make_spirals(100, 3, noise=0.2, seed=0)
    a = np.c_[x.numpy(), np.ones(300)]
    w, *_ = np.linalg.lstsq(a, np.eye(3)[y.numpy()], rcond=None)
    assert (np.argmax(a @ w, 1) == y.numpy()).mean() < 0.7  # a linear fit fails


# ------------------------------------------------------------------ MNIST
def _write_idx(path, arr, code=0x08, gz=False):
    arr = np.asarray(arr)
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    body = arr.astype(arr.dtype.newbyteorder(">")).tobytes()
    (gzip.open if gz else open)(path, "wb").write(header + body)


@pytest.fixture
def mnist_dir(tmp_path):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    _write_idx(tmp_path / "train-images-idx3-ubyte", imgs)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", imgs[:2], gz=True)
    _write_idx(tmp_path / "t10k-labels.idx1-ubyte", labels[:2])
    return tmp_path, imgs, labels


def test_mnist_reads_idx(mnist_dir):
    root, imgs, labels = mnist_dir
    ds = MNIST(root)
    assert len(ds) == 5 and ds.data.dtype == em.uint8 and ds.targets.tolist() == [3, 1, 4, 1, 5]
    x, y = ds[2]
    assert tuple(x.shape) == (1, 28, 28) and int(y) == 4
    np.testing.assert_array_equal(x.numpy()[0], imgs[2].astype(np.float32) / 255)
    test = MNIST(str(root), train=False, transform=T.Compose([T.ToTensor(),
                                                              T.Normalize([0.5], [0.5])]))
    x, y = test[1]
    assert len(test) == 2 and float(x.min()) >= -1 and int(y) == 1
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert tuple(xb.shape) == (4, 1, 28, 28) and yb.tolist() == [3, 1, 4, 1]


def test_read_idx_types_and_errors(tmp_path):
    p = tmp_path / "f.idx"
    a = np.arange(6, dtype=np.int32).reshape(2, 3) - 3
    _write_idx(p, a, code=0x0C)
    out = read_idx(p)
    assert out.dtype == np.int32 and out.tolist() == a.tolist()
    _write_idx(p, np.array([1.5, -2.0]), code=0x0E)
    assert read_idx(p).tolist() == [1.5, -2.0]
    p.write_bytes(p.read_bytes()[:-3])
    with pytest.raises(ValueError, match="header promises shape"):
        read_idx(p)
    p.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(p)
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        MNIST(tmp_path)


# ------------------------------------------------------------------ CharText
def test_char_text_windows_vocab(tmp_path):
    ds = CharText("abcabd", block_size=3)
    assert ds.vocab == ["a", "b", "c", "d"] and ds.vocab_size == 4 and len(ds) == 3
    x, y = ds[1]
    assert x.dtype == em.int64 and ds.decode(x) == "bca" and ds.decode(y) == "cab"
    assert ds.decode(ds[-1][1]) == "abd"
    assert ds.encode("dab") == [3, 0, 1] and ds.decode([3, 0]) == "da"
    with pytest.raises(KeyError, match="'z'"):
        ds.encode("z")
    with pytest.raises(IndexError):
        ds[3]
    f = tmp_path / "t.txt"
    f.write_text("héllo\nwörld\n", encoding="utf-8")
    for src in (f, str(f)):
        fds = CharText(src, block_size=4)
        assert fds.text == "héllo\nwörld\n" and "\n" in fds.vocab
    with pytest.raises(ValueError, match="needs at least"):
        CharText("ab", block_size=2)
    xb, yb = next(iter(DataLoader(ds, batch_size=2)))
    assert tuple(xb.shape) == (2, 3) and (xb[:, 1:] == yb[:, :-1]).all()
