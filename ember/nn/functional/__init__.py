"""``ember.nn.functional``: the functional forms of layers, activations and losses."""
from ...ops.conv import FUNCTIONAL as _CONV_NAMES
from ...ops import conv as _conv
from ...ops.index import one_hot, pad  # noqa: F401
from ...ops.softmax import log_softmax, softmax  # noqa: F401
from ._activation import *  # noqa: F401,F403
from ._layers import *  # noqa: F401,F403
from ._attention import *  # noqa: F401,F403
from ._loss import *  # noqa: F401,F403
from ._channel import *  # noqa: F401,F403
from ._grid import *  # noqa: F401,F403
from ._embedding_bag import *  # noqa: F401,F403
from ._pool_more import *  # noqa: F401,F403
from ._conv3d import *  # noqa: F401,F403
from ._loss_multi_margin import *  # noqa: F401,F403
from ._ctc import *  # noqa: F401,F403
from ._gumbel import *  # noqa: F401,F403
from ._inplace_more import *  # noqa: F401,F403
from ._pool_frac import *  # noqa: F401,F403
from ._misc_api import *  # noqa: F401,F403
from ._linear_ce import *  # noqa: F401,F403

globals().update({_n: getattr(_conv, _n) for _n in _CONV_NAMES})

# NOTE: eager calls of these composites run their compiled form (the compiler's C kernels:
# im2col/col2im and max-pool loops, fused norms and activations), see
# ember/codegen/eager_composite.py; under a tracer, forward AD, autocast... they run as written.
from ...codegen.eager_composite import allow_tensor_class as _allow  # noqa: E402
from ...codegen.eager_composite import eager_composite as _fast  # noqa: E402
from ..parameter import Parameter as _Parameter  # noqa: E402
from ._loss import targets_in_range as _targets_in_range  # noqa: E402

_allow(_Parameter)


def _not_inplace(*args, **kwargs):
    return not kwargs.get("inplace", args[1] if len(args) > 1 else False)


conv1d, conv2d = _fast(conv1d), _fast(conv2d)  # noqa: F821 - from _CONV_NAMES
max_pool1d, max_pool2d = _fast(max_pool1d), _fast(max_pool2d)  # noqa: F821
avg_pool1d, avg_pool2d = _fast(avg_pool1d), _fast(avg_pool2d)  # noqa: F821
# NOTE: autocast=: PyTorch's op, whose policy an autocast call applies at the boundary
# before running the compiled form (on no list: GELU/SiLU keep their input's dtype)
gelu = _fast(gelu, autocast="gelu", pointwise=True)  # noqa: F405
silu = _fast(silu, when=_not_inplace, autocast="silu", pointwise=True)  # noqa: F405
layer_norm = _fast(layer_norm, autocast="layer_norm")  # noqa: F405
group_norm = _fast(group_norm, autocast="group_norm")  # noqa: F405
batch_norm = _fast(batch_norm)  # noqa: F405 - running stats: in-place writes, written back
cross_entropy = _fast(cross_entropy, autocast="cross_entropy",  # noqa: F405
                      check=_targets_in_range("cross_entropy"))
nll_loss = _fast(nll_loss, autocast="nll_loss",  # noqa: F405
                 check=_targets_in_range("nll_loss"))
# NOTE: relu is one primitive, but its eager backward is two NumPy passes (``out > 0``, then
# a float-by-bool multiply) where the compiled form runs one fused kernel: from 1M elements
# (a CNN's first conv block) that pays for the compiled call; W1's (128, 512) does not.
relu = _fast(relu, when=_not_inplace, min_elements=1 << 20, pointwise=True)  # noqa: F405
