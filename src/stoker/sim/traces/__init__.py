"""Trace loaders and generators for the simulator (data is read in place, never copied)."""

from stoker.sim.traces.base import Trace, TraceJob, TraceNode

__all__ = ["Trace", "TraceJob", "TraceNode"]
