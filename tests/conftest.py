"""Shared fixtures: for the core tests, a tiny driver that answers the core's actions the way a
runtime would and checks the core's invariants after every event; for the whole suite, a
check that it leaves no sandbox, process or cgroup of its own behind."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import pytest

from leaks import leftovers, reap
from stoker.core import (
    Action,
    BindJob,
    Cluster,
    Core,
    Event,
    JobEnded,
    JobRequeued,
    JobSpec,
    JobSubmitted,
    PodGone,
    PodReady,
    Policies,
    Profile,
    PromoteStandby,
    RankExited,
    RankStarted,
    RecyclePod,
    StartPod,
    StopPod,
)


class Driver:
    """Feeds events to a :class:`Core`, records every action and what is outstanding.

    ``starting``: pods asked to start, promote or recycle and not yet reported ready;
    ``binding``: jobs bound and not yet started; ``running``: started, not finished;
    ``stopping``: pods asked to stop and not yet gone. Nothing is answered by itself: each
    test says which answers come and when, so orderings stay explicit.
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self.now = 0.0
        self.log: list[tuple[float, Event, list[Action]]] = []
        self.starting: dict[str, None] = {}
        self.binding: dict[str, None] = {}
        self.running: dict[str, None] = {}
        self.stopping: dict[str, None] = {}
        self._n = 0

    def send(self, event: Event, at: float | None = None) -> list[Action]:
        if at is not None:
            self.now = at
        actions = self.core.handle(event, self.now)
        self.core.check()
        self.log.append((self.now, event, actions))
        for action in actions:
            match action:
                case StartPod(pod=pid) | PromoteStandby(pod=pid):
                    self.starting[pid] = None
                case RecyclePod(pod=old, new_pod=new):
                    self.stopping.pop(old, None)
                    self.starting[new] = None
                case StopPod(pod=pid):
                    self.starting.pop(pid, None)
                    self.stopping[pid] = None
                case BindJob(job=jid):
                    self.binding[jid] = None
                case JobRequeued(job=jid) | JobEnded(job=jid):
                    self.binding.pop(jid, None)
                    self.running.pop(jid, None)
        if isinstance(event, RankStarted):
            self.binding.pop(event.job, None)
            self.running[event.job] = None
        elif isinstance(event, RankExited):
            self.binding.pop(event.job, None)
            self.running.pop(event.job, None)
        return actions

    def workers(self, jid: str) -> int:
        return self.core.jobs[jid].spec.workers

    def submit(
        self, tenant: str = "t", tag: str = "a", profile: str = "p", workers: int = 1
    ) -> str:
        self._n += 1
        jid = f"job-{self._n}"
        self.send(JobSubmitted(JobSpec(jid, tenant, profile, tag, workers=workers)))
        return jid

    def ready(self, pods: Iterable[str] | None = None) -> None:
        for pid in list(self.starting if pods is None else pods):
            self.starting.pop(pid, None)
            self.send(PodReady(pid))

    def start(self) -> None:
        for jid in list(self.binding):
            for rank in range(self.workers(jid)):
                self.send(RankStarted(jid, rank))

    def finish(self, jid: str, at: float | None = None, **kw: object) -> list[Action]:
        """Every rank of the job exits (with ``exit_code``/``failure`` if given); returns
        the core's actions to them all."""
        out: list[Action] = []
        for rank in range(self.workers(jid)):
            out += self.send(RankExited(jid, rank, **kw), at)  # type: ignore[arg-type]
        return out

    def gone(self, pods: Iterable[str] | None = None) -> None:
        for pid in list(self.stopping if pods is None else pods):
            self.stopping.pop(pid, None)
            self.send(PodGone(pid))

    def settle(self) -> None:
        """Answer everything outstanding until quiet: pods ready, jobs started, pods gone.

        A core that keeps starting and stopping pods at one instant never gets quiet: that
        livelock fails here, with the last decisions, instead of hanging the test."""
        for _ in range(1_000):
            if not (self.starting or self.binding or self.stopping):
                return
            self.ready()
            self.start()
            self.gone()
        tail = "\n".join(f"{at:.3f} {ev} -> {acts}" for at, ev, acts in self.log[-12:])
        raise AssertionError(f"the core did not settle at t={self.now}; last decisions:\n{tail}")

    def run(self, tenant: str = "t", tag: str = "a", profile: str = "p") -> str:
        """Submit a job, bring it to running and return its id."""
        jid = self.submit(tenant, tag, profile)
        self.settle()
        return jid

    def actions(self, kind: type) -> list[Action]:
        return [a for _, _, acts in self.log for a in acts if isinstance(a, kind)]


def make_core(
    nodes: int = 1,
    gpus: int = 2,
    profiles: Iterable[Profile] = (Profile("p"),),
    policies: Policies | None = None,
) -> Core:
    return Core(Cluster.uniform(nodes, gpus), list(profiles), policies)


@pytest.fixture
def driver() -> Driver:
    """A driver over one node of two whole-GPU pods with the default (Firepool) policies."""
    return Driver(make_core())


@pytest.fixture(autouse=True)
def _nothing_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that left a sandbox, process, pod cgroup or workspace mount under its
    own ``tmp_path`` (checked after every other fixture of it has been torn down), and stop
    what it left."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    root = request.getfixturevalue("tmp_path")  # set up before (so torn down after) ours
    yield
    if left := leftovers(root):
        reap(left)  # a failing test must not leak past the run either
        pytest.fail(f"{request.node.nodeid} left {left}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _nothing_outlives_the_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the run if any test left a sandbox, process, pod cgroup or mount under the
    session's temporary directory (where every test's data dirs live)."""
    yield
    left = leftovers(tmp_path_factory.getbasetemp())
    if left:
        reap(left)
        pytest.fail(f"the suite left {left}", pytrace=False)


# ----------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A private PostgreSQL server for the whole session, stopped and removed at its end.

    Without the server binaries the tests that need it skip here and fail in CI (``CI``
    set), where scripts/bootstrap.sh must have installed them.
    """
    from stoker.broker.pgserver import PgServer, PostgresMissing

    try:
        server = PgServer().start()
    except PostgresMissing as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {exc}", pytrace=False)
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: object) -> str:
    """The URL of a new, empty database on the session's PostgreSQL server."""
    from stoker.broker.pgserver import PgServer

    assert isinstance(postgres_server, PgServer)
    return postgres_server.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A store URL on each dialect: an SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/stoker.db"
    return str(request.getfixturevalue("postgres_url"))
