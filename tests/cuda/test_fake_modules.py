"""``nn``'s layers and losses on the (strict) ``cuda`` stand-in against the CPU: the output,
every parameter's gradient and every input's gradient agree and stay on the device (a
layer that makes a CPU tensor inside, e.g. an initial hidden state, fails here)."""
import numpy as np
import pytest

import ember as em

nn = em.nn
R = np.random.default_rng(0)


def f(*s):
       return R.standard_normal(s).astype(np.float32)


def i(hi, *s):
       return R.integers(0, hi, s).astype(np.int64)


CASES = {   # name: (module factory, input arrays)
    "Linear": (lambda: nn.Linear(6, 4), [f(3, 6)]),
    "Bilinear": (lambda: nn.Bilinear(3, 4, 2), [f(5, 3), f(5, 4)]),
    "Conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), [f(2, 3, 9)]),
    "Conv2d": (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), [f(2, 3, 8, 8)]),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 2), [f(1, 2, 4, 4, 4)]),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), [f(2, 3, 5, 5)]),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(4), [f(8, 4)]),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), [f(4, 3, 5, 5)]),
    "LayerNorm": (lambda: nn.LayerNorm(6), [f(3, 6)]),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), [f(2, 4, 5)]),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3, affine=True), [f(2, 3, 4, 4)]),
    "Embedding": (lambda: nn.Embedding(10, 4), [i(10, 3, 5)]),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), [i(10, 3, 5)]),
    "RNN": (lambda: nn.RNN(4, 5, batch_first=True), [f(2, 6, 4)]),
    "LSTM": (lambda: nn.LSTM(4, 5, num_layers=2, batch_first=True), [f(2, 6, 4)]),
    "GRU": (lambda: nn.GRU(4, 5, bidirectional=True), [f(6, 2, 4)]),
    "LSTMCell": (lambda: nn.LSTMCell(4, 5), [f(3, 4)]),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True),
                           [f(2, 5, 8), f(2, 5, 8), f(2, 5, 8)]),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True), [f(2, 5, 8)]),
    "TransformerDecoderLayer": (lambda: nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True), [f(2, 5, 8), f(2, 4, 8)]),
    "MaxPool2d": (lambda: nn.MaxPool2d(2), [f(2, 3, 6, 6)]),
    "AvgPool2d": (lambda: nn.AvgPool2d(2), [f(2, 3, 6, 6)]),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d((2, 3)), [f(2, 3, 7, 7)]),
    "AdaptiveMaxPool1d": (lambda: nn.AdaptiveMaxPool1d(3), [f(2, 3, 7)]),
    "Upsample": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), [f(1, 2, 3, 3)]),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), [f(1, 8, 3, 3)]),
    "Dropout-eval": (lambda: nn.Dropout(0.5).eval(), [f(4, 4)]),
    "Softmax": (lambda: nn.Softmax(-1), [f(3, 5)]),
    "GELU": (lambda: nn.GELU(), [f(3, 5)]),
    "PReLU": (lambda: nn.PReLU(), [f(3, 5)]),
    "CrossEntropyLoss": (lambda: nn.CrossEntropyLoss(label_smoothing=0.1), [f(4, 5), i(5, 4)]),
    "NLLLoss-weight": (lambda: nn.NLLLoss(weight=em.ones(5)), [f(4, 5), i(5, 4)]),
    "MSELoss": (lambda: nn.MSELoss(), [f(4, 5), f(4, 5)]),
    "BCEWithLogitsLoss": (lambda: nn.BCEWithLogitsLoss(pos_weight=em.ones(5)),
                          [f(4, 5), (f(4, 5) > 0).astype(np.float32)]),
    "CosineSimilarity": (lambda: nn.CosineSimilarity(), [f(3, 4), f(3, 4)]),
    "Unfold": (lambda: nn.Unfold(2), [f(1, 2, 4, 4)]),
    "Fold": (lambda: nn.Fold((4, 4), 2), [f(1, 8, 9)]),
    # NOTE: and the rest of nn's losses and layers, swept on the strict stand-in
    "L1Loss": (lambda: nn.L1Loss(), [f(4, 5), f(4, 5)]),
    "SmoothL1Loss": (lambda: nn.SmoothL1Loss(beta=0.5), [f(4, 5), f(4, 5)]),
    "HuberLoss": (lambda: nn.HuberLoss(), [f(4, 5), f(4, 5)]),
    "KLDivLoss": (lambda: nn.KLDivLoss(reduction="batchmean"), [f(4, 5), np.abs(f(4, 5))]),
    "BCELoss": (lambda: nn.BCELoss(),
                [1 / (1 + np.exp(-f(4, 5))), (f(4, 5) > 0).astype(np.float32)]),
    "MarginRankingLoss": (lambda: nn.MarginRankingLoss(0.1), [f(6), f(6), np.sign(f(6))]),
    "HingeEmbeddingLoss": (lambda: nn.HingeEmbeddingLoss(), [f(4, 5), np.sign(f(4, 5))]),
    "MultiLabelMarginLoss": (lambda: nn.MultiLabelMarginLoss(),
                             [f(3, 4), np.array([[1, 0, -1, 2], [3, -1, 0, 0],
                                                 [0, 1, 2, 3]])]),
    "SoftMarginLoss": (lambda: nn.SoftMarginLoss(), [f(4, 5), np.sign(f(4, 5))]),
    "MultiLabelSoftMarginLoss": (lambda: nn.MultiLabelSoftMarginLoss(),
                                 [f(4, 5), (f(4, 5) > 0).astype(np.float32)]),
    "CosineEmbeddingLoss": (lambda: nn.CosineEmbeddingLoss(),
                            [f(4, 5), f(4, 5), np.sign(f(4))]),
    "MultiMarginLoss": (lambda: nn.MultiMarginLoss(weight=em.ones(5)), [f(4, 5), i(5, 4)]),
    "TripletMarginLoss": (lambda: nn.TripletMarginLoss(), [f(4, 5), f(4, 5), f(4, 5)]),
    "TripletMarginWithDistanceLoss": (lambda: nn.TripletMarginWithDistanceLoss(),
                                      [f(4, 5), f(4, 5), f(4, 5)]),
    "PoissonNLLLoss": (lambda: nn.PoissonNLLLoss(), [f(4, 5), np.abs(f(4, 5))]),
    "GaussianNLLLoss": (lambda: nn.GaussianNLLLoss(),
                        [f(4, 5), f(4, 5), np.abs(f(4, 5)) + 0.1]),
    "CTCLoss": (lambda: nn.CTCLoss(),
                [np.log(np.full((6, 2, 4), 0.25, np.float32)), np.array([[1, 2], [3, 1]]),
                 np.array([6, 6]), np.array([2, 2])]),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(3, 2, 3, stride=2), [f(2, 3, 5)]),
    "ConvTranspose3d": (lambda: nn.ConvTranspose3d(2, 2, 2), [f(1, 2, 3, 3, 3)]),
    "Conv2d-groups-dil": (lambda: nn.Conv2d(4, 4, 3, groups=2, dilation=2, padding="same"),
                          [f(1, 4, 7, 7)]),
    "Conv2d-reflect": (lambda: nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
                       [f(1, 2, 5, 5)]),
    "LocalResponseNorm": (lambda: nn.LocalResponseNorm(2), [f(2, 4, 5, 5)]),
    "LPPool2d": (lambda: nn.LPPool2d(2, 2), [f(1, 2, 4, 4)]),
    "FractionalMaxPool2d": (lambda: nn.FractionalMaxPool2d(2, output_size=3), [f(1, 2, 6, 6)]),
    "MaxPool2d-idx": (lambda: nn.MaxPool2d(2, return_indices=True), [f(1, 2, 4, 4)]),
    "RMSNorm": (lambda: nn.RMSNorm(6), [f(3, 6)]),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(2), [f(2, 2, 3, 3, 3)]),
    "InstanceNorm1d": (lambda: nn.InstanceNorm1d(3), [f(2, 3, 5)]),
    "Transformer": (lambda: nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True),
                    [f(2, 5, 8), f(2, 4, 8)]),
    "Flatten": (lambda: nn.Flatten(), [f(2, 3, 4)]),
    "Unflatten": (lambda: nn.Unflatten(1, (2, 2)), [f(3, 4)]),
    "ChannelShuffle": (lambda: nn.ChannelShuffle(2), [f(1, 4, 2, 2)]),
    "ZeroPad2d": (lambda: nn.ZeroPad2d(1), [f(1, 2, 3, 3)]),
    "ReflectionPad2d": (lambda: nn.ReflectionPad2d(1), [f(1, 2, 3, 3)]),
    "ReplicationPad3d": (lambda: nn.ReplicationPad3d(1), [f(1, 1, 2, 2, 2)]),
    "CircularPad1d": (lambda: nn.CircularPad1d(1), [f(1, 2, 3)]),
    "Hardswish": (lambda: nn.Hardswish(), [f(3, 5)]),
    "Mish": (lambda: nn.Mish(), [f(3, 5)]),
    "Softmin": (lambda: nn.Softmin(1), [f(3, 5)]),
    "Softmax2d": (lambda: nn.Softmax2d(), [f(1, 3, 2, 2)]),
    "LogSoftmax": (lambda: nn.LogSoftmax(1), [f(3, 5)]),
    "Threshold": (lambda: nn.Threshold(0.1, 20.0), [f(3, 5)]),
    "RReLU-eval": (lambda: nn.RReLU().eval(), [f(3, 5)]),
    "GLU": (lambda: nn.GLU(), [f(3, 6)]),
    "Embedding-maxnorm": (lambda: nn.Embedding(10, 4, max_norm=1.0), [i(10, 3, 5)]),
    "PairwiseDistance": (lambda: nn.PairwiseDistance(), [f(3, 4), f(3, 4)]),
    "Upsample-nearest": (lambda: nn.Upsample(scale_factor=2), [f(1, 2, 3, 3)]),
    "Upsample-bicubic": (lambda: nn.Upsample(size=(5, 5), mode="bicubic", align_corners=True),
                         [f(1, 2, 3, 3)]),
    "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), [f(1, 2, 4, 4)]),
    "AlphaDropout-eval": (lambda: nn.AlphaDropout(0.5).eval(), [f(3, 5)]),
    "RNN-relu": (lambda: nn.RNN(4, 5, nonlinearity="relu", num_layers=2), [f(6, 2, 4)]),
    "GRUCell": (lambda: nn.GRUCell(4, 5), [f(3, 4)]),
    "RNNCell": (lambda: nn.RNNCell(4, 5), [f(3, 4)]),
    "LSTM-proj": (lambda: nn.LSTM(4, 6, proj_size=3, batch_first=True), [f(2, 5, 4)]),
    "Hardshrink": (lambda: nn.Hardshrink(), [f(3, 5)]),
    "Tanhshrink": (lambda: nn.Tanhshrink(), [f(3, 5)]),
    "CELU": (lambda: nn.CELU(), [f(3, 5)]),
    "SELU": (lambda: nn.SELU(), [f(3, 5)]),
    "LogSigmoid": (lambda: nn.LogSigmoid(), [f(3, 5)]),
    "Softplus": (lambda: nn.Softplus(beta=2), [f(3, 5)]),
    "MaxPool3d": (lambda: nn.MaxPool3d(2), [f(1, 1, 4, 4, 4)]),
    "AvgPool1d": (lambda: nn.AvgPool1d(2, ceil_mode=True), [f(1, 2, 5)]),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d(2, return_indices=True),
                          [f(1, 2, 5, 5)]),
    "AdaptiveAvgPool3d": (lambda: nn.AdaptiveAvgPool3d(2), [f(1, 1, 3, 3, 3)]),
    "Bilinear-nobias": (lambda: nn.Bilinear(3, 4, 2, bias=False), [f(5, 3), f(5, 4)]),
    "EmbeddingBag-sum": (lambda: nn.EmbeddingBag(10, 4, mode="max"), [i(10, 3, 5)]),
}


def run(dev, make, arrays):
    """Outputs, parameter gradients and input gradients (host copies), and the outputs."""
    em.manual_seed(0)
    m = make().to(dev)
    xs = [em.tensor(a, device=dev) for a in arrays]
    for x in xs:
        if x.dtype.is_floating_point:
            x.requires_grad_(True)
    out = m(*xs)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, em.Tensor)]
    sum(o.float().sum() for o in outs if o.requires_grad).backward()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    grads += [x.grad for x in xs if x.grad is not None]
    return [t.detach().cpu().numpy() for t in outs + grads], outs


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_on_the_cuda_stand_in_matches_cpu(fake_cuda, name):
    make, arrays = CASES[name]
    want, _ = run("cpu", make, arrays)
    got, outs = run("cuda", make, arrays)
    assert outs and all(o.device == em.device("cuda:0") for o in outs)
    assert len(got) == len(want) > len(outs)          # gradients were compared too
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=name)
