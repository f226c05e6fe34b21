"""``ember.hub``: checkpoints from URLs and models from a local ``hubconf.py`` (``torch.hub``).

``load_state_dict_from_url`` downloads a checkpoint once into ``get_dir()/checkpoints``
(atomically: a partial download never sits under the final name), checks its SHA-256
prefix when asked, and loads it with :func:`ember.load` — so the file must be an Ember
checkpoint or a safetensors file; a PyTorch pickle raises ``ember.load``'s error.
``load``/``list``/``help`` read a repository's ``hubconf.py`` from a local directory
(``source="local"``). Ember deliberately differs from PyTorch in not fetching GitHub
repositories: their ``hubconf.py`` imports ``torch`` and would run unreviewed code.

Example:
    >>> sd = ember.hub.load_state_dict_from_url("https://example.org/resnet-1a2b3c4d.safetensors",
    ...                                         check_hash=True)
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import urllib.parse

__all__ = ["get_dir", "set_dir", "download_url_to_file", "load_state_dict_from_url", "load",
           "list", "help"]

_dir: list = []      # set_dir's choice, if any
_HASH = re.compile(r"-([a-f0-9]*)\.")   # PyTorch's "<name>-<sha256 prefix>.<ext>"


def get_dir() -> str:
    """Where hub files go: ``set_dir``'s choice, else ``$EMBER_HUB``, else
    ``$EMBER_HOME/hub`` (``$EMBER_HOME`` defaults to ``$XDG_CACHE_HOME/ember`` or
    ``~/.cache/ember``)."""
    if _dir:
        return _dir[0]
    if os.environ.get("EMBER_HUB"):
        return os.path.expanduser(os.environ["EMBER_HUB"])
    home = os.environ.get("EMBER_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
        "ember")
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d) -> None:
    """Make ``d`` the hub directory for this process."""
    _dir[:] = [os.path.expanduser(os.fspath(d))]


def download_url_to_file(url: str, dst, hash_prefix: str | None = None,
                         progress: bool = True) -> None:
    """Download ``url`` to ``dst``: into a temporary file beside it, checked against
    ``hash_prefix`` (the start of its SHA-256 hex digest) when given, then renamed.

    Raises:
        RuntimeError: the digest does not start with ``hash_prefix`` (nothing is left
            at ``dst``).
    """
    dst = os.path.expanduser(os.fspath(dst))
    folder = os.path.dirname(os.path.abspath(dst))
    os.makedirs(folder, exist_ok=True)
    sha = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".partial-", dir=folder)
    try:
        import urllib.request     # NOTE: lazily: http/ssl/email cost ~45 ms at `import ember`
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url) as resp:  # noqa: S310
            total = resp.headers.get("Content-Length")
            bar = _progress(progress, int(total) if total else None)
            while True:
                chunk = resp.read(1 << 16)
                if not chunk:
                    break
                out.write(chunk)
                sha.update(chunk)
                if bar is not None:
                    bar.update(len(chunk))
            if bar is not None:
                bar.close()
        if hash_prefix is not None:
            digest = sha.hexdigest()
            if not digest.startswith(hash_prefix):
                raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                                   f'"{digest}") for {url}')
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _progress(on: bool, total):
    if not on:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr)


def load_state_dict_from_url(url: str, model_dir=None, map_location=None, progress: bool = True,
                             check_hash: bool = False, file_name: str | None = None,
                             weights_only: bool = False):
    """The checkpoint at ``url``, downloaded once into ``model_dir`` (default
    ``get_dir()/checkpoints``) and read with :func:`ember.load` (``map_location`` as there).

    ``check_hash``: the file name's ``-<hex>.`` part must prefix its SHA-256 digest.
    """
    from .serialization import load as _load
    model_dir = os.path.join(get_dir(), "checkpoints") if model_dir is None else \
        os.path.expanduser(os.fspath(model_dir))
    os.makedirs(model_dir, exist_ok=True)
    name = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    cached = os.path.join(model_dir, name)
    if not os.path.exists(cached):
        prefix = None
        if check_hash:
            m = _HASH.search(name)
            prefix = m.group(1) if m else None
        sys.stderr.write(f'Downloading: "{url}" to {cached}\n')
        download_url_to_file(url, cached, prefix, progress=progress)
    return _load(cached, map_location=map_location)


def _hubconf(repo_or_dir: str, source: str):
    if source != "local":
        raise RuntimeError(
            f"ember.hub: source={source!r} is not supported: Ember does not fetch repositories "
            f"(their hubconf.py imports torch and would run unreviewed code). Clone "
            f"{repo_or_dir!r} yourself and pass its directory with source='local'")
    path = os.path.join(os.path.expanduser(repo_or_dir), "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"ember.hub: no hubconf.py in {repo_or_dir!r}")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(os.path.dirname(path))
    missing = [d for d in getattr(mod, "dependencies", []) if
               importlib.util.find_spec(d) is None]
    if missing:
        raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
    return mod


def _entry(mod, model: str):
    fn = getattr(mod, model, None)
    if fn is None or not callable(fn):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return fn


def list(github: str, force_reload: bool = False, skip_validation: bool = False,  # noqa: A001
         trust_repo=None, verbose: bool = True, source: str = "local"):
    """The entrypoints (public callables) of ``github``'s ``hubconf.py`` (a local dir)."""
    mod = _hubconf(github, source)
    return [n for n in dir(mod) if callable(getattr(mod, n)) and not n.startswith("_")]


def help(github: str, model: str, force_reload: bool = False, skip_validation: bool = False,  # noqa: A001
         trust_repo=None, source: str = "local") -> str:
    """The docstring of entrypoint ``model``."""
    return _entry(_hubconf(github, source), model).__doc__


def load(repo_or_dir: str, model: str, *args, source: str = "local", trust_repo=None,
         force_reload: bool = False, verbose: bool = True, skip_validation: bool = False,
         **kwargs):
    """``model(*args, **kwargs)`` from ``repo_or_dir``'s ``hubconf.py``.

    Ember's default ``source`` is ``"local"`` (PyTorch's is ``"github"``, which Ember
    refuses: see the module docstring).
    """
    return _entry(_hubconf(repo_or_dir, source), model)(*args, **kwargs)
