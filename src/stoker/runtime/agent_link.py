"""A runtime's end of one pod's agent connection: send requests, wait for their replies.

The local runtime connects to the agent's Unix socket; the Kubernetes runtime is dialed by
the agent. Past that the wire is the same (:mod:`stoker.agent.protocol`), and so is this
part of it: one writer at a time (the newest connection wins), and requests answered by
the event named after them (``promote`` -> ``promoted``), or refused by an ``error``
without a job, which goes to every request waiting.
"""

from __future__ import annotations

import asyncio

from stoker.agent import protocol

#: how long a request waits for its reply
REPLY_TIMEOUT_S = 10.0


class AgentNotConnected(ConnectionError):
    """The pod's agent has no connection to this runtime (not yet, or not any more)."""


class AgentLink:
    """The connection to one pod's agent, as the runtime holds it."""

    def __init__(self, pod: str) -> None:
        self.pod = pod
        self.writer: asyncio.StreamWriter | None = None
        self._replies: dict[str, asyncio.Future[protocol.Message]] = {}

    @property
    def connected(self) -> bool:
        return self.writer is not None

    async def send(self, msg: protocol.Message) -> None:
        """Send one request (AgentNotConnected if the agent is not connected)."""
        if self.writer is None:
            raise AgentNotConnected(f"pod: {self.pod}'s agent is not connected")
        self.writer.write(protocol.encode(msg))
        await self.writer.drain()

    async def request(
        self, msg: protocol.Message, reply: str, timeout_s: float = REPLY_TIMEOUT_S
    ) -> protocol.Message:
        """Send ``msg`` and wait for the event ``reply`` (or the agent's refusal, an
        ``error`` event: the caller looks at ``ev``)."""
        fut: asyncio.Future[protocol.Message] = asyncio.get_running_loop().create_future()
        self._replies[reply] = fut
        await self.send(msg)
        return await asyncio.wait_for(fut, timeout_s)

    def answer(self, msg: protocol.Message) -> None:
        """Hand an event that is no job's to the request waiting for it; a refusal (an
        ``error`` without a job) goes to every request waiting."""
        ev = str(msg.get("ev"))
        if ev == "error":
            waiting, self._replies = list(self._replies.values()), {}
        else:
            fut = self._replies.pop(ev, None)
            waiting = [fut] if fut is not None else []
        for fut in waiting:
            if not fut.done():
                fut.set_result(msg)

    def attach(self, writer: asyncio.StreamWriter) -> None:
        """Take a new connection of the agent (an older one is closed: the newest wins)."""
        self.hang_up()
        self.writer = writer

    def detach(self, writer: asyncio.StreamWriter) -> None:
        """This connection ended: forget it, unless a newer one replaced it already."""
        if self.writer is writer:
            self.writer = None

    def hang_up(self) -> None:
        """Close the connection (its reader sees the end and returns)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
