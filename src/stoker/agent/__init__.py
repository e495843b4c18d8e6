"""stoker.agent: the agent inside a pod (``python -m stoker.agent``)."""

TOKEN_ENV = "STOKER_AGENT_TOKEN"  # the pod's token (Kubernetes: from the pod's Secret)
STANDBY_ENV = "STOKER_STANDBY"  # "1": no GPU, no CUDA, no job until promoted
