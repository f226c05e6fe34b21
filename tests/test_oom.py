"""Out-of-memory reports: the largest live tensors, the lines that made them, a budget."""
import gc
import inspect
import re

import pytest

import ember as em
import ember.nn as nn


@pytest.fixture(autouse=True)
def no_limit():
    # free earlier tests' garbage first: collected during a test, it would lower
    # current_bytes below the baseline a limit was set from, and the limit would not bite
    gc.collect()
    em.set_memory_limit(None)
    em.record_allocation_sites(False)
    yield
    em.set_memory_limit(None)
    em.record_allocation_sites(False)


def _line(offset=0):
    """``file:line`` of the caller's line (+ offset)."""
    f = inspect.currentframe().f_back
    return f"{f.f_code.co_filename}:{f.f_lineno + offset}"


def test_report_names_largest_tensors_their_lines_and_the_failing_line():
    em.set_memory_limit(em.memory_stats()["current_bytes"] + 3_000_000)
    big_line = _line(1)
    big = em.zeros(500, 1000)                        # 2 000 000 bytes
    small_line = _line(1)
    small = em.ones(100, 1000, dtype=em.float64)     #   800 000 bytes
    fail_line = _line(2)
    with pytest.raises(MemoryError) as ei:
        em.zeros(1000, 1000)
    msg = str(ei.value)
    rows = [ln for ln in msg.splitlines() if " bytes (" in ln and "float" in ln]
    assert "2000000 bytes" in rows[0] and "[500, 1000]" in rows[0] and "float32" in rows[0]
    assert rows[0].endswith(big_line)
    assert "800000 bytes" in rows[1] and "float64" in rows[1] and rows[1].endswith(small_line)
    assert f"allocating 4000000 bytes (3.8 MiB) at {fail_line}" in msg
    assert "memory_budget=" in msg and "checkpoint" in msg
    need = int(re.search(r"set_memory_limit\((\d+)\)", msg).group(1))
    assert need == em.memory_stats()["current_bytes"] + 4_000_000
    del big, small


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 2048)
        self.fc2 = nn.Linear(2048, 256)

    def forward(self, x):
        h = self.fc1(x).relu()          # the big activation: (512, 2048) float32, 4 MiB
        return self.fc2(h)


def test_report_points_into_the_users_forward():
    em.manual_seed(0)
    net = _Net()
    x = em.randn(512, 256)
    src, start = inspect.getsourcelines(_Net.forward)
    line = start + next(i for i, s in enumerate(src) if "the big activation" in s)
    em.set_memory_limit(em.memory_stats()["current_bytes"] + 9 * 2**20)
    with pytest.raises(MemoryError) as ei:
        for _ in range(3):
            net(x).sum().backward()
    rows = [ln for ln in str(ei.value).splitlines() if "[512, 2048]" in ln]
    # the activation points at the forward's line (its gradient, if alive, at backward's)
    assert any(r.endswith(f"{__file__}:{line}") for r in rows), rows


def test_checkpointing_fits_where_the_plain_step_does_not():
    em.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [nn.Linear(128, 128), nn.ReLU()]
    model = nn.Sequential(*layers)
    for p in model.parameters():
        p.grad = em.zeros_like(p)
    x = em.randn(1024, 128)
    act = 1024 * 128 * 4
    em.set_memory_limit(em.memory_stats()["current_bytes"] + 10 * act)
    with pytest.raises(MemoryError, match="out of memory"):
        model(x).sum().backward()
    em.checkpoint_sequential(model, 4, x).sum().backward()   # fits under the same limit


def test_record_allocation_sites_without_limit():
    em.record_allocation_sites(True)
    assert em.memory_stats()["limit_bytes"] is None
    line = _line(1)
    t = em.zeros(12345)
    rows = [r for r in em.memory.live_tensors() if r[1] == (12345,)]
    assert rows and rows[0][3] == line
    em.record_allocation_sites(False)
    u = em.zeros(54321)
    rows = [r for r in em.memory.live_tensors() if r[1] == (54321,)]
    assert rows and rows[0][3] is None
    del t, u


def test_bad_limit():
    with pytest.raises(ValueError, match="set_memory_limit: expected a number of bytes"):
        em.set_memory_limit(-5)
