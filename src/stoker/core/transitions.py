"""Explicit state machines for pods and jobs: every move goes through one ``transition``.

Each table is the set of legal (start, finish) pairs; a move not in its table raises
:class:`IllegalTransition` with the object's recent history, so a bug shows where the
object came from instead of corrupting the books later. Each machine has one final state:
only an object there may be forgotten (dropped from the core's registries), checked the
same way. (The shape is Dask's scheduler's: a table of (start, finish) moves and one
``_transition``; the code is ours. What a move does is the part's that asks for it.)
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from stoker.core.model import JobState, PodState


class IllegalTransition(AssertionError):
    """A pod or job was asked to move where its table does not allow."""


class _Stateful(Protocol):
    id: str
    state: PodState | JobState
    history: deque[tuple[float, str, str]]


_P = PodState
POD_MOVES: frozenset[tuple[PodState, PodState]] = frozenset(
    {
        (_P.STARTING, _P.ACTIVE),  # ready for the job it was started for (or an orphan)
        (_P.STARTING, _P.STANDBY),  # a standby pod came up
        (_P.STARTING, _P.RECYCLING),  # a recycled pod's new id
        (_P.STARTING, _P.STOPPING),
        (_P.STARTING, _P.GONE),  # failed to start
        (_P.STANDBY, _P.STARTING),  # promoted: CUDA initialising
        (_P.STANDBY, _P.STOPPING),
        (_P.STANDBY, _P.GONE),
        (_P.WARM, _P.ACTIVE),  # warm hit
        (_P.WARM, _P.STOPPING),
        (_P.WARM, _P.GONE),
        (_P.ACTIVE, _P.WARM),  # its job ended: it waits for its caller
        (_P.ACTIVE, _P.STOPPING),
        (_P.ACTIVE, _P.GONE),
        (_P.RECYCLING, _P.ACTIVE),
        (_P.RECYCLING, _P.STOPPING),
        (_P.RECYCLING, _P.GONE),
        (_P.STOPPING, _P.GONE),
    }
)

_J = JobState
JOB_MOVES: frozenset[tuple[JobState, JobState]] = frozenset(
    {
        (_J.QUEUED, _J.PLACED),
        (_J.QUEUED, _J.FINISHED),  # cancelled in the queue
        (_J.QUEUED, _J.SET_ASIDE),  # a node left: it fits nowhere now
        (_J.SET_ASIDE, _J.QUEUED),  # nodes joined: it fits again, back in its queue
        (_J.SET_ASIDE, _J.FINISHED),  # cancelled (or revoked) while set aside
        (_J.PLACED, _J.BINDING),
        (_J.PLACED, _J.QUEUED),  # a pod failed before it ran / evicted while starting
        (_J.PLACED, _J.FINISHED),
        (_J.BINDING, _J.RUNNING),
        (_J.BINDING, _J.QUEUED),
        (_J.BINDING, _J.FINISHED),
        (_J.RUNNING, _J.QUEUED),  # a spot job evicted (checked by the caller: spot only)
        (_J.RUNNING, _J.FINISHED),
    }
)


class Transitions:
    """One state machine: the legal moves and the one ``transition``."""

    def __init__(self, kind: str, moves: frozenset, final: PodState | JobState) -> None:
        self.kind = kind
        self.final = final
        # each legal move's history entry, its states' values read once (an enum member's
        # ``value`` is a Python-level property: two per move, millions in a long run)
        self._values = {key: (key[1].value, key[0].value) for key in moves}

    def transition(self, obj: _Stateful, finish: PodState | JobState, now: float) -> None:
        """Move ``obj`` to ``finish`` (a no-op when it is there already) or raise."""
        start = obj.state
        if start is finish:
            return
        entry = self._values.get((start, finish))
        if entry is None:
            self._illegal(obj, f"{start} -> {finish} is not a legal move")
        obj.state = finish  # type: ignore[assignment]
        obj.history.append((now, *entry))

    def forget(self, obj: _Stateful) -> None:
        """Check that ``obj`` may be dropped (it is in the final state) or raise."""
        if obj.state is not self.final:
            self._illegal(
                obj, f"only a {self.final} {self.kind} may be forgotten, not a {obj.state} one"
            )

    def _illegal(self, obj: _Stateful, what: str) -> None:
        past = " -> ".join(f"{s}@{t:g}({why})" for t, s, why in obj.history) or "none"
        raise IllegalTransition(f"{self.kind} {obj.id}: {what}; recent history: {past}")
