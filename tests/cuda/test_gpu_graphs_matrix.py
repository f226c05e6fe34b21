"""The ``reduce-overhead`` conformance matrix on a real GPU (skip: "no CUDA GPU/CuPy").

The same cases as ``test_cuda_graphs_matrix.py`` and ``test_cuda_graphs_matrix_models.py``
(each trains twice, default mode and ``mode="reduce-overhead"``, asserts equal bits
and exact replay counts, or a documented fallback), run with CuPy stream capture instead
of the stand-in's recording: new batches at a freed batch's address (CuPy's pool reuses
them), the lifted learning rate uploaded into the graph at every replay, the GradScaler's
scale read in place, saved values in the graph's private pool, memory counted as in the
default mode. Each case also checks that the GPU really captured a graph.

Run: ``python3 -m pytest -q -n 8 tests/cuda/test_gpu_graphs_matrix.py``.
"""
import pytest

import ember as em
from ember.graph import cuda_graphs

import test_cuda_graphs_matrix as A
import test_cuda_graphs_matrix_models as B
from _cg_matrix import OPTS, _data, _mlp, _runner, _step_fn
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

CASES = [
    (A.test_whole_steps_replay_with_the_default_modes_bits, ("adamw", True, "several")),
    (A.test_whole_steps_replay_with_the_default_modes_bits, ("sgd-momentum", False, "loss")),
    (A.test_whole_steps_replay_with_the_default_modes_bits, ("adam", False, "several")),
    (A.test_zero_grad_first_new_gradients_are_the_graphs_buffers, ()),
    (A.test_fresh_batches_made_inline_at_a_freed_batchs_address_are_staged, ()),
    (A.test_cnns_with_normalisation_layers, (A._cnn_bn,)),
    (A.test_cnns_with_normalisation_layers, (A._cnn_gn,)),
    (A.test_an_lr_scheduler_stepped_between_calls, ("adamw",)),
    (A.test_an_lr_scheduler_stepped_between_calls, ("sgd-momentum",)),
    (A.test_two_param_groups_with_a_lambda_schedule, ()),
    (A.test_a_compiled_optimizer_step_alone, ()),
    (A.test_clip_grad_norm_inside_the_step, ()),
    (A.test_autocast_float16_with_a_grad_scaler_outside_the_graph_replays, ()),
    (A.test_a_grad_scalers_step_inside_the_function_is_one_graph, ()),
    (A.test_dropout_draws_keep_the_program_plain_and_explain_says_why, ()),
    (A.test_a_host_read_inside_the_step_is_a_graph_break, ()),
    (B.test_a_compiled_model_with_eager_loss_backward_and_optimizer, (B._bn_mlp,)),
    (B.test_a_compiled_model_with_eager_loss_backward_and_optimizer, (B._encoder,)),
    (B.test_compiled_models_used_other_ways, ("input-grad",)),
    (B.test_compiled_models_used_other_ways, ("chained",)),
    (B.test_compiled_models_used_other_ways, ("retain-graph",)),
    (B.test_a_new_input_shape_is_a_new_program_with_its_own_runner, ()),
    (B.test_the_same_input_tensor_every_call_written_in_place_between_calls, ()),
    (B.test_non_contiguous_input_views, ("transposed",)),
    (B.test_non_contiguous_input_views, ("strided",)),
    (B.test_in_place_writes_into_arguments_and_closure_tensors, ()),
    (B.test_gradient_accumulation_over_two_signatures, ()),
    (B.test_checkpoint_reload_and_in_place_parameter_edits_between_calls, ()),
    (B.test_memory_allocated_equals_the_default_modes_and_stays_flat, (True,)),
    (B.test_a_replayed_forwards_saved_values_count_until_its_backward, ()),
]


def _id(case) -> str:
    fn, args = case
    return fn.__name__[5:] + "".join(f"-{getattr(a, '__name__', a)}" for a in args)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_gpu_graphs_matrix(gpu, case, monkeypatch):  # noqa: F811
    runners = []
    init = cuda_graphs.GraphRunner.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        runners.append(self)
    monkeypatch.setattr(cuda_graphs.GraphRunner, "__init__", spy)
    fn, args = case
    fn(gpu, *args)
    captured = [g for g in runners if g.replays]
    # a replayed runner replayed a real CUDA graph from its private pool
    assert all(g.gp is not None and g.graph is not None for g in captured)


def test_gpu_replays_reserve_no_more_memory(gpu):  # noqa: F811
    # a replay allocates nothing: neither memory_allocated nor memory_reserved (the
    # caching pool plus the graph's private pool) moves over 10 replays
    em.manual_seed(0)
    model = _mlp().to("cuda")
    opt = OPTS["adamw"](model.parameters())
    fn = em.compile(_step_fn(True, "several")(model, opt), mode="reduce-overhead")
    seen = []
    for x, y in _data(15):
        r = fn(x, y)
        del r
        seen.append((em.cuda.memory_allocated(), em.cuda.memory_reserved()))
    g = _runner(fn)
    assert g.replays == 10 and len(set(seen[-10:])) == 1, seen
    assert g.gp is None or em.cuda.memory_reserved() >= g.gp.total_bytes() > 0
