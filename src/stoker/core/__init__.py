"""The pure decision core: cluster model, events, actions, policies, presets; one
``Core.handle(event, now) -> actions`` for pool, hp and spot jobs.

No I/O, no wall clock, no threads: every call takes ``now`` and the same events give the
same actions. The broker and the simulator are drivers that carry out its actions.
"""

from stoker.core.actions import (
    Action,
    BindJob,
    JobEnded,
    JobRequeued,
    KillJob,
    PromoteStandby,
    RecyclePod,
    StartPod,
    StopPod,
)
from stoker.core.core import Core, Policies
from stoker.core.events import (
    BindFailed,
    Event,
    ForecastUpdated,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeRemoved,
    PodFailed,
    PodGone,
    PodReady,
    PodStopFailed,
    RankExited,
    RankStarted,
    Tick,
)
from stoker.core.model import (
    GPU,
    Cluster,
    CoreError,
    Failure,
    HitPath,
    Job,
    JobClass,
    JobSpec,
    JobState,
    Node,
    Pod,
    PodState,
    Profile,
)
from stoker.core.registry import Preset, preset, presets
from stoker.core.transitions import IllegalTransition

__all__ = [
    "GPU",
    "Action",
    "BindFailed",
    "BindJob",
    "Cluster",
    "Core",
    "CoreError",
    "Event",
    "Failure",
    "ForecastUpdated",
    "HitPath",
    "IllegalTransition",
    "Job",
    "JobCancelled",
    "JobClass",
    "JobEnded",
    "JobRequeued",
    "JobSpec",
    "JobState",
    "JobSubmitted",
    "KillJob",
    "Node",
    "NodeAdded",
    "NodeRemoved",
    "Pod",
    "PodFailed",
    "PodGone",
    "PodReady",
    "PodState",
    "PodStopFailed",
    "Policies",
    "Preset",
    "Profile",
    "PromoteStandby",
    "RankExited",
    "RankStarted",
    "RecyclePod",
    "StartPod",
    "StopPod",
    "Tick",
    "preset",
    "presets",
]
