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

globals().update({_n: getattr(_conv, _n) for _n in _CONV_NAMES})
