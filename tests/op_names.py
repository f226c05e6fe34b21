"""``OpNames``: a dispatch mode recording the names of the primitives it sees (what a tracer
would), for tests that check which ops an eager call dispatches."""
from ember.autograd.grad_mode import state
from ember.ops import dispatch


class OpNames:
    """``with OpNames() as rec: ...`` then ``rec.names``: each primitive's name, in order."""

    def __init__(self):
        self.names = []

    def process(self, op, inputs, params):
        self.names.append(op.name)
        state.modes.remove(self)
        try:
            return dispatch.apply(op, inputs, params)
        finally:
            state.modes.append(self)

    def __enter__(self):
        state.modes.append(self)
        return self

    def __exit__(self, *exc):
        state.modes.remove(self)
