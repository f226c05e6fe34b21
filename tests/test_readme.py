"""Every ```python block of README.md runs as written and prints what it says it prints.

Conventions for README snippets (whoever adds a section):

* Each ```python block is a whole program: it runs on its own, in a fresh interpreter,
  in an empty temporary directory, within :data:`TIMEOUT` seconds. Define the model,
  optimizer and data it uses (tiny ones keep it fast and readable).
* A comment after a statement that is a lone ``print(...)`` call is the output of that
  print; comment-only lines right below it whose ``#`` sits in the same column continue
  it, one output line each. ``...`` stands for any text (doctest's ELLIPSIS), e.g.
  ``print(plan)  # memory plan of step: peak ... bytes ...``. A comment that describes a
  print rather than showing its output goes on the line above it.
* ``# requires: mpi4py, matplotlib`` anywhere in a block: the block is skipped unless all
  those modules import (optional dependencies).
* ```bash (and other) blocks are not run.
"""
from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TIMEOUT = 120          # seconds per block (2 shared cores; cold kernel compiles included)

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
_REQUIRES = re.compile(r"^\s*#\s*requires:\s*(.+?)\s*$", re.M)

# Runs one block: prints from the block's own lines are recorded per line number.
_RUNNER = r"""
import builtins, io, json, sys
src_path, out_path, first_line = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = open(src_path, encoding="utf-8").read()
seen = {}
real_print = builtins.print

def recording_print(*args, **kwargs):
    frame = sys._getframe(1)
    if frame.f_code.co_filename == "README.md" and kwargs.get("file") is None:
        buf = io.StringIO()
        real_print(*args, **{**kwargs, "file": buf})
        seen.setdefault(frame.f_lineno, buf.getvalue())
    real_print(*args, **kwargs)

builtins.print = recording_print
code = compile("\n" * (first_line - 1) + src, "README.md", "exec")
exec(code, {"__name__": "__main__"})
with open(out_path, "w") as f:
    json.dump(seen, f)
"""


def blocks(text: str) -> list:
    """``(first line number in the README, heading above it, source)`` per python block."""
    out = []
    for m in _FENCE.finditer(text):
        first = text.count("\n", 0, m.start(1)) + 1
        heads = re.findall(r"^#+\s*(.+?)\s*$", text[:m.start()], re.M)
        out.append((first, heads[-1] if heads else "top", m.group(1)))
    return out


def expected_prints(src: str, first: int) -> dict:
    """``{README line of a print: the output its comment shows}`` (see the conventions)."""
    lines = src.splitlines()
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
    out = {}
    row = 1
    while row <= len(lines):
        col = comments.get(row)
        if col is not None and _is_print(lines[row - 1][:col]):
            text = [_comment_text(lines[row - 1], col)]
            nxt = row + 1
            while comments.get(nxt) == col and not lines[nxt - 1][:col].strip():
                text.append(_comment_text(lines[nxt - 1], col))
                nxt += 1
            out[first + row - 1] = "\n".join(text)
            row = nxt
        else:
            row += 1
    return out


def _is_print(code: str) -> bool:
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return False
    return len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and \
        isinstance(tree.body[0].value, ast.Call) and \
        isinstance(tree.body[0].value.func, ast.Name) and tree.body[0].value.func.id == "print"


def _comment_text(line: str, col: int) -> str:
    text = line[col + 1:]
    return text[1:] if text.startswith(" ") else text


def matches(expected: str, got: str) -> bool:
    """Whether printed text ``got`` is ``expected``, where ``...`` matches any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, got.rstrip("\n"), re.S) is not None


def run_block(src: str, first: int, cwd: Path) -> dict:
    """Run ``src`` in a fresh interpreter; ``{line: what the first print there printed}``."""
    src_file, out_file = cwd / "_block.py", cwd / "_prints.json"
    src_file.write_text(src, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(README.parent) + os.pathsep +
               os.environ.get("PYTHONPATH", ""), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(src_file), str(out_file),
                           str(first)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    if proc.returncode != 0:
        raise AssertionError(f"README.md block at line {first} failed:\n{proc.stderr[-4000:]}")
    return {int(k): v for k, v in json.loads(out_file.read_text()).items()}


def check_block(src: str, first: int, cwd: Path) -> list:
    """Run a block; the mismatches between its print comments and its output."""
    printed = run_block(src, first, cwd)
    problems = []
    for line, want in expected_prints(src, first).items():
        got = printed.get(line)
        if got is None:
            problems.append(f"README.md:{line}: the print never ran")
        elif not matches(want, got):
            problems.append(f"README.md:{line}: printed\n{got}\nbut the README shows\n{want}")
    return problems


_BLOCKS = blocks(README.read_text(encoding="utf-8"))


@pytest.mark.parametrize("first,heading,src", _BLOCKS,
                         ids=[f"line{b[0]}-{re.sub(r'[^a-z0-9]+', '-', b[1].lower())}"
                              for b in _BLOCKS])
def test_readme_python_block(first, heading, src, tmp_path):
    for req in _REQUIRES.findall(src):
        for mod in filter(None, (m.strip() for m in req.split(","))):
            if importlib.util.find_spec(mod) is None:
                pytest.skip(f"README.md block at line {first} requires {mod}")
    problems = check_block(src, first, tmp_path)
    assert not problems, "\n\n".join(problems)


def test_readme_has_checked_examples():
    """The parser finds the README's snippets and the outputs they show."""
    assert len(_BLOCKS) >= 3
    shown = {line: text for first, _, src in _BLOCKS
             for line, text in expected_prints(src, first).items()}
    assert "tensor(1.8161, grad_fn=<SumBackward>)" in shown.values()
    assert any(t.count("\n") == 1 and t.startswith("tensor([[") for t in shown.values())


def test_checker_catches_wrong_output(tmp_path):
    src = ("x = [1, 2]\n"
           "print(x)          # [1, 3]\n"
           "print('a\\nb')     # a\n"
           "                  # b\n"
           "print(len(x))     # ...\n"
           "if False:\n"
           "    print(0)      # 0\n")
    problems = check_block(src, 10, tmp_path)
    assert len(problems) == 2, problems
    assert "README.md:11: printed\n[1, 2]\n" in problems[0]
    assert "README.md:16: the print never ran" in problems[1]
    assert matches("peak ... bytes (...)", "peak 1,234 bytes (0.1 MiB)")
    assert not matches("peak ... bytes", "peak 1 byte")
