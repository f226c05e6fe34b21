"""``ember.utils.benchmark``: ``torch.utils.benchmark``'s ``Timer``, ``Measurement`` and
``Compare`` for benchmark scripts written against PyTorch.

``Timer`` runs ``stmt`` through :mod:`timeit` with ``setup`` and ``globals``, with Ember's
intra-op thread count set to ``num_threads`` while it measures (default 1, as PyTorch).
The statistics are PyTorch's: per-run times, their mean, median and interquartile range.

Example:
    >>> t = Timer("x * 2", globals={"x": ember.ones(100)}, label="mul", description="ember")
    >>> m = t.blocked_autorange(min_run_time=0.1)
    >>> m.median            # seconds per run
"""
from __future__ import annotations

import statistics
import timeit
from dataclasses import dataclass

__all__ = ["Timer", "Measurement", "Compare", "TaskSpec", "Language", "select_unit"]


class Language:
    """``Language.PYTHON`` (Ember times Python statements only)."""
    PYTHON = 0


@dataclass(frozen=True)
class TaskSpec:
    """What a :class:`Timer` measures, with the labels a :class:`Compare` groups by."""
    stmt: str
    setup: str = "pass"
    global_setup: str = ""
    label: str | None = None
    sub_label: str | None = None
    description: str | None = None
    env: str | None = None
    num_threads: int = 1

    @property
    def title(self) -> str:
        return (f"{self.label}: {self.sub_label}" if self.label and self.sub_label else
                self.label or self.sub_label or self.stmt)


def select_unit(t: float) -> tuple:
    """``(unit name, seconds per unit)`` for showing ``t`` seconds."""
    for unit, scale in (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3)):
        if t < scale * 1e3:
            return unit, scale
    return "s", 1.0


@dataclass
class Measurement:
    """``raw_times`` (seconds per block of ``number_per_run`` runs) of one task."""
    number_per_run: int
    raw_times: list
    task_spec: TaskSpec
    metadata: dict | None = None

    @property
    def times(self) -> list:
        """Seconds per run, one per block."""
        return [t / self.number_per_run for t in self.raw_times]

    def _q(self, q: float) -> float:
        ts = sorted(self.times)
        if len(ts) == 1:
            return ts[0]
        pos = q * (len(ts) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(ts) - 1)
        return ts[lo] + (ts[hi] - ts[lo]) * (pos - lo)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def median(self) -> float:
        return self._q(0.5)

    @property
    def iqr(self) -> float:
        return self._q(0.75) - self._q(0.25)

    @property
    def has_warnings(self) -> bool:
        """Whether the spread is large (IQR over 10 % of the median) or runs are few."""
        return self.median > 0 and (self.iqr / self.median > 0.1 or len(self.times) < 4)

    @property
    def title(self) -> str:
        return self.task_spec.title

    @property
    def env(self):
        return self.task_spec.env

    @property
    def stmt(self) -> str:
        return self.task_spec.stmt

    def __repr__(self) -> str:
        unit, scale = select_unit(self.median)
        spec = self.task_spec
        lines = [f"<ember.utils.benchmark.Measurement object at {id(self):#x}>", spec.title]
        if spec.description:
            lines.append(spec.description)
        if spec.setup != "pass":
            lines.append(f"setup: {spec.setup}")
        n = len(self.times)
        if n > 1:
            lines.append(f"  Median: {self.median / scale:.2f} {unit}")
            lines.append(f"  IQR:    {self.iqr / scale:.2f} {unit}")
        else:
            lines.append(f"  {self.median / scale:.2f} {unit}")
        lines.append(f"  {n} measurement{'s' if n > 1 else ''}, {self.number_per_run} runs "
                     f"per measurement, {spec.num_threads} thread"
                     f"{'s' if spec.num_threads > 1 else ''}")
        return "\n".join(lines)


class Timer:
    """Time ``stmt`` (``torch.utils.benchmark.Timer``; Python statements only)."""

    def __init__(self, stmt: str = "pass", setup: str = "pass", global_setup: str = "",
                 timer=timeit.default_timer, globals: dict | None = None,
                 label: str | None = None, sub_label: str | None = None,
                 description: str | None = None, env: str | None = None,
                 num_threads: int = 1, language=Language.PYTHON):
        if language not in (Language.PYTHON, "py", "python"):
            raise ValueError("ember.utils.benchmark.Timer times Python statements only")
        self._spec = TaskSpec(stmt, setup, global_setup, label, sub_label, description, env,
                              num_threads)
        if global_setup:
            exec(global_setup, globals if globals is not None else {})  # noqa: S102
        self._timer = timeit.Timer(stmt=stmt, setup=setup, timer=timer,
                                   globals=dict(globals or {}))

    def _run(self, number: int) -> float:
        from .._threads import get_num_threads, set_num_threads
        prev = get_num_threads()
        set_num_threads(self._spec.num_threads)
        try:
            return self._timer.timeit(number)
        finally:
            set_num_threads(prev)

    def timeit(self, number: int = 1000000) -> Measurement:
        """One block of ``number`` runs (after one warm-up run)."""
        self._run(1)
        return Measurement(number, [self._run(number)], self._spec)

    def repeat(self, repeat: int = -1, number: int = -1):
        raise NotImplementedError("Timer.repeat: use timeit() or blocked_autorange()")

    def blocked_autorange(self, callback=None, min_run_time: float = 0.2) -> Measurement:
        """Blocks of runs, each block long enough to time well (at least 0.1 ms), until
        ``min_run_time`` seconds in all; ``callback(number, seconds)`` after each block."""
        number = 1
        while True:                 # NOTE: PyTorch's block size: 1, 10, 100... up to 0.1 ms
            t = self._run(number)
            if t >= 1e-4 or number >= 10 ** 9:
                break
            number *= 10
        times, total = [], 0.0
        while total < min_run_time or not times:
            t = self._run(number)
            times.append(t)
            total += t
            if callback is not None:
                callback(number, t)
        return Measurement(number, times, self._spec)

    def adaptive_autorange(self, threshold: float = 0.1, *, min_run_time: float = 0.01,
                           max_run_time: float = 10.0, callback=None) -> Measurement:
        """Blocks until the IQR is under ``threshold`` of the median (after at least
        ``min_run_time`` seconds and 3 blocks), or ``max_run_time`` seconds have passed."""
        m = self.blocked_autorange(callback, min_run_time=min_run_time)
        times, total = list(m.raw_times), sum(m.raw_times)
        while total < max_run_time:
            cur = Measurement(m.number_per_run, times, self._spec)
            if len(times) >= 3 and cur.iqr <= threshold * cur.median:
                return cur
            t = self._run(m.number_per_run)
            times.append(t)
            total += t
            if callback is not None:
                callback(m.number_per_run, t)
        return Measurement(m.number_per_run, times, self._spec)


class Compare:
    """A table of :class:`Measurement` medians: one per ``label``, rows by ``sub_label``
    (and thread count), columns by ``description``."""

    def __init__(self, results):
        self._results = list(results)
        self._trim = False

    def trim_significant_figures(self) -> None:
        self._trim = True

    def colorize(self, rowwise: bool = False) -> None:
        return None      # NOTE: plain text only

    def highlight_warnings(self) -> None:
        return None

    def extend_results(self, results) -> None:
        self._results.extend(results)

    def __str__(self) -> str:
        out = []
        labels = list(dict.fromkeys(m.task_spec.label for m in self._results))
        for label in labels:
            ms = [m for m in self._results if m.task_spec.label == label]
            cols = list(dict.fromkeys(m.task_spec.description or "" for m in ms))
            rows = list(dict.fromkeys((m.task_spec.num_threads, m.task_spec.sub_label or
                                       m.task_spec.stmt) for m in ms))
            unit, scale = select_unit(min(m.median for m in ms))
            cell = {(m.task_spec.num_threads, m.task_spec.sub_label or m.task_spec.stmt,
                     m.task_spec.description or ""): m.median / scale for m in ms}
            w0 = max(len(r[1]) for r in rows) + 2
            ws = [max(len(c), 8) for c in cols]
            fmt = "{:.3g}" if self._trim else "{:.1f}"
            out.append(f"[{'-' * 6} {label or ''} {'-' * 6}]")
            out.append(" " * w0 + " |  " + "  |  ".join(c.rjust(w) for c, w in zip(cols, ws)))
            threads = None
            for th, sub in rows:
                if th != threads:
                    out.append(f"{th} threads: " + "-" * 10)
                    threads = th
                vals = [fmt.format(cell[(th, sub, c)]) if (th, sub, c) in cell else ""
                        for c in cols]
                out.append(f"  {sub}".ljust(w0) + " |  " +
                           "  |  ".join(v.rjust(w) for v, w in zip(vals, ws)))
            out.append("")
            out.append(f"Times are in {_UNIT_NAMES[unit]} ({unit}).")
            out.append("")
        return "\n".join(out)

    def print(self) -> None:
        print(str(self))


_UNIT_NAMES = {"ns": "nanoseconds", "us": "microseconds", "ms": "milliseconds", "s": "seconds"}
