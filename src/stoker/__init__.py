"""stoker: brokers GPU capacity for agent and RL loops (warm pools) and guaranteed/spot work.

The decision core lives in :mod:`stoker.core`; the live service in :mod:`stoker.broker`; the
discrete-event simulator in :mod:`stoker.sim`. The SDK is re-exported here lazily so that
importing the core never pulls in HTTP libraries.
"""

from typing import Any

__version__ = "0.1.0"

_SDK = (
    "AsyncClient",
    "AuthenticationError",
    "BrokerUnavailable",
    "Client",
    "InvalidRequest",
    "JobPreempted",
    "JobShape",
    "JobTimeout",
    "NotFound",
    "PermissionDenied",
    "PodLost",
    "SessionFileError",
    "StokerError",
    "StorageFull",
    "TenantLimit",
)
__all__ = [*_SDK, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _SDK:
        from stoker import client

        return getattr(client, name)
    raise AttributeError(name)
