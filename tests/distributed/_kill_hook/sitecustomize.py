"""Fault injection for test_ddp_train.py (put this folder on PYTHONPATH).

In the first attempt of an ``ember run`` job (``EMBER_RESTART_COUNT=0``), the rank named
by ``EMBER_TEST_KILL_RANK`` SIGKILLs itself right after optimizer step
``EMBER_TEST_KILL_AT``: a rank dying mid-run, at a reproducible point.
"""
import os

if (os.environ.get("EMBER_TEST_KILL_AT") and os.environ.get("EMBER_RESTART_COUNT") == "0"
        and os.environ.get("RANK") == os.environ.get("EMBER_TEST_KILL_RANK", "1")):
    import signal

    import ember.optim

    _at = int(os.environ["EMBER_TEST_KILL_AT"])
    _step = ember.optim.AdamW.step
    _count = [0]

    def _step_then_die(self, *args, **kwargs):
        out = _step(self, *args, **kwargs)
        _count[0] += 1
        if _count[0] == _at:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    ember.optim.AdamW.step = _step_then_die
