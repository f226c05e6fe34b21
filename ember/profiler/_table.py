"""``prof.key_averages()``: events grouped by name (and input shapes), and PyTorch's table.

The columns, widths and number formats follow ``torch.autograd.profiler_util``: Name,
Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, (CPU Mem, Self CPU Mem when
memory was profiled), # of Calls, (Input Shapes when grouped by them); percentages are
of the sum of all self times, printed last as ``Self CPU time total``.
"""
from __future__ import annotations

_SORT_KEYS = ("cpu_time", "cpu_time_total", "self_cpu_time_total", "cpu_memory_usage",
              "self_cpu_memory_usage", "count")


class FunctionEventAvg:
    """The totals of the events sharing a key (times in µs, memory in bytes)."""

    def __init__(self, key: str, input_shapes=None, stack=None):
        self.key = key
        self.input_shapes = input_shapes
        self.stack = stack
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0

    def add(self, ev) -> "FunctionEventAvg":
        self.count += 1
        self.cpu_time_total += ev.cpu_time_total
        self.self_cpu_time_total += ev.self_cpu_time_total
        self.cpu_memory_usage += ev.cpu_memory_usage
        self.self_cpu_memory_usage += ev.self_cpu_memory_usage
        return self

    @property
    def cpu_time(self) -> float:
        """Average total time per call in µs."""
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self) -> str:
        return (f"<FunctionEventAvg key={self.key} self_cpu_time="
                f"{_format_time(self.self_cpu_time_total)} cpu_time="
                f"{_format_time(self.cpu_time)} count={self.count}>")


class EventList(list):
    """A list of events (or their averages) that prints as PyTorch's table."""

    def __init__(self, items=(), profile_memory: bool = False, by_shape: bool = False,
                 by_stack: bool = False):
        super().__init__(items)
        self.profile_memory = profile_memory
        self.by_shape = by_shape
        self.by_stack = by_stack

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_name_column_width: int = 55, max_shapes_column_width: int = 80,
              header: str | None = None, top_level_events_only: bool = False) -> str:
        """The table PyTorch prints (``sort_by``: one of ``cpu_time_total``,
        ``self_cpu_time_total``, ``cpu_time``, ``cpu_memory_usage``,
        ``self_cpu_memory_usage``, ``count``; largest first)."""
        if sort_by is not None and sort_by not in _SORT_KEYS:
            raise ValueError(f"table: sort_by={sort_by!r} is not one of {', '.join(_SORT_KEYS)}")
        return build_table(self, sort_by, row_limit, max_name_column_width,
                           max_shapes_column_width, header)

    def total_average(self) -> FunctionEventAvg:
        tot = FunctionEventAvg("Total")
        for e in self:
            n = getattr(e, "count", 1)
            tot.add(e)
            tot.count += n - 1
        return tot

    def __str__(self) -> str:
        return self.table()


def key_averages(events, profile_memory: bool, group_by_input_shape: bool = False,
                 group_by_stack_n: int = 0) -> EventList:
    """Group ``events`` by name (and by input shapes, and by the innermost
    ``group_by_stack_n`` user frames, when asked), first-seen order."""
    groups: dict = {}
    for ev in events:
        shapes = ev.input_shapes if ev.input_shapes is not None else []
        stack = tuple((ev.stack or ())[:group_by_stack_n]) if group_by_stack_n else None
        key = (ev.name, str(shapes) if group_by_input_shape else None, stack)
        g = groups.get(key)
        if g is None:
            g = groups[key] = FunctionEventAvg(ev.name, shapes if group_by_input_shape else None,
                                               list(stack) if stack is not None else None)
        g.add(ev)
    return EventList(groups.values(), profile_memory, group_by_input_shape,
                     bool(group_by_stack_n))


def _format_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _format_memory(nbytes: int) -> str:
    kb, mb, gb = 1024, 1024 ** 2, 1024 ** 3
    if abs(nbytes) >= gb:
        return f"{nbytes / gb:.2f} GB"
    if abs(nbytes) >= mb:
        return f"{nbytes / mb:.2f} MB"
    if abs(nbytes) >= kb:
        return f"{nbytes / kb:.2f} KB"
    return f"{nbytes} B"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def build_table(events: EventList, sort_by, row_limit, max_name_width, max_shapes_width,
                header=None) -> str:
    rows = list(events)
    if sort_by is not None:
        rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
    total_self = sum(e.self_cpu_time_total for e in rows)
    if row_limit is not None and row_limit > 0:
        rows = rows[:row_limit]
    name_w = min(max((len(e.key) for e in rows), default=4) + 4, max_name_width)
    shapes_w = min(max((len(str(e.input_shapes)) for e in rows), default=12) + 4,
                   max_shapes_width)
    heads = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if events.profile_memory:
        heads += ["CPU Mem", "Self CPU Mem"]
    heads.append("# of Calls")
    widths = [name_w] + [12] * len(heads)
    heads = ["Name"] + heads
    if events.by_shape:
        heads.append("Input Shapes")
        widths.append(shapes_w)
    if events.by_stack:
        src_w = min(max((len(f) for e in rows for f in e.stack or ()), default=12) + 4, 80)
        heads.append("Source Location")
        widths.append(src_w)
    fmt = "".join("{:>" + str(w) + "}  " for w in widths)
    line = "".join("-" * w + "  " for w in widths)
    out = [header] if header else []
    out += [line, fmt.format(*heads), line]
    pct = (lambda t: f"{100.0 * t / total_self:.2f}%") if total_self > 0 else \
        (lambda t: "0.00%")
    for e in rows:
        cells = [_clip(e.key, name_w), pct(e.self_cpu_time_total),
                 _format_time(e.self_cpu_time_total), pct(e.cpu_time_total),
                 _format_time(e.cpu_time_total), _format_time(e.cpu_time)]
        if events.profile_memory:
            cells += [_format_memory(e.cpu_memory_usage), _format_memory(e.self_cpu_memory_usage)]
        cells.append(str(e.count))
        if events.by_shape:
            cells.append(_clip(str(e.input_shapes), shapes_w))
        if events.by_stack:
            cells.append(_clip((e.stack or [""])[0], src_w))
        out.append(fmt.format(*cells))
        for frame in (e.stack or [])[1:] if events.by_stack else ():
            out.append(fmt.format(*[""] * (len(cells) - 1), _clip(frame, src_w)))
    out.append(line)
    out.append(f"Self CPU time total: {_format_time(total_self)}")
    return "\n".join(out) + "\n"
