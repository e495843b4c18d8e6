"""The pure decision core: cluster model, events, actions, policies.

No I/O, no wall clock, no threads: every call takes ``now`` and the same events give the
same actions. The broker and the simulator are drivers that carry out its actions.
"""

from stoker.core.actions import (
    Action,
    BindJob,
    JobEnded,
    KillJob,
    PromoteStandby,
    RecyclePod,
    StartPod,
    StopPod,
)
from stoker.core.events import (
    Event,
    JobCancelled,
    JobFinished,
    JobStarted,
    JobSubmitted,
    PodFailed,
    PodGone,
    PodReady,
    Tick,
)
from stoker.core.model import (
    GPU,
    Cluster,
    Failure,
    HitPath,
    Job,
    JobSpec,
    JobState,
    Node,
    Pod,
    PodState,
    Profile,
)
from stoker.core.pool import Core, CoreError, Policies

__all__ = [
    "GPU",
    "Action",
    "BindJob",
    "Cluster",
    "Core",
    "CoreError",
    "Event",
    "Failure",
    "HitPath",
    "Job",
    "JobCancelled",
    "JobEnded",
    "JobFinished",
    "JobSpec",
    "JobStarted",
    "JobState",
    "JobSubmitted",
    "KillJob",
    "Node",
    "Pod",
    "PodFailed",
    "PodGone",
    "PodReady",
    "PodState",
    "Policies",
    "Profile",
    "PromoteStandby",
    "RecyclePod",
    "StartPod",
    "StopPod",
    "Tick",
]
