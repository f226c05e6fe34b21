"""The ``recast`` pass on the stand-in GPU: skipped there (each recast one more launch on
a host-bound compiled step), still run on CPU graphs."""
import ember as em


def test_recast_leaves_gpu_graphs_alone(fake_cuda):
    """On a GPU each recast is one more launch on a host-bound step: the pass skips graphs
    whose values live on a device (the stand-in GPU here), and still runs on the CPU's."""
    from ember.graph.passes.recast import recast

    def f(x, w):
        with em.autocast("cpu" if x.device.type == "cpu" else "cuda", dtype=em.bfloat16):
            h = x @ w
            for _ in range(12):
                h = h * 1.5 + 1.0
            return (h @ w).float().sum()
    for dev, want in (("cpu", True), ("cuda", False)):
        x = em.randn(4, 8, device=dev)
        w = em.randn(8, 8, device=dev)
        cf = em.compile(f, passes=["simplify", "cse", "dce"])
        cf(x, w), cf(x, w)
        g = cf.graph
        _, changed = recast(g)
        assert (changed["recast"] > 0) == want, (dev, changed)
