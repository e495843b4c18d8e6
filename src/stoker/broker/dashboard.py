"""The broker's read-only dashboard at ``/``, the events endpoint, and the state they show.

Who may look: the admin token or the read-only viewer token (``viewer.token`` in the data
directory, made on first start, readable only by its owner). The browser posts the token
once to ``/login`` (a form: never in a URL, so never in an access log or the history) and
gets a signed, HttpOnly, SameSite=Strict session cookie for 12 hours; the key that signs it
lives only in the broker's memory, so a restart asks for the token again. Scripts may send
``Authorization: Bearer`` instead of the cookie. The login form carries a CSRF token, the
same one as in a cookie only ``/login`` gets (SameSite=Strict, HttpOnly): a sign-in posted
from another site, or without the form's token, is refused. Every page is sent with
:data:`PAGE_HEADERS`: a Content-Security-Policy admitting the broker's own script and styles
only, and no framing (``frame-ancestors 'none'``, ``X-Frame-Options: DENY``).

The page is hand-written HTML, CSS and JS under ``static/`` (no build step, no CDN); it
polls ``/dashboard/state`` every two seconds while visible. That one JSON snapshot holds
everything on the page: warm pools and their pods per GPU, the queue, recent jobs, hit
rates and start-latency percentiles over the last hour, GPUs held by idle pods against the
warm budget (sampled every ``period_s`` into an hour's history), and per GPU pool the spot
quota, HP and spot use, the HP forecast band, eta and the eviction rate.
"""

import asyncio
import contextlib
import hashlib
import hmac
import secrets
import time
from collections import deque
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qs

import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from stoker.broker.auth import AuthError, Principal, hash_token, token_file
from stoker.broker.events_log import DecisionLog
from stoker.broker.metrics import BrokerGauges
from stoker.broker.store import jobs as jobs_table
from stoker.core import JobClass, PodState

if TYPE_CHECKING:
    from stoker.broker.app import Broker

COOKIE = "stoker_session"
CSRF_COOKIE = "stoker_csrf"
#: on every page: its own script, styles and calls only (no inline script, so no injected
#: one runs), no plugin or base rewrite, forms post here only, and never in a frame
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self';"
    " img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none';"
    " frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_SESSION_S = 12 * 3600
_HISTORY_S = 3600
_STATS_ROWS = 20_000  # started jobs of the last hour the percentiles read, newest first
_STATIC = resources.files("stoker.broker") / "static"


def gpu_pools(broker: "Broker") -> list[dict[str, Any]]:
    """The GPU pools as ``GET /v1/pools`` shows them; none on a broker without hp/spot."""
    rows = getattr(broker.loop, "gpu_pools", None)
    return [dict(r) for r in rows()] if rows is not None else []


def gauges(broker: "Broker") -> BrokerGauges:
    """The broker's state now, for the Prometheus gauges (none on a replica that does not
    lead: the leader's scrape has them)."""
    sched = broker.loop
    if sched is None:
        return BrokerGauges()
    core = sched.core
    g = BrokerGauges(
        queued={p: len(core.queued(p)) for p in sched.profiles},
        pods={(p, s.value): 0 for p in sched.profiles for s in PodState if s is not PodState.GONE},
        idle_gpus={"warm": 0.0, "standby": 0.0},
        budget_gpus=core.budget_limit(),
        capacity_gpus=float(core.cluster.total_gpus),
        gpu_pools=gpu_pools(broker),
        stored_output=dict(sched.output_budget.stored),
        held={**sched.held(), **broker.decisions.held()},
    )
    for pod in core.pods.values():
        for state, secs in pod.held.items():
            g.held_seconds[state] = g.held_seconds.get(state, 0.0) + secs
        if pod.state is PodState.GONE:
            continue
        g.pods[(pod.profile, pod.state.value)] = g.pods.get((pod.profile, pod.state.value), 0) + 1
        if pod.state in (PodState.WARM, PodState.STANDBY):
            share = sum(core.cluster.gpus[gid].allocs.get(pod.id, 0.0) for gid in pod.gpus)
            g.idle_gpus[pod.state.value] += share
    return g


class ViewerAuth:
    """Admin or viewer token -> a signed session cookie; either, or the cookie, -> access."""

    def __init__(self, broker: "Broker", viewer_token_path: Path) -> None:
        self.broker = broker
        self.token_path = viewer_token_path
        self._viewer_hash = hash_token(token_file(viewer_token_path, broker.cfg.keys_dir is None))
        # from the shared key: a session cookie one replica signed opens on every other
        self._key = broker.box.derived_key(b"dashboard session")

    def role(self, token: str | None) -> str | None:
        """``admin``, ``viewer``, or None for any other token (a tenant's included: the
        dashboard shows every tenant's jobs)."""
        if not token:
            return None
        if hmac.compare_digest(hash_token(token), self._viewer_hash):
            return "viewer"
        try:
            who = self.broker.auth.principal(token)
        except AuthError:
            return None
        return "admin" if who.admin else None

    def session(self, role: str, now: float) -> str:
        body = f"{role}.{int(now) + _SESSION_S}"
        sig = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        return f"{body}.{sig}"

    def check_session(self, value: str | None, now: float) -> str | None:
        if not value or value.count(".") != 2:
            return None
        role, exp, sig = value.split(".")
        want = hmac.new(self._key, f"{role}.{exp}".encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(sig, want) or not exp.isdigit() or int(exp) < now:
            return None
        return role

    def who(self, request: Request, authorization: str | None) -> str | None:
        if authorization and authorization.lower().startswith("bearer "):
            return self.role(authorization[7:].strip())
        return self.check_session(request.cookies.get(COOKIE), time.time())


class History:
    """An hour of samples: GPUs held by idle warm and standby pods, the warm budget, active
    GPUs, the queue; per GPU pool its HP and spot use and spot quota."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.samples: deque[dict[str, Any]] = deque(maxlen=int(_HISTORY_S / period_s) + 1)

    @staticmethod
    def point(g: BrokerGauges, now: float) -> dict[str, Any]:
        """One sample of the gauges ``g`` at ``now``."""
        return {
            "t": now,
            "warm": g.idle_gpus["warm"],
            "standby": g.idle_gpus["standby"],
            "budget": g.budget_gpus,
            "queued": sum(g.queued.values()),
            "gpu_pools": {
                r["gpu_model"]: (r["hp_gpus"], r["spot_gpus"], r["spot_quota"]) for r in g.gpu_pools
            },
        }

    def sample(self, broker: "Broker", now: float) -> None:
        if broker.loop is None:
            return  # a replica that does not lead: the leader's history has this moment
        self.samples.append(self.point(gauges(broker), now))

    def _rows(self, since: float, live: dict[str, Any]) -> list[dict[str, Any]]:
        # the stored samples, then the present, so a chart always ends at "now"
        return [s for s in self.samples if s["t"] >= since and s["t"] < live["t"]] + [live]

    def series(self, since: float, live: dict[str, Any]) -> dict[str, list[float]]:
        rows = self._rows(since, live)
        return {k: [s[k] for s in rows] for k in ("t", "warm", "standby", "budget", "queued")}

    def gpu_pool_series(
        self, model: str, since: float, live: dict[str, Any]
    ) -> dict[str, list[float]]:
        rows = [s for s in self._rows(since, live) if model in s["gpu_pools"]]
        cols = [[s["gpu_pools"][model][i] for s in rows] for i in range(3)]
        return {"t": [s["t"] for s in rows], "hp": cols[0], "spot": cols[1], "quota": cols[2]}


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    a = np.asarray(values) * 1000.0
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


class Dashboard:
    """The dashboard of one broker: its auth, history sampler and snapshot."""

    def __init__(self, broker: "Broker", period_s: float = 10.0) -> None:
        self.broker = broker
        self.auth = ViewerAuth(broker, broker.cfg.viewer_token_path)
        self.history = History(period_s)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.history.sample(self.broker, time.time())
        self._task = asyncio.get_running_loop().create_task(self._sampler())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.history.period_s)
            self.history.sample(self.broker, time.time())

    def _stats(self, since: float) -> dict[str, Any]:
        """Hit paths and start-latency percentiles of the jobs started since ``since``."""
        t = jobs_table
        q = (
            sa.select(t.c.path, t.c.submitted, t.c.started)
            .where(t.c.started >= since, t.c.path.is_not(None))
            .order_by(t.c.started.desc())
            .limit(_STATS_ROWS)
        )
        with self.broker.store.engine.connect() as conn:
            rows = conn.execute(q).all()
        by_path: dict[str, list[float]] = {"warm": [], "standby": [], "cold": []}
        for path, submitted, started in rows:
            by_path.setdefault(path, []).append(started - submitted)
        n = len(rows)
        hits = len(by_path["warm"]) + len(by_path["standby"])
        return {
            "started": n,
            "paths": {p: len(v) for p, v in by_path.items()},
            "hit_rate": hits / n if n else None,
            "latency_ms": {
                "all": _pct([x for v in by_path.values() for x in v]),
                **{p: _pct(v) for p, v in by_path.items()},
            },
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows, as of now."""
        broker, sched = self.broker, self.broker.loop
        core = sched.core
        now = time.time()
        g = gauges(broker)
        gpus = []
        hpspot: dict[str, dict[str, Any]] = {}  # hp and spot pods: their own panel
        for gpu in core.cluster.gpus.values():
            pods = []
            for pid, share in gpu.allocs.items():
                pod = core.pods.get(pid)
                if pod is None:
                    continue  # a share held by something else (an hp/spot worker)
                if pod.job_class is not JobClass.POOL:
                    job = core.jobs.get(pod.job or pod.pending_job or "")
                    entry = hpspot.setdefault(
                        pid,
                        {
                            "id": pid,
                            "job_class": pod.job_class.value,
                            "state": pod.state.value,
                            "job": pod.job or pod.pending_job,
                            "tenant": job.spec.tenant if job is not None else None,
                            "gpus": [],
                        },
                    )
                    entry["gpus"].append(f"{gpu.id} ({share:g})")
                    continue
                pods.append(
                    {
                        "id": pid,
                        "profile": pod.profile,
                        "state": pod.state.value,
                        "share": share,
                        "tenant": pod.owner[0] if pod.owner else None,
                        "job": pod.job or pod.pending_job,
                    }
                )
            gpus.append({"id": gpu.id, "model": gpu.model, "used": gpu.used, "pods": pods})
        profiles = []
        for name, prof in sched.profiles.items():
            states = {s: n for (p, s), n in g.pods.items() if p == name and n}
            profiles.append(
                {
                    "name": name,
                    "gpus": prof.core.gpus,
                    "share": prof.core.share,
                    "standby_share": prof.core.standby_share,
                    "queued": g.queued.get(name, 0),
                    "pods": states,
                }
            )
        queue = []
        # pool, hp and spot jobs waiting, oldest first
        waiting = sorted(
            (core.jobs[j] for j in [*core.queued(), *core.hpspot.queued_ids()]),
            key=lambda job: (job.submitted, job.id),
        )
        for job in waiting[:20]:
            job_id = job.id
            queue.append(
                {
                    "id": job_id,
                    "profile": job.spec.profile,
                    "job_class": job.spec.job_class.value,
                    "tenant": job.spec.tenant,
                    "wait_s": now - job.submitted,
                }
            )
        recent = []
        for row in broker.store.list_jobs(None, (), 20):
            cur = sched.job(row["id"]) if row["state"] != "finished" else row
            row = cur or row
            started = row["started"]
            recent.append(
                {
                    "id": row["id"],
                    "tenant": row["tenant"],
                    "profile": row["profile"],
                    "job_class": row["job_class"],
                    "state": row["state"],
                    "path": row["path"],
                    "start_latency_ms": None
                    if started is None
                    else (started - row["submitted"]) * 1000.0,
                    "exit_code": row["exit_code"],
                    "failure": row["failure"],
                    "submitted": row["submitted"],
                }
            )
        since = now - _HISTORY_S
        live = self.history.point(g, now)
        gpu_pools = [
            {**row, "history": self.history.gpu_pool_series(row["gpu_model"], since, live)}
            for row in g.gpu_pools
        ]
        return {
            "now": now,
            "version": broker.app.version,
            "uptime_s": now - sched.started_at if sched.ready else 0.0,
            "capacity_gpus": g.capacity_gpus,
            "budget_gpus": g.budget_gpus,
            "idle_gpus": g.idle_gpus,
            "queued": len(waiting),
            "profiles": profiles,
            "gpus": gpus,
            "hpspot_pods": list(hpspot.values()),
            "queue": queue,
            "jobs": recent,
            "stats": self._stats(since),
            "history": self.history.series(since, live),
            "gpu_pools": gpu_pools,
        }


def _static(name: str) -> str:
    return (_STATIC / name).read_text(encoding="utf-8")


def add_routes(app: FastAPI, broker: "Broker", log: DecisionLog, dash: Dashboard) -> None:
    """The dashboard's routes, its static files and ``GET /v1/events``."""
    # imported here: app imports this module; evaluated now, so FastAPI sees the real types
    from stoker.broker.app import ApiError, Caller, NotLeader

    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")

    def viewer(request: Request, authorization: str | None) -> str:
        role = dash.auth.who(request, authorization)
        if role is None:
            raise ApiError(
                401,
                "unauthorized",
                "authorization: the dashboard needs the admin or the viewer token",
                "authorization",
            )
        return role

    def login_page(request: Request, error: str | None = None, status: int = 200) -> Response:
        """The sign-in form with a fresh CSRF token, the same as in its cookie."""
        csrf = secrets.token_urlsafe(32)
        html = _static("login.html").replace(
            "<!--csrf-->", f'<input type="hidden" name="csrf" value="{csrf}">'
        )
        if error is not None:
            html = html.replace("<!--error-->", f'<p class="error" role="alert">{error}</p>')
        resp = HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
        resp.set_cookie(
            CSRF_COOKIE,
            csrf,
            path="/login",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return resp

    @app.get("/", include_in_schema=False)
    async def page(request: Request) -> Response:
        if dash.auth.check_session(request.cookies.get(COOKIE), time.time()) is None:
            return login_page(request)
        return HTMLResponse(_static("index.html"), headers=PAGE_HEADERS)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        sent, kept = (form.get("csrf") or [""])[0], request.cookies.get(CSRF_COOKIE, "")
        if not sent or not hmac.compare_digest(sent.encode(), kept.encode()):
            # another site's form (a SameSite=Strict cookie never comes with it) or a
            # stale one: the token is not even looked at
            why = "That sign-in form had expired or came from elsewhere; sign in again."
            return login_page(request, why, 403)
        role = dash.auth.role((form.get("token") or [""])[0].strip())
        if role is None:
            why = "That token is neither the admin nor the viewer token."
            return login_page(request, why, 401)
        resp = RedirectResponse("/", status_code=303)
        resp.delete_cookie(CSRF_COOKIE, path="/login")
        resp.set_cookie(
            COOKIE,
            dash.auth.session(role, time.time()),
            max_age=_SESSION_S,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return resp

    @app.post("/logout", include_in_schema=False)
    async def logout() -> Response:
        resp = RedirectResponse("/", status_code=303)
        resp.delete_cookie(COOKIE)
        return resp

    @app.get("/dashboard/state", include_in_schema=False)
    async def state(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        viewer(request, authorization)
        if not broker.leads:
            raise NotLeader()  # the live state is the leader's: forwarded there
        return JSONResponse(dash.snapshot(), headers={"Cache-Control": "no-store"})

    @app.get("/dashboard/events", include_in_schema=False)
    async def dash_events(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        job: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        viewer(request, authorization)
        return log.query(None, job=job, limit=limit)

    @app.get("/v1/events")
    async def events(
        who: Caller,
        job: str | None = None,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        """The decision log, oldest first: why each job took its path, each pod's stop
        reason. A tenant sees its own jobs' and pods' events; the admin sees all."""
        scope = _scope(who)
        if job is not None and scope is not None:
            row = broker.reads.job(job)
            if row is None or row["tenant"] != scope:
                raise ApiError(404, "not_found", f"query.job: no job {job!r}", "query.job")
        return log.query(scope, job=job, after=after, limit=limit)


def _scope(who: Principal) -> str | None:
    return None if who.admin else who.tenant
