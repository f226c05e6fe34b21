"""``ember.utils.benchmark``: Timer blocks, Measurement statistics (PyTorch's where it is
installed), Compare's table, the thread count restored."""
import numpy as np
import pytest

import ember as em
from ember.utils import benchmark


def test_measurement_statistics():
    spec = benchmark.TaskSpec("x * 2", label="mul", sub_label="100", description="ember")
    raw = [0.2, 0.4, 0.6, 1.0, 0.5]
    m = benchmark.Measurement(2, raw, spec)
    per_run = np.array(raw) / 2
    assert m.times == list(per_run) and m.mean == pytest.approx(per_run.mean())
    assert m.median == pytest.approx(np.median(per_run))
    assert m.iqr == pytest.approx(np.percentile(per_run, 75) - np.percentile(per_run, 25))
    assert m.title == "mul: 100" and "Median" in repr(m) and "5 measurements" in repr(m)
    torch_bench = pytest.importorskip("torch.utils.benchmark")
    tm = torch_bench.Measurement(2, raw, torch_bench.utils.common.TaskSpec(
        "x * 2", "pass", label="mul", sub_label="100", description="ember"))
    assert (m.median, m.mean, m.iqr) == pytest.approx((tm.median, tm.mean, tm.iqr))


def test_timer_blocks_and_thread_count():
    x = em.ones(100)
    before = em.get_num_threads()
    t = benchmark.Timer("x * 2", globals={"x": x}, label="mul", sub_label="100",
                        description="ember", num_threads=1)
    m = t.timeit(20)
    assert m.number_per_run == 20 and len(m.raw_times) == 1 and m.median > 0
    calls = []
    m2 = t.blocked_autorange(callback=lambda n, s: calls.append((n, s)), min_run_time=0.02)
    assert sum(m2.raw_times) >= 0.02 and len(calls) == len(m2.raw_times)
    assert all(n == m2.number_per_run for n, _ in calls)
    assert str(m2.number_per_run).strip("0") == "1"        # block sizes 1, 10, 100...
    m3 = t.adaptive_autorange(threshold=0.5, min_run_time=0.01, max_run_time=0.5)
    assert len(m3.raw_times) >= 1
    assert em.get_num_threads() == before
    with pytest.raises(ZeroDivisionError):
        benchmark.Timer("1 / 0").timeit(1)


def test_compare_table():
    spec = benchmark.TaskSpec
    ms = [benchmark.Measurement(1, [2e-6], spec("a", label="add", sub_label=str(n),
                                                description=d)) for n in (10, 100)
          for d in ("ember", "torch")]
    text = str(benchmark.Compare(ms))
    for want in ("add", "ember", "torch", "10", "100", "Times are in microseconds (us)."):
        assert want in text
    assert text.count("2.0") == 4
