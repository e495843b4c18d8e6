"""A broker served by uvicorn on 127.0.0.1 from a background thread (demo, bench, tests).

The broker and its runtime live on the thread's own event loop; callers talk to it over
real HTTP, exactly as a remote client would. Its pods die with this process however it
ends (:class:`~stoker.runtime.reaper.OwnerWatch`: a SIGKILLed owner leaves nothing).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from stoker.broker.app import Broker
from stoker.broker.config import BrokerConfig
from stoker.runtime.reaper import OwnerWatch

_STOP_S = 120.0  # a close waits for runtime calls (10 s), then stops every pod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """Start with :meth:`start` (or as a context manager); ``url`` and ``admin_token``."""

    def __init__(self, cfg: BrokerConfig, port: int = 0, stop_pods: bool = True) -> None:
        self.cfg = cfg
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stop_pods = stop_pods
        self.broker: Broker | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._watch: OwnerWatch | None = None

    @property
    def admin_token(self) -> str:
        return self.cfg.admin_token_path.read_text().strip()

    def start(self, timeout_s: float = 60.0) -> EmbeddedBroker:
        self.cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self._watch = OwnerWatch(self.cfg.runtime_dir, self.cfg.lock_path)
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self.broker = Broker(self.cfg, url=self.url)
                self.broker.stop_pods_on_close = self.stop_pods
                config = uvicorn.Config(
                    self.broker.app,
                    host="127.0.0.1",
                    port=self.port,
                    log_level="warning",
                    lifespan="on",
                    access_log=False,  # as `stoker up`: no per-request work nobody reads
                    proxy_headers=False,
                    server_header=False,
                    timeout_graceful_shutdown=5,
                )
                self._server = uvicorn.Server(config)
                ready.set()
                loop.run_until_complete(self._server.serve())
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="stoker-broker", daemon=True)
        self._thread.start()
        ready.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not (self._server is not None and self._server.started):
            if self._error is not None:
                self._thread.join(_STOP_S)
                if not self._thread.is_alive():  # it cleared what it had started
                    self._disarm()
                raise RuntimeError(f"broker did not start: {self._error}") from self._error
            if time.monotonic() > deadline:
                raise TimeoutError("broker did not start in time")
            time.sleep(0.01)
        return self

    def stop(self, stop_pods: bool | None = None) -> None:
        """Shut the server down; its pods are stopped too unless ``stop_pods`` is False
        (then a new broker on the same data dir re-adopts them)."""
        if self._server is None or self._thread is None or self._loop is None:
            return
        if stop_pods is not None and self.broker is not None:
            self.broker.stop_pods_on_close = stop_pods
        self._server.should_exit = True  # the lifespan's end closes the broker (and its pods)
        self._thread.join(_STOP_S)
        self._server = None
        if self._thread.is_alive():  # its pods may outlive the caller: say so, never pass
            raise TimeoutError(f"the broker did not stop within {_STOP_S} s")
        self._disarm()

    def _disarm(self) -> None:
        """A clean stop: the watchdog leaves the runtime dir alone (pods stopped, or kept
        on purpose for the next broker on the dir)."""
        if self._watch is not None:
            self._watch.disarm()
            self._watch = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
