"""The kernel cache never loads code other users could have planted (issue 14, item 6).

A planted shared object's constructor writes a marker file: the tests assert the marker
never appears when the cache folder (or a folder above it, or the file) is writable by
group/others, is a symlink or belongs to another user -- and, as a control that the marker
works, that it does appear when the same entry sits in a private folder. Then: folders and
files are created private, the size bound evicts least recently used entries, stale
temporaries of killed builds go (live ones stay), ``ember cache info/clear``, and a hit in
memory touches neither the disk nor the hash.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import ember
from ember import cli
from ember.codegen import cache, cache_cli, eager, find_compiler, toolchain
from ember.codegen import cache_fs as fs

SOURCE = "int ember_answer(void) { return 42; }\n"
PLANT = r"""
#include <stdio.h>
__attribute__((constructor)) static void plant(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("planted code ran", f); fclose(f); }
}
int ember_answer(void) { return 666; }
"""


@pytest.fixture
def fresh(cc, monkeypatch):
    """No memo of loaded libraries, warnings shown again; the memo dropped again after."""
    cache.forget_loaded()
    monkeypatch.setattr(cache, "_warned", set())
    yield
    cache.forget_loaded()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """``(so bytes, marker path)`` of an object whose constructor writes the marker."""
    cc = find_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("plant")
    marker = d / "MARKER"
    (d / "p.c").write_text(PLANT % marker)
    toolchain.compile_shared(cc, str(d / "p.c"), str(d / "p.so"))
    return (d / "p.so").read_bytes(), marker


def _plant(folder, key, data):
    """Write an entry an attacker would: the object and its (matching) checksum."""
    (folder / f"{key}.so").write_bytes(data)
    (folder / f"{key}.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")


def _load_planted(monkeypatch, folder, planted, source=SOURCE):
    data, marker = planted
    if marker.exists():
        marker.unlink()
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(folder))
    _plant(folder, cache.cache_key(source, find_compiler()), data)
    return cache.load(source, find_compiler()), marker


def test_control_planted_entry_in_private_folder_is_loaded(fresh, monkeypatch, tmp_path,
                                                           planted):
    # NOTE: shows the marker detects a load: a private folder is trusted (it is the user's)
    d = tmp_path / "private"
    d.mkdir(mode=0o700)
    lib, marker = _load_planted(monkeypatch, d, planted)
    assert marker.exists() and lib.ember_answer() == 666


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757, 0o722])
def test_planted_so_in_group_or_world_writable_folder_is_not_loaded(fresh, monkeypatch,
                                                                   tmp_path, planted, mode):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(mode)
    with pytest.warns(cache.KernelCacheWarning, match=f"{d}.*not writable by group/others"):
        lib, marker = _load_planted(monkeypatch, d, planted)
    assert not marker.exists()
    assert lib.ember_answer() == 42                 # built fresh, in a private folder
    assert cache.cache_dir() != str(d)
    assert oct(os.stat(cache.cache_dir()).st_mode & 0o777) == oct(0o700)


@pytest.mark.parametrize("sticky", [False, True])
def test_writable_folder_above_the_cache(fresh, monkeypatch, tmp_path, planted, sticky):
    up = tmp_path / "up"
    up.mkdir()
    up.chmod(0o1777 if sticky else 0o777)
    d = up / "kernels"
    d.mkdir(mode=0o700)
    if sticky:                   # /tmp-like: nobody else may rename our folder: trusted
        lib, marker = _load_planted(monkeypatch, d, planted)
        assert marker.exists() and cache.cache_dir() == str(d)
        return
    with pytest.warns(cache.KernelCacheWarning, match=f"{up}.*unless sticky"):
        lib, marker = _load_planted(monkeypatch, d, planted)
    assert not marker.exists() and lib.ember_answer() == 42


def test_symlinked_cache_folder_is_checked_at_its_target(fresh, monkeypatch, tmp_path, planted):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(shared)
    with pytest.warns(cache.KernelCacheWarning, match=str(shared)):
        lib, marker = _load_planted(monkeypatch, link, planted)
    assert not marker.exists() and lib.ember_answer() == 42


@pytest.mark.parametrize("how", ["world_writable_so", "world_writable_checksum", "symlink"])
def test_untrusted_file_in_private_folder_is_ignored_and_rebuilt(fresh, monkeypatch, tmp_path,
                                                                 planted, how):
    d = tmp_path / "kernels"
    d.mkdir(mode=0o700)
    data, marker = planted
    key = cache.cache_key(SOURCE, find_compiler())
    if how == "symlink":
        elsewhere = tmp_path / "elsewhere.so"
        elsewhere.write_bytes(data)
        (d / f"{key}.so").symlink_to(elsewhere)
        (d / f"{key}.sha256").write_text(hashlib.sha256(data).hexdigest())
    else:
        _plant(d, key, data)
        (d / f"{key}.{'so' if how == 'world_writable_so' else 'sha256'}").chmod(0o666)
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(d))
    with pytest.warns(cache.KernelCacheWarning, match=f"{d / key}"):
        lib = cache.load(SOURCE, find_compiler())
    assert not marker.exists() and lib.ember_answer() == 42
    so = d / f"{key}.so"
    assert not so.is_symlink() and os.stat(so).st_mode & 0o777 == 0o600   # replaced


def test_folder_of_another_user_is_refused(fresh, monkeypatch, tmp_path):
    d = tmp_path / "kernels"
    d.mkdir(mode=0o700)
    monkeypatch.setattr(fs, "uid", lambda: 4242)        # NOTE: as if we were user 4242
    with pytest.raises(fs.UnsafeCacheError, match=f"{d}.*owned by uid 4242"):
        os.close(fs.open_dir(str(d)))
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(d))
    assert cache_cli.info()["check"].startswith("refused")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_chowned_folder_and_file_are_refused_as_root(fresh, monkeypatch, tmp_path, planted):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 4242, 4242)
    with pytest.warns(cache.KernelCacheWarning, match=f"{d}.*owner uid 4242"):
        lib, marker = _load_planted(monkeypatch, d, planted)
    assert not marker.exists() and lib.ember_answer() == 42
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    key = cache.cache_key(SOURCE, find_compiler())
    _plant(mine, key, planted[0])
    os.chown(mine / f"{key}.so", 4242, 4242)
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(mine))
    cache.forget_loaded()
    with pytest.warns(cache.KernelCacheWarning, match=f"{mine / key}.so.*owner uid 4242"):
        assert cache.load(SOURCE, find_compiler()).ember_answer() == 42
    assert not marker.exists()


def test_eager_mode_never_runs_a_planted_kernel(fresh, monkeypatch, tmp_path, planted):
    prev = ember.config.set_eager_kernels(True)
    eager.configure(thresholds={"sinh": 1}, warmup=0)
    try:
        own = tmp_path / "own"
        monkeypatch.setenv("EMBER_KERNEL_CACHE", str(own))
        x = ember.rand(300)
        want = ember.sinh(x).numpy()
        keys = [p[:-3] for p in os.listdir(own) if p.endswith(".so")]
        assert keys                                  # the eager kernel went through the cache
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        for key in keys:
            _plant(shared, key, planted[0])
        monkeypatch.setenv("EMBER_KERNEL_CACHE", str(shared))
        cache.forget_loaded()
        eager.configure(thresholds={"sinh": 1}, warmup=0)    # drop the compiled-kernel memo
        with pytest.warns(cache.KernelCacheWarning, match=str(shared)):
            got = ember.sinh(x).numpy()
        assert not planted[1].exists()
        np.testing.assert_array_equal(got, want)
    finally:
        eager.configure(reset=True)
        ember.config.set_eager_kernels(prev)


def test_created_folders_and_files_are_private_whatever_the_umask(fresh, monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_KERNEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0)
    try:
        assert cache.load(SOURCE, find_compiler()).ember_answer() == 42
    finally:
        os.umask(old)
    d = tmp_path / "xdg" / "ember" / "kernels"
    for folder in (tmp_path / "xdg", d.parent, d):
        assert os.stat(folder).st_mode & 0o777 == 0o700, folder
    files = os.listdir(d)
    assert {f.rsplit(".", 1)[1] for f in files} == {"so", "sha256", "c"}
    assert all(os.stat(d / f).st_mode & 0o777 == 0o600 for f in files)


def test_load_goes_through_the_checked_folder_descriptor(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    seen = []
    real = cache.ctypes.CDLL
    monkeypatch.setattr(cache.ctypes, "CDLL", lambda p: seen.append(p) or real(p))
    assert cache.load(SOURCE, find_compiler()).ember_answer() == 42
    (path,) = seen
    assert path.startswith("/proc/self/fd/") and os.path.basename(path).startswith(".load-")
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]   # copy unlinked


def test_hit_in_memory_neither_hashes_nor_touches_the_disk(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    cc = find_compiler()
    lib = cache.load(SOURCE, cc)

    def banned(*a, **k):
        raise AssertionError("the in-memory hit touched the disk or hashed the source")
    with monkeypatch.context() as m:
        for mod, name in ((cache.hashlib, "sha256"), (os, "open"), (os, "stat"),
                          (os, "fstat")):
            m.setattr(mod, name, banned)
        again = cache.load(SOURCE, cc)
    assert again is lib


def _sources(n):
    return [f"int ember_v{i:03d}(void) {{ return {i}; }}\n" for i in range(n)]


def _entry_bytes(d):
    return sum(os.stat(d / p).st_size for p in os.listdir(d) if not p.startswith("."))


def test_size_bound_evicts_least_recently_used(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    cc = find_compiler()
    a, b, c, d = _sources(4)
    for s in (a, b, c):
        cache.load(s, cc)
    one = _entry_bytes(tmp_path) / 3
    for s, used in ((a, 1000), (b, 3000), (c, 2000)):      # b used last, then c, then a
        os.utime(tmp_path / f"{cache.cache_key(s, cc)}.so", (used, used))
    bound = int(one * 3.2)
    monkeypatch.setenv("EMBER_KERNEL_CACHE_MAX_BYTES", str(bound))
    before = cache.stats["evicted"]
    cache.load(d, cc)                       # 4 entries > bound: down to 90 % of it
    assert _entry_bytes(tmp_path) <= bound
    left = {p[:-3] for p in os.listdir(tmp_path) if p.endswith(".so")}
    assert left == {cache.cache_key(s, cc) for s in (b, d)}
    assert cache.stats["evicted"] == before + 2


def test_loading_an_entry_refreshes_its_place_in_the_lru(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    cc = find_compiler()
    a = _sources(1)[0]
    cache.load(a, cc)
    so = tmp_path / f"{cache.cache_key(a, cc)}.so"
    os.utime(so, (1000, 1000))
    cache.forget_loaded()
    cache.load(a, cc)                                      # a disk hit
    assert os.stat(so).st_atime > time.time() - 60


@pytest.mark.parametrize("raw,want", [("", 512 << 20), ("1000", 1000), ("64M", 64 << 20),
                                      ("2g", 2 << 30)])
def test_max_bytes_env(monkeypatch, raw, want):
    monkeypatch.setenv("EMBER_KERNEL_CACHE_MAX_BYTES", raw)
    assert cache.max_bytes() == want


@pytest.mark.parametrize("raw", ["-5", "0", "lots", "12T"])
def test_max_bytes_env_rejects_nonsense(monkeypatch, raw):
    monkeypatch.setenv("EMBER_KERNEL_CACHE_MAX_BYTES", raw)
    with pytest.raises(ValueError, match="EMBER_KERNEL_CACHE_MAX_BYTES.*positive number"):
        cache.max_bytes()


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_stale_temporaries_of_killed_builds_are_removed(fresh, monkeypatch, tmp_path):
    dead, live = _dead_pid(), os.getppid()
    names = {f".tmp-{dead}-aa.so": True, f".tmp-{dead}-bb.so": False,
             f".tmp-{live}-cc.so": False, f".load-{live}-dd.so": True, ".load-ee.so": True}
    ages = {f".tmp-{dead}-bb.so": 1, f".load-{live}-dd.so": 3600}
    for name in names:
        (tmp_path / name).write_bytes(b"partial")
        _age(tmp_path / name, ages.get(name, 120))
    build = tmp_path / f".build-{dead}-ff"
    build.mkdir()
    (build / "k.c").write_text("int x;")
    _age(build, 120)
    names[build.name] = True
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    cache.cache_dir()                                       # first use in this process
    left = set(os.listdir(tmp_path))
    assert left == {n for n, stale in names.items() if not stale}


def test_cli_cache_info_and_clear(fresh, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "k"))
    monkeypatch.setenv("EMBER_KERNEL_CACHE_MAX_BYTES", "64M")
    assert cli.main(["cache", "info"]) == 0
    assert "check:      missing" in capsys.readouterr().out
    cc = find_compiler()
    for s in _sources(2):
        cache.load(s, cc)
    total = _entry_bytes(tmp_path / "k")
    live = tmp_path / "k" / f".tmp-{os.getpid()}-zz"
    live.write_bytes(b"a build in progress")
    (tmp_path / "k" / "NOTES.txt").write_text("a user's file: neither counted nor removed")
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"path:       {tmp_path / 'k'}\n" in out and "check:      ok\n" in out
    assert "entries:    2\n" in out and f"bytes:      {total} bytes" in out
    assert f"bound:      {64 << 20} bytes (64.0 MiB)" in out
    assert cli.main(["cache", "clear"]) == 0
    assert f"removed 2 kernel entries, {total} bytes" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "k")) == [live.name, "NOTES.txt"]   # live build's
    assert cache.load(_sources(1)[0], cc).ember_v000() == 0  # memo dropped: rebuilt


def test_cli_refuses_to_clear_a_shared_folder(fresh, monkeypatch, tmp_path, capsys):
    d = tmp_path / "shared"
    d.mkdir()
    (d / "abc.so").write_bytes(b"someone's")
    d.chmod(0o777)
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(d))
    assert cli.main(["cache", "info"]) == 1
    assert f"check:      refused: kernel cache: {d}" in capsys.readouterr().out
    assert cli.main(["cache", "clear"]) == 1
    assert "refusing to delete" in capsys.readouterr().out
    assert os.listdir(d) == ["abc.so"]


def test_private_fallback_folders_of_dead_processes_are_removed(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(cache, "_private", {})
    dead, live = _dead_pid(), os.getppid()
    for name, age in ((f"ember-kernels-{dead}-aa", 120), (f"ember-kernels-{live}-bb", 86400),
                      (f"ember-kernels-{dead}-cc", 1), ("ember-other-dd", 86400)):
        (tmp_path / name).mkdir()
        _age(tmp_path / name, age)
    mine = cache._private_dir()
    left = set(os.listdir(tmp_path))
    assert left == {f"ember-kernels-{live}-bb", f"ember-kernels-{dead}-cc", "ember-other-dd",
                    os.path.basename(mine)}
    assert os.stat(mine).st_mode & 0o777 == 0o700
    cache._remove_private()                       # what exit does
    assert not os.path.exists(mine)


def test_refusal_warning_is_shown_under_default_filters(tmp_path):
    # NOTE: ember ignores RuntimeWarnings from its own modules (dispatch.py): this must show
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    code = "import ember; from ember.codegen import cache; print(cache.cache_dir())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "EMBER_KERNEL_CACHE": str(d), "PYTHONWARNINGS": ""},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"KernelCacheWarning: kernel cache: {d}" in r.stderr
    assert r.stdout.strip() != str(d)


def test_unusable_folder_falls_back_with_a_warning(fresh, monkeypatch, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    d = tmp_path / "file" / "kernels"
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(d))
    with pytest.warns(cache.KernelCacheWarning, match=f"{d}.*cached in .* for this process"):
        assert cache.load(SOURCE, find_compiler()).ember_answer() == 42


def test_concurrent_processes_share_one_folder(cc, tmp_path):
    # NOTE: each process's startup cleanup must leave the others' live builds alone
    code = ("import sys; from ember.codegen import cache, find_compiler\n"
            "cc = find_compiler(); n = int(sys.argv[1])\n"
            "srcs = [f'int ember_v{i}(void) {{ return {i}; }}' for i in range(3)]\n"
            "srcs.append(f'int ember_v{n + 10}(void) {{ return {n + 10}; }}')\n"
            "for i, s in enumerate(srcs):\n"
            "    want = i if i < 3 else n + 10\n"
            "    assert getattr(cache.load(s, cc), f'ember_v{want}')() == want\n")
    env = {**os.environ, "EMBER_KERNEL_CACHE": str(tmp_path), "PYTHONWARNINGS": "error"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(n)], env=env,
                              stderr=subprocess.PIPE, text=True) for n in range(3)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    names = os.listdir(tmp_path)
    assert not [n for n in names if n.startswith(".")]
    assert len([n for n in names if n.endswith(".so")]) == 6
