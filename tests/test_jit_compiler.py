"""``ember.jit`` (TorchScript's decorators as identities, its IR refused) and
``ember.compiler`` (``is_compiling``, ``disable`` as a graph break, ``reset``)."""
from typing import Dict, List

import pytest

import ember as em
import ember.nn as nn
from ember.graph.trace import GraphBreak


def test_script_and_trace_return_what_they_are_given():
    @em.jit.script
    def f(x):
        return x * 2 + 1

    m = nn.Linear(3, 2)
    assert em.jit.script(m) is m and em.jit.trace(m, em.ones(1, 3)) is m
    assert em.jit.trace_module(m, {"forward": em.ones(1, 3)}) is m
    assert f(em.ones(2)).tolist() == [3.0, 3.0]
    assert em.jit.freeze(m) is m and em.jit.optimize_for_inference(m) is m
    assert not isinstance(m, em.jit.ScriptModule) and not isinstance(f, em.jit.ScriptFunction)


def test_annotations_change_nothing():
    class M(nn.Module):
        scale: em.jit.Final[float] = 2.0

        @em.jit.ignore
        def helper(self, x):
            return x + 1

        @em.jit.ignore(drop=True)
        def dropped(self, x):
            return x - 1

        @em.jit.unused
        def unused(self, x):
            return x * 0

        @em.jit.export
        def forward(self, x):
            return self.helper(x) * self.scale
    assert M()(em.ones(2)).tolist() == [4.0, 4.0]
    assert not em.jit.is_scripting() and not em.jit.is_tracing()
    assert em.jit.annotate(List[int], []) == [] and em.jit.Attribute(3, int) == 3
    assert em.jit.isinstance([1, 2], List[int]) and not em.jit.isinstance({}, List[int])
    assert em.jit.isinstance({"a": 1}, Dict[str, int])
    fut = em.jit.fork(lambda a, b: a + b, 2, b=3)
    assert em.jit.wait(fut) == 5 and fut.done()
    with em.jit.strict_fusion():
        pass


def test_save_and_load_name_the_alternatives(tmp_path):
    with pytest.raises(RuntimeError, match=r"ember.save\(model.state_dict\(\), path\)"):
        em.jit.save(nn.Linear(2, 2), tmp_path / "m.pt")
    with pytest.raises(em.jit.Error, match="ember.onnx.export"):
        em.jit.load(tmp_path / "m.pt")


def test_is_compiling_is_true_only_under_an_ember_compile_trace():
    seen = []

    def f(x):
        seen.append(em.compiler.is_compiling())
        return x * 2

    cf = em.compile(f)
    for _ in range(4):
        cf(em.ones(3))
    assert not em.compiler.is_compiling() and em.compiler.is_dynamo_compiling() is False
    assert seen.count(True) >= 1                  # the traced call saw a trace
    del seen[:]
    f(em.ones(3))                                 # called directly: no trace
    assert seen == [False]
    assert em.compiler.list_backends() == ["ember"] and not em.compiler.is_exporting()


def test_disable_is_a_graph_break():
    @em.compiler.disable
    def host_side(x):
        return x + 1

    def f(x):
        return host_side(x * 2) * 3

    cf = em.compile(f)
    for _ in range(3):
        assert cf(em.ones(2)).tolist() == [9.0, 9.0]
    assert "host_side" in str(cf.explain())
    strict = em.compile(f, fullgraph=True)
    with pytest.raises(GraphBreak, match="host_side"):
        strict(em.ones(2))


def test_reset_forgets_compiled_graphs():
    cf = em.compiler.compile(lambda x: x.sin() * 2)
    other = em.compile(lambda x: x.cos() + 1)
    for _ in range(4):
        cf(em.ones(3))
        other(em.ones(3))
    assert len(cf.explain().captures) == 1        # later calls replay the one graph
    em.compiler.reset()
    assert len(cf.explain().captures) == 0 and len(other.explain().captures) == 0
    for _ in range(3):
        cf(em.ones(3))
    assert len(cf.explain().captures) == 1        # captured again after the reset
    assert em.allclose(cf(em.ones(3)), em.ones(3).sin() * 2)


def test_set_stance_accepts_only_the_default():
    em.compiler.set_stance("default")
    with pytest.raises(NotImplementedError, match="force_eager"):
        em.compiler.set_stance("force_eager")
    em.compiler.cudagraph_mark_step_begin()
    assert em.compiler.allow_in_graph(len) is len
