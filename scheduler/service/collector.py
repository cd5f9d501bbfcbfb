"""The cyclic garbage collector, paused while decide() runs.

A 1,000-node pass makes some 10^5 short-lived objects, nearly all freed by reference counting.
With the collector on, its young-generation sweeps during the pass cost about a twelfth of
it, and a full sweep, when one falls in the pass, walks the whole snapshot for nothing (a
fifth); both measured side by side with bench/pass_time.py. Any cycles a pass leaves are
found by the next collection once the collector is back on.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
