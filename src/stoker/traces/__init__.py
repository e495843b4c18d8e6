"""Trace loaders and generators for the simulator (data is read in place, never copied).

:func:`load_trace` is the one entry the simulator uses: ``load_trace(kind, path, seed,
days=..., start_day=..., scale=...)`` for ``kind`` in ``v2026``, ``openb``, ``philly``.
"""

from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.traces.load import TRACE_KINDS, load_trace

__all__ = ["TRACE_KINDS", "Trace", "TraceJob", "TraceNode", "load_trace"]
