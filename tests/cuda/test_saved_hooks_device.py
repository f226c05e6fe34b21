"""``save_on_cpu`` on the cuda stand-in: a forward's saved activations live in host
memory (device memory in use drops), the backward moves them back and the gradients are
the plain run's, bit for bit."""
import contextlib

import ember as em


def _step(lin, x, hooks):
    with hooks:
        h = lin(x).relu()
        h = lin(h).tanh()
        loss = h.sum()
    during = em.cuda.memory_allocated()
    loss.backward()
    g = lin.weight.grad.cpu().clone()
    lin.zero_grad(set_to_none=True)
    return during, g


def test_save_on_cpu_moves_saved_activations_off_the_device(fake_cuda):
    em.manual_seed(0)
    lin = em.nn.Linear(64, 64).cuda()
    x = em.randn(32, 64, device="cuda")
    base = em.cuda.memory_allocated()
    plain, g_plain = _step(lin, x, contextlib.nullcontext())
    for pin in (False, True):
        offloaded, g = _step(lin, x, em.autograd.graph.save_on_cpu(pin_memory=pin))
        assert em.equal(g, g_plain)
        # plain: two (32, 64) float32 activations saved on the device; offloaded: none of
        # the saved ones (the loss and what backward needs later stay)
        assert offloaded - base < plain - base, (offloaded - base, plain - base)
        assert g.device.type == "cpu" and lin.weight.device.type == "cuda"
