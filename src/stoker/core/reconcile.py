"""After a broker restart: which nodes joined or left the cluster while it was down, and
the replay of the log that rebuilds the core.

(What the core makes of the pods the runtime has alive is the core's own answer to
:class:`~stoker.core.events.PodsFound`: :mod:`stoker.core.restart`.)

:func:`node_events` compares the core's nodes with those the cluster has now (the nodes a
runtime with a cluster of its own, Kubernetes, discovers; this host's as configured), and
answers with the node events that make the core agree: a node that changed is changed in
place (:class:`~stoker.core.events.NodeChanged`), so the pods on the cards it kept live on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from stoker.core.core import Core
from stoker.core.events import Event, NodeAdded, NodeChanged, NodeRemoved
from stoker.core.model import GPU, CoreError, Job, JobState, Node

_Said = TypeVar("_Said", NodeAdded, NodeChanged)


def node_added(node: Node) -> NodeAdded:
    """A node as the core's event (its GPU ids named only where they are not the
    default ``<name>/<index>``)."""
    return _said(NodeAdded, node)


def _said(kind: type[_Said], node: Node) -> _Said:
    """``node`` as an event of ``kind`` (NodeAdded or NodeChanged: the same fields)."""
    ids = tuple(g.id for g in node.gpus)
    named = ids != tuple(f"{node.name}/{i}" for i in range(len(ids)))
    return kind(node.name, node.gpu_model, len(ids), node.cpu, node.memory_gb, ids if named else ())


def node_change(old: Node | None, node: Node) -> NodeAdded | NodeChanged | None:
    """The event that brings the core's node of this name (``old``; None: it has none) to
    ``node`` as the cluster has it: NodeAdded for a new one, NodeChanged for one of another
    shape (GPUs, GPU model, CPU slots: the core changes it in place, keeping the pods on
    the cards it keeps), None when they agree."""
    if old is None:
        return node_added(node)
    if node_added(old) == node_added(node):
        return None
    return _said(NodeChanged, node)


def node_events(
    known: Mapping[str, Node], seen: Sequence[Node]
) -> list[NodeAdded | NodeChanged | NodeRemoved]:
    """The events that bring the core's nodes (``known``, by name) to the cluster's
    (``seen``): :func:`node_change` for each node seen, NodeRemoved (in name order) for
    one the cluster no longer has."""
    events: list[NodeAdded | NodeChanged | NodeRemoved] = []
    for node in seen:
        if (event := node_change(known.get(node.name), node)) is not None:
            events.append(event)
    names = {n.name for n in seen}
    events.extend(NodeRemoved(name) for name in sorted(set(known) - names))
    return events


# how many GPUs more than this host has now a log from before its node was logged is tried
# on (a host that lost more than this in the upgrade's restart is refused, with the remedy)
LEGACY_MORE_GPUS = 16


def legacy_nodes(local: Node, more: int = LEGACY_MORE_GPUS) -> Iterator[Node]:
    """The nodes a log written before this host's node was logged may have run on, the
    likeliest first: this host's as configured now, then with 1 to ``more`` GPUs more
    (named on from its last GPU id's number, as the runtime names them: ``vgpu1`` ->
    ``vgpu2``; none when it has no GPU to name them by), then with fewer (its first
    ones). :func:`implied_node` takes the first on which the log replays and
    :func:`replay_agrees`."""
    yield local
    named = re.fullmatch(r"(.*?)(\d+)", local.gpus[-1].id) if local.gpus else None
    if named is not None:
        prefix, last = named.group(1), int(named.group(2))
        for extra in range(1, more + 1):
            ids = [g.id for g in local.gpus] + [f"{prefix}{last + i}" for i in range(1, extra + 1)]
            yield _with_gpus(local, ids)
    for count in range(len(local.gpus) - 1, 0, -1):
        yield _with_gpus(local, [g.id for g in local.gpus[:count]])


def _with_gpus(node: Node, ids: list[str]) -> Node:
    gpus = [GPU(g, node.name, i, node.gpu_model) for i, g in enumerate(ids)]
    return Node(node.name, node.gpu_model, gpus, node.cpu, node.memory_gb)


def replay_agrees(jobs: Mapping[str, Job], stored: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a replayed core's unfinished jobs are the stored unfinished ones (``stored``:
    their rows), each in the state and pods its row has. The rows are written in the very
    commits that log the events, so a replay on the cluster the log ran on agrees; one on
    another (fewer GPUs: a job started later or never; more: sooner) does not, once any
    unfinished job's placement depended on it."""
    rows = {r["id"]: (r["state"], list(r["pods"])) for r in stored}
    held = {
        j.id: (j.state.shown.value, list(j.pods))
        for j in jobs.values()
        if j.state is not JobState.FINISHED
    }
    return held == rows


def replay_into(
    core: Core, implied: Event | None, events: Sequence[tuple[Event, float]], now: float
) -> float:
    """Hand ``core`` the logged events (``implied`` first, at the first one's time) and
    return the last time handed. Times never go back: an event logged with an earlier
    clock is handed at the latest time so far."""
    if implied is not None and events:
        core.handle(implied, events[0][1])
    for event, at in events:
        core.handle(event, max(at, now))
        now = max(now, at)
    return now


def implied_node(
    new_core: Callable[[], Core],
    local: Node,
    events: Sequence[tuple[Event, float]],
    stored: Sequence[Mapping[str, Any]],
    now: float,
) -> NodeAdded:
    """The node a log from before this host's node was logged ran on: the first of
    :func:`legacy_nodes` (this host's as configured now, then with more GPUs, then fewer)
    on which the log replays into a fresh core (``new_core``) and leaves the stored
    unfinished jobs (``stored``: their rows) as stored (:func:`replay_agrees`), so a host
    that also lost GPUs in the upgrade's restart replays on the GPUs it had and meets the
    loss as its node's change after. Raises RuntimeError when none does: replaying on a
    wrong node could run a job twice."""
    for node in legacy_nodes(local):
        core = new_core()
        try:
            replay_into(core, node_added(node), events, now)
        except CoreError:
            continue  # a job the log accepted is refused here: not the node it ran on
        if replay_agrees(core.jobs, stored):
            return node_added(node)
    raise RuntimeError(
        "the store was written before this host's node was logged, and on none of the "
        f"nodes tried (this host's {len(local.gpus)} GPUs, up to {LEGACY_MORE_GPUS} more, "
        "or fewer) does its log replay as stored: start this broker once with the config "
        "that wrote it, then change the config"
    )
