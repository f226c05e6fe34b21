"""OpInfos for convolution and pooling. The NumPy references are direct nested loops over
output positions (written from the PyTorch definitions, not from im2col), run on tiny inputs."""
import math

import numpy as np

from ember.ops import conv as C

from .core import OpInfo, Sample, rand


def _p2(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _unbatch(fn, nd):
    """Run a batched reference on unbatched input too."""
    def f(x, *args, **kw):
        if x.ndim == nd:
            return fn(x, *args, **kw)
        r = fn(x[None], *args, **kw)
        return tuple(a[0] for a in r) if isinstance(r, tuple) else r[0]
    return f


# ------------------------------------------------------------------ references
def ref_unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = map(_p2, (kernel_size, dilation, padding, stride))
    n, c, h, w = x.shape
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, c * kh * kw, oh * ow), x.dtype)
    for ci in range(c):
        for a in range(kh):
            for b in range(kw):
                for i in range(oh):
                    for j in range(ow):
                        r, q = i * sh + a * dh - ph, j * sw + b * dw - pw
                        if 0 <= r < h and 0 <= q < w:
                            out[:, (ci * kh + a) * kw + b, i * ow + j] = x[:, ci, r, q]
    return out


def ref_fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = map(
        _p2, (output_size, kernel_size, dilation, padding, stride))
    n, ck, _ = cols.shape
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, ck // (kh * kw), h, w), cols.dtype)
    for row in range(ck):
        ci, a, b = row // (kh * kw), row // kw % kh, row % kw
        for blk in range(cols.shape[2]):
            r, q = blk // ow * sh + a * dh - ph, blk % ow * sw + b * dw - pw
            if 0 <= r < h and 0 <= q < w:
                out[:, ci, r, q] += cols[:, row, blk]
    return out


def _same(padding, k, d):
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        tot = [d[i] * (k[i] - 1) for i in range(2)]
        return tuple(t // 2 for t in tot), tuple(t - t // 2 for t in tot)
    p = _p2(padding)
    return p, p


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    (sh, sw), (dh, dw) = _p2(stride), _p2(dilation)
    o, cg, kh, kw = w.shape
    lo, hi = _same(padding, (kh, kw), (dh, dw))
    xp = np.pad(x, ((0, 0), (0, 0), (lo[0], hi[0]), (lo[1], hi[1])))
    n, _, hp, wp = xp.shape
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), np.result_type(x, w))
    for oc in range(o):
        g = oc // (o // groups)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out if b is None else out + b[:, None, None]


def ref_conv1d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    p = padding if isinstance(padding, str) else (0, padding)
    return ref_conv2d(x[:, :, None], w[:, :, None], b, (1, stride), p, (1, dilation),
                      groups)[:, :, 0]


def ref_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1):
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = map(_p2, (stride, padding, output_padding,
                                                         dilation))
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    hout = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wout = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = np.zeros((n, og * groups, hout, wout), np.result_type(x, w))
    cg = cin // groups
    for ci in range(cin):
        g = ci // cg
        for i in range(h):
            for j in range(wd):
                for a in range(kh):
                    for c in range(kw):
                        r, q = i * sh + a * dh - ph, j * sw + c * dw - pw
                        if 0 <= r < hout and 0 <= q < wout:
                            out[:, g * og:(g + 1) * og, r, q] += \
                                x[:, ci, i, j, None] * w[ci, :, a, c]
    return out if b is None else out + b[:, None, None]


def ref_conv_transpose1d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1):
    return ref_conv_transpose2d(x[:, :, None], w[:, :, None], b, (1, stride), (0, padding),
                                (0, output_padding), groups, (1, dilation))[:, :, 0]


def _pool_out(size, k, s, p, d, ceil_mode):
    o = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= size + p:
        o -= 1
    return o


def ref_max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                   return_indices=False):
    (kh, kw), (ph, pw), (dh, dw) = map(_p2, (kernel_size, padding, dilation))
    sh, sw = _p2(stride) if stride else (kh, kw)
    n, c, h, w = x.shape
    oh, ow = _pool_out(h, kh, sh, ph, dh, ceil_mode), _pool_out(w, kw, sw, pw, dw, ceil_mode)
    val = np.zeros((n, c, oh, ow), x.dtype)
    ind = np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            cells = [(i * sh - ph + a * dh, j * sw - pw + b * dw) for a in range(kh)
                     for b in range(kw)]
            cells = [(r, q) for r, q in cells if 0 <= r < h and 0 <= q < w]
            vals = np.stack([x[:, :, r, q] for r, q in cells], -1)
            best = vals.argmax(-1)
            val[:, :, i, j] = vals.max(-1)
            ind[:, :, i, j] = np.array([r * w + q for r, q in cells])[best]
    return (val, ind) if return_indices else val


def ref_avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                   count_include_pad=True, divisor_override=None):
    (kh, kw), (ph, pw) = _p2(kernel_size), _p2(padding)
    sh, sw = _p2(stride) if stride else (kh, kw)
    n, c, h, w = x.shape
    oh, ow = _pool_out(h, kh, sh, ph, 1, ceil_mode), _pool_out(w, kw, sw, pw, 1, ceil_mode)
    out = np.zeros((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            r0, q0 = i * sh - ph, j * sw - pw
            r1, q1 = min(r0 + kh, h + ph), min(q0 + kw, w + pw)   # window clipped to padding
            win = x[:, :, max(r0, 0):min(r1, h), max(q0, 0):min(q1, w)]
            if divisor_override:
                div = divisor_override
            elif count_include_pad:
                div = (r1 - r0) * (q1 - q0)
            else:
                div = win.shape[2] * win.shape[3]
            out[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return out


def _cells(size, o):
    return [(math.floor(i * size / o), math.ceil((i + 1) * size / o)) for i in range(o)]


def _adaptive(x, output_size, reduce):
    o = _p2(output_size)
    o = tuple(x.shape[2 + i] if v is None else v for i, v in enumerate(o))
    n, c, h, w = x.shape
    out = np.zeros((n, c) + o, x.dtype)
    ind = np.zeros((n, c) + o, np.int64)
    for i, (r0, r1) in enumerate(_cells(h, o[0])):
        for j, (q0, q1) in enumerate(_cells(w, o[1])):
            win = x[:, :, r0:r1, q0:q1].reshape(n, c, -1)
            out[:, :, i, j] = reduce(win, -1)
            k = win.argmax(-1)
            ind[:, :, i, j] = (r0 + k // (q1 - q0)) * w + q0 + k % (q1 - q0)
    return out, ind


def ref_adaptive_avg_pool2d(x, output_size):
    return _adaptive(x, output_size, np.mean)[0]


def ref_adaptive_max_pool2d(x, output_size, return_indices=False):
    v, i = _adaptive(x, output_size, np.max)
    return (v, i) if return_indices else v


def ref_max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                   return_indices=False):
    r = ref_max_pool2d(x[:, :, None], (1, kernel_size), None if stride is None else
                       (1, stride), (0, padding), (1, dilation), ceil_mode, return_indices)
    return (r[0][:, :, 0], r[1][:, :, 0]) if return_indices else r[:, :, 0]


def ref_avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                   count_include_pad=True):
    return ref_avg_pool2d(x[:, :, None], (1, kernel_size), None if stride is None else
                          (1, stride), (0, padding), ceil_mode, count_include_pad)[:, :, 0]


def ref_adaptive_avg_pool1d(x, output_size):
    return ref_adaptive_avg_pool2d(x[:, :, None], (1, output_size))[:, :, 0]


def ref_adaptive_max_pool1d(x, output_size, return_indices=False):
    r = ref_adaptive_max_pool2d(x[:, :, None], (1, output_size), return_indices)
    return (r[0][:, :, 0], r[1][:, :, 0]) if return_indices else r[:, :, 0]


# ------------------------------------------------------------------ samples
def _samples(cases):
    """cases: (shapes, kwargs, grad); shapes of the array args (None: pass None)."""
    def gen(rng, dtype):
        out = []
        for shapes, kw, g in cases:
            args = tuple(None if s is None else rand(rng, s, dtype) for s in shapes)
            out.append(Sample(args, dict(kw), grad=g, name=f"{shapes} {kw}"))
        return out
    return gen


UNFOLD = [(((1, 2, 3, 3),), {"kernel_size": 2}, True),
          (((1, 1, 3, 4),), {"kernel_size": (2, 3), "padding": 1, "stride": (2, 1)}, True),
          (((1, 1, 4, 4),), {"kernel_size": 2, "dilation": 2, "stride": 2}, True),
          (((2, 3, 7, 6),), {"kernel_size": 3, "dilation": (2, 1), "padding": (1, 2),
                             "stride": (1, 2)}, False),
          (((2, 3, 5),), {"kernel_size": 2}, False),                     # unbatched
          (((0, 2, 4, 4),), {"kernel_size": 3}, False)]
FOLD = [(((1, 4, 4),), {"output_size": 3, "kernel_size": 2}, True),
        (((1, 4, 6),), {"output_size": (3, 4), "kernel_size": 2, "padding": 1,
                        "stride": 2}, True),
        (((1, 2, 6),), {"output_size": (3, 4), "kernel_size": (1, 2), "dilation": 2}, True),
        (((2, 18, 20),), {"output_size": (7, 6), "kernel_size": 3, "dilation": (2, 1),
                          "padding": (1, 2), "stride": (1, 2)}, False),
        (((8, 9),), {"output_size": 4, "kernel_size": 2}, False)]          # unbatched
CONV2D = [(((1, 2, 4, 4), (2, 2, 3, 3), (2,)), {}, True),
          (((1, 2, 4, 3), (2, 1, 2, 2), None), {"groups": 2, "padding": 1, "stride": 2}, True),
          (((1, 1, 4, 4), (1, 1, 2, 2), (1,)), {"padding": "same", "dilation": 2}, True),
          (((1, 1, 3, 4), (2, 1, 2, 3), None), {"padding": "same"}, True),   # even kernel
          (((2, 4, 7, 6), (6, 2, 3, 2), (6,)), {"groups": 2, "stride": (2, 1),
                                               "dilation": (1, 2), "padding": (1, 2)}, False),
          (((3, 5, 5), (2, 3, 3, 3), None), {"padding": "valid"}, False),   # unbatched
          (((0, 2, 4, 4), (3, 2, 3, 3), None), {}, False)]
CONV1D = [(((1, 2, 5), (2, 2, 3), (2,)), {"padding": 1}, True),
          (((1, 2, 6), (2, 1, 2), None), {"groups": 2, "stride": 2, "dilation": 2}, True),
          (((1, 1, 5), (1, 1, 4), None), {"padding": "same"}, True),
          (((2, 4, 9), (6, 4, 3), (6,)), {"stride": 2, "padding": 2, "dilation": 3}, False),
          (((3, 8), (4, 3, 3), None), {}, False)]
CONVT2D = [(((1, 2, 2, 2), (2, 1, 3, 3), (1,)), {"stride": 2}, True),
           (((1, 2, 2, 3), (2, 1, 2, 2), None), {"stride": 2, "padding": 1,
                                                 "output_padding": 1, "groups": 2}, True),
           (((1, 1, 3, 2), (1, 2, 2, 2), None), {"dilation": 2, "output_padding": 1}, True),
           (((2, 4, 3, 4), (4, 3, 3, 2), (6,)), {"stride": (2, 3), "padding": (0, 1),
                                                "output_padding": (1, 2), "groups": 2,
                                                "dilation": (1, 2)}, False),
           (((3, 3, 3), (3, 2, 2, 2), None), {}, False)]
CONVT1D = [(((1, 2, 3), (2, 1, 3), (1,)), {"stride": 2, "padding": 1, "output_padding": 1}, True),
           (((2, 4, 5), (4, 3, 3), None), {"stride": 3, "groups": 2, "dilation": 2}, False)]
MAXPOOL2D = [(((1, 2, 4, 4),), {"kernel_size": 2}, True),
             (((1, 1, 5, 4),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                "ceil_mode": True}, True),
             (((1, 1, 4, 5),), {"kernel_size": 2, "dilation": 2, "stride": 1}, True),
             (((2, 3, 7, 6),), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1),
                                "dilation": (1, 2), "ceil_mode": True,
                                "return_indices": True}, False),
             (((3, 5, 5),), {"kernel_size": 2, "return_indices": True}, False),
             (((0, 2, 4, 4),), {"kernel_size": 2}, False)]
MAXPOOL1D = [(((1, 2, 5),), {"kernel_size": 2}, True),
             (((1, 1, 7),), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2,
                             "ceil_mode": True}, True),
             (((2, 3, 9),), {"kernel_size": 3, "stride": 2, "return_indices": True}, False),
             (((3, 8),), {"kernel_size": 2}, False)]
AVGPOOL2D = [(((1, 2, 4, 4),), {"kernel_size": 2}, True),
             (((1, 1, 5, 4),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                "ceil_mode": True}, True),
             (((1, 1, 5, 5),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                "count_include_pad": False, "ceil_mode": True}, True),
             (((2, 3, 7, 6),), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1),
                                "divisor_override": 5}, False),
             (((3, 5, 5),), {"kernel_size": 2, "stride": 1}, False)]
AVGPOOL1D = [(((1, 2, 5),), {"kernel_size": 2}, True),
             (((1, 1, 6),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                             "count_include_pad": False}, True),
             (((3, 8),), {"kernel_size": 4, "stride": 3}, False)]
ADAPTIVE2D = [(((1, 1, 3, 4),), {"output_size": (2, 3)}, True),
              (((1, 2, 3, 3),), {"output_size": 2}, True),
              (((2, 3, 7, 5),), {"output_size": (3, None)}, False),
              (((3, 6, 6),), {"output_size": (4, 1)}, False)]
ADAPTIVE1D = [(((1, 2, 5),), {"output_size": 3}, True),
              (((2, 3, 7),), {"output_size": 4}, False),
              (((3, 8),), {"output_size": 3}, False)]
AMAX2D = ADAPTIVE2D + [(((2, 2, 5, 7),), {"output_size": (3, 4), "return_indices": True},
                        False)]
AMAX1D = ADAPTIVE1D + [(((2, 2, 7),), {"output_size": 3, "return_indices": True}, False)]

_POOL = ("unfold", "reshape", "argmax", "take_along_dim")

OPINFOS = [
    OpInfo("unfold", C.unfold, _unbatch(ref_unfold, 4), _samples(UNFOLD), ("unfold",)),
    OpInfo("fold", C.fold, _unbatch(ref_fold, 3), _samples(FOLD), ("fold",)),
    OpInfo("conv2d", C.conv2d, _unbatch(ref_conv2d, 4), _samples(CONV2D),
           ("unfold", "matmul", "reshape", "add")),
    OpInfo("conv1d", C.conv1d, _unbatch(ref_conv1d, 3), _samples(CONV1D),
           ("unfold", "matmul", "reshape", "add")),
    OpInfo("conv_transpose2d", C.conv_transpose2d, _unbatch(ref_conv_transpose2d, 4),
           _samples(CONVT2D), ("fold", "matmul", "reshape", "permute", "add")),
    OpInfo("conv_transpose1d", C.conv_transpose1d, _unbatch(ref_conv_transpose1d, 3),
           _samples(CONVT1D), ("fold", "matmul", "reshape", "permute", "add")),
    OpInfo("max_pool2d", C.max_pool2d, _unbatch(ref_max_pool2d, 4), _samples(MAXPOOL2D), _POOL),
    OpInfo("max_pool1d", C.max_pool1d, _unbatch(ref_max_pool1d, 3), _samples(MAXPOOL1D), _POOL),
    OpInfo("avg_pool2d", C.avg_pool2d, _unbatch(ref_avg_pool2d, 4), _samples(AVGPOOL2D),
           ("unfold", "sum", "div")),
    OpInfo("avg_pool1d", C.avg_pool1d, _unbatch(ref_avg_pool1d, 3), _samples(AVGPOOL1D),
           ("unfold", "sum", "div")),
    OpInfo("adaptive_avg_pool2d", C.adaptive_avg_pool2d, _unbatch(ref_adaptive_avg_pool2d, 4),
           _samples(ADAPTIVE2D), ("matmul",)),
    OpInfo("adaptive_avg_pool1d", C.adaptive_avg_pool1d, _unbatch(ref_adaptive_avg_pool1d, 3),
           _samples(ADAPTIVE1D), ("matmul",)),
    OpInfo("adaptive_max_pool2d", C.adaptive_max_pool2d, _unbatch(ref_adaptive_max_pool2d, 4),
           _samples(AMAX2D), ("take_along_dim", "argmax", "reshape")),
    OpInfo("adaptive_max_pool1d", C.adaptive_max_pool1d, _unbatch(ref_adaptive_max_pool1d, 3),
           _samples(AMAX1D), ("take_along_dim", "argmax", "reshape")),
]
