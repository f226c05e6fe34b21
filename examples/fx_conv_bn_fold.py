"""Fold BatchNorm into the preceding convolution with ``ember.fx`` (PyTorch's FX
Conv/BN fusion tutorial, written the same way against Ember).

The model is traced into a GraphModule; a user-written pass walks its Nodes, finds each
``BatchNorm2d`` call whose input is a ``Conv2d`` call used nowhere else, swaps the conv
module for one with the BatchNorm folded into its weight and bias (eval-mode statistics),
routes the BatchNorm's users to the conv and erases the BatchNorm Node. Printed: the
graph before and after, and the largest difference between the folded and the original
model in eval mode (float32 rounding only).

Run:
    python examples/fx_conv_bn_fold.py [--batch 8] [--size 32]
"""
from __future__ import annotations

import argparse
import copy

import ember
import ember.fx as fx
from ember import nn
from ember.nn.utils.fusion import fuse_conv_bn_eval


class Net(nn.Module):
    """Two conv-bn-relu blocks, a residual add, pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = ember.relu(self.bn1(self.conv1(x)))
        h = h + ember.relu(self.bn2(self.conv2(h)))
        return self.fc(h.mean(dim=(2, 3)))


def _replace_module(node: fx.Node, modules: dict, new_module: nn.Module) -> None:
    *parent, name = node.target.rsplit(".", 1)
    setattr(modules[parent[0]] if parent else modules[""], name, new_module)
    modules[node.target] = new_module


def fuse(model: nn.Module) -> fx.GraphModule:
    """Trace ``model`` (in eval mode) and fold every Conv2d -> BatchNorm2d pair."""
    model = copy.deepcopy(model).eval()
    gm = fx.symbolic_trace(model)
    modules = dict(gm.named_modules())
    for node in gm.graph.nodes:
        if node.op != "call_module" or not isinstance(modules[node.target], nn.BatchNorm2d):
            continue
        conv_node = node.args[0]
        if not (isinstance(conv_node, fx.Node) and conv_node.op == "call_module"
                and isinstance(modules[conv_node.target], nn.Conv2d)):
            continue
        if len(conv_node.users) > 1:        # the conv's output is read elsewhere too
            continue
        fused = fuse_conv_bn_eval(modules[conv_node.target], modules[node.target])
        _replace_module(conv_node, modules, fused)
        node.replace_all_uses_with(conv_node)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=32)
    a = p.parse_args(argv)
    ember.manual_seed(0)
    model = Net()
    model.train()
    for _ in range(3):                      # give the BatchNorms non-trivial statistics
        model(ember.randn(16, 3, a.size, a.size) * 2 + 0.5)
    model.eval()
    folded = fuse(model)
    x = ember.randn(a.batch, 3, a.size, a.size)
    with ember.no_grad():
        diff = float((folded(x) - model(x)).abs().max())
    kinds = [n.op for n in folded.graph.nodes]
    print("original graph:")
    print(fx.symbolic_trace(model).graph)
    print("folded graph:")
    print(folded.graph)
    print(f"max abs difference folded vs original (eval): {diff:.3e}")
    return {"diff": diff, "ops": kinds, "submodules": [k for k, _ in folded.named_children()],
            "modules": [n.target for n in folded.graph.nodes if n.op == "call_module"]}


if __name__ == "__main__":
    main()
