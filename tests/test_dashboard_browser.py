"""The dashboard in a real headless browser: Debian's chromium driven by chromedriver
(selenium), against a real broker (uvicorn, SQLite file, bubblewrap sandboxes) running
real jobs. It signs in with the viewer token, shows what the API reports, updates after a
new job, explains a job's path, and renders at desktop and phone width (screenshots are
kept under ``$STOKER_ARTIFACTS``, default ``.artifacts/`` in the repository, and their paths
printed in the test log even without ``-s``). The first paint with 1,000 jobs in the store
is measured and printed, never asserted (a shared, noisy machine)."""

from __future__ import annotations

import base64
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_rig import wait_finished
from stoker.broker.auth import hash_token, new_token
from stoker.broker.config import BrokerConfig, BrokerProfile, ForecastConfig, SpotConfig
from stoker.broker.embedded import EmbeddedBroker
from stoker.broker.store import Batch, Store

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.skipif(
        not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
        reason="chromium and chromium-driver not installed (scripts/bootstrap.sh dev)",
    ),
    pytest.mark.timeout(240),
]

ARTIFACTS = Path(os.environ.get("STOKER_ARTIFACTS", Path(__file__).parent.parent / ".artifacts"))


def _cfg(tmp: Path) -> BrokerConfig:
    return BrokerConfig(
        data_dir=tmp / "data", profiles=[BrokerProfile.simple("plain")], gpu_slots=2
    )


def _chrome_pids(profile_dir: Path) -> list[int]:
    """Processes of the browser this test started (found by its own profile directory)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(profile_dir).encode() in cmd:
            out.append(int(entry.name))
    return out


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile_dir = tmp_path / "chromium-profile"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # runs as root in CI containers; the page is our own
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile_dir}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # CSP violations show there
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        deadline = time.monotonic() + 10
        while _chrome_pids(profile_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _chrome_pids(profile_dir) == [], "chromium outlived the test"


def _api(eb: EmbeddedBroker, token: str) -> httpx.Client:
    return httpx.Client(base_url=eb.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _submit(api: httpx.Client, tag: str, code: str = "pass") -> str:
    body = {"profile": "plain", "argv": ["python", "-c", code], "reuse_tag": tag}
    r = api.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _run(api: httpx.Client, tag: str, code: str = "pass") -> dict[str, Any]:
    return wait_finished(api, _submit(api, tag, code))


def _sign_in(driver: Any, eb: EmbeddedBroker) -> None:
    from selenium.webdriver.common.by import By

    viewer = (eb.cfg.data_dir / "viewer.token").read_text().strip()
    driver.get(eb.url + "/")
    field = driver.find_element(By.ID, "token")
    field.send_keys(viewer)
    field.submit()
    _wait_ready(driver)


def _wait_ready(driver: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready === '1'")
    )


def _say(capsys: pytest.CaptureFixture[str], message: str) -> None:
    """Print to the test log even when pytest captures output (CI runs without -s)."""
    with capsys.disabled():
        print(f"\n{message}")


def _screenshot(driver: Any, name: str, width: int, capsys: pytest.CaptureFixture[str]) -> Path:
    """A full-page PNG at ``width`` CSS pixels, through the DevTools protocol."""
    driver.set_window_size(width, 900)
    time.sleep(0.3)  # let the layout settle at the new width
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    _say(capsys, f"screenshot: {path}")
    return path


def _fmt_ms(v: float | None) -> str:
    """As dashboard.js's fmtMs writes it."""
    if v is None:
        return "–"
    return f"{v:.1f}" if v < 10 else str(round(v))


def test_dashboard_shows_what_the_api_reports_and_updates(
    tmp_path: Path, browser: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    with EmbeddedBroker(_cfg(tmp_path)) as eb:
        admin = _api(eb, eb.admin_token)
        tenant = _api(eb, admin.post("/v1/tenants", json={"name": "alice"}).json()["token"])
        for tag in ("loop-a", "loop-a", "loop-a", "loop-b"):
            _run(tenant, tag)
        _run(tenant, "loop-a", "raise SystemExit(3)")

        _sign_in(browser, eb)
        jobs = admin.get("/v1/jobs").json()
        paths = Counter(j["path"] for j in jobs if j["started"] is not None)
        kpi = browser.find_element(By.ID, "kpi-started")
        assert kpi.text == str(sum(paths.values()))
        for path in ("warm", "standby", "cold"):
            assert browser.find_element(By.ID, f"path-{path}").text == str(paths[path])
        rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-job-id]")
        assert [r.get_attribute("data-job-id") for r in rows] == [j["id"] for j in jobs]
        for row, job in zip(rows, jobs, strict=True):
            latency = row.find_element(By.CSS_SELECTOR, ".latency").text
            assert latency == _fmt_ms(job["start_latency_ms"])
        failed = next(r for r in rows if r.get_attribute("data-job-id") == jobs[0]["id"])
        assert "user_error (exit 3)" in failed.text
        # the GPU pool of this host, as GET /v1/pools shows it
        (gpu_pool,) = admin.get("/v1/pools").json()
        card = browser.find_element(
            By.CSS_SELECTOR, f'article.pool[data-gpu-model="{gpu_pool["gpu_model"]}"]'
        )
        assert card.find_element(By.TAG_NAME, "h3").text == f"{gpu_pool['gpu_model']} · 2 GPUs"
        dd = [e.text for e in card.find_elements(By.TAG_NAME, "dd")]
        assert dd[0] == f"{gpu_pool['hp_gpus']:g}" and dd[-2:] == ["0", "0"]
        # one bar segment per live pod (pods may still be moving: read both until they agree)
        WebDriverWait(browser, 15).until(
            lambda d: (
                len(d.find_elements(By.CSS_SELECTOR, "#gpus .seg"))
                == len(admin.get("/v1/pods").json())
            ),
            message="GPU bars do not match /v1/pods",
        )

        # a new job appears without a reload
        new = _run(tenant, "loop-c")
        WebDriverWait(browser, 15).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job-id="{new["id"]}"]'),
            message="the new job did not appear",
        )
        WebDriverWait(browser, 15).until(
            lambda d: d.find_element(By.ID, "kpi-started").text == str(sum(paths.values()) + 1),
            message="jobs started did not count the new job",
        )

        # keyboard: the first Tab reaches the skip link; a job's "why" opens with Enter
        browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
        active = browser.switch_to.active_element
        assert active.text == "Skip to content"
        # "why": the job's decisions with their reasons
        browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{new["id"]}"] button').send_keys(
            Keys.ENTER
        )
        WebDriverWait(browser, 10).until(
            lambda d: "job.placed" in d.find_element(By.ID, "why-events").text,
            message="the job's events did not show",
        )
        why = browser.find_element(By.ID, "why-events").text
        assert ("cold start" in why) == (new["path"] == "cold"), why

        # busy: both GPUs run a job, a third waits; the queue shows it as the API does
        busy = [_submit(tenant, f"busy-{i}", "import time; time.sleep(60)") for i in (1, 2)]
        for j in busy:
            WebDriverWait(browser, 30).until(
                lambda _d, j=j: admin.get(f"/v1/jobs/{j}").json()["state"] == "running",
                message=f"busy job not running: {admin.get('/v1/jobs').json()[:3]}",
            )
        waiting = _submit(tenant, "busy-3")
        WebDriverWait(browser, 15).until(
            lambda d: d.find_elements(By.XPATH, f'//table[@id="queue"]//td[text()="{waiting}"]'),
            message=f"queued job not shown: {admin.get(f'/v1/jobs/{waiting}').json()}",
        )
        queued = sum(p["queued"] for p in admin.get("/v1/profiles").json())
        assert queued == 1 and browser.find_element(By.ID, "kpi-queued").text == "1"
        WebDriverWait(browser, 15).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#gpus .seg.active")) == 2,
            message=f"two active pods not shown: {admin.get('/v1/pods').json()}",
        )
        desktop = _screenshot(browser, "dashboard-desktop", 1280, capsys)
        phone = _screenshot(browser, "dashboard-phone", 390, capsys)
        assert desktop.stat().st_size > 10_000 and phone.stat().st_size > 10_000
        # nothing wider than the phone's screen: tables scroll inside their cards
        browser.set_window_size(390, 900)
        width = browser.execute_script("return document.documentElement.scrollWidth")
        viewport = browser.execute_script("return window.innerWidth")
        assert width <= viewport, (width, viewport)
        for j in (waiting, *busy):
            admin.post(f"/v1/jobs/{j}/cancel")


def test_sign_in_refuses_tenant_tokens(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    with EmbeddedBroker(_cfg(tmp_path)) as eb:
        admin = _api(eb, eb.admin_token)
        token = admin.post("/v1/tenants", json={"name": "bob"}).json()["token"]
        browser.get(eb.url + "/")
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.ID, "token").submit()
        assert "neither the admin nor the viewer" in browser.find_element(By.TAG_NAME, "body").text
        assert {c["name"] for c in browser.get_cookies()} <= {"stoker_csrf"}  # no session
        # the admin token signs in too
        browser.find_element(By.ID, "token").send_keys(eb.admin_token)
        browser.find_element(By.ID, "token").submit()
        _wait_ready(browser)
        assert browser.get_cookie("stoker_session")["httpOnly"] is True


def _fill_store(cfg: BrokerConfig, n: int) -> None:
    """``n`` finished jobs of the last hour, written as the broker writes them."""
    store = Store.sqlite(cfg.db_path)
    for t in range(4):
        store.add_tenant(f"t{t}", hash_token(new_token()))
    now = time.time()
    batch = Batch()
    for i in range(n):
        submitted = now - 3000 + i * 2.5
        path = ("warm", "warm", "warm", "standby", "cold")[i % 5]
        latency = {"warm": 0.004, "standby": 0.02, "cold": 0.25}[path] * (1 + (i % 7) / 10)
        batch.new_jobs.append(
            {
                "id": "j-" + uuid.uuid4().hex[:20],
                "tenant": f"t{i % 4}",
                "idempotency_key": None,
                "profile": "plain",
                "reuse_tag": f"loop-{i % 40}",
                "job_class": "pool",
                "workers": 1,
                "gpus": 0.9,
                "guarantee_s": None,
                "argv": ["python", "-c", "pass"],
                "code_digest": None,
                "deps": [],
                "env": {},
                "timeout_s": 60.0,
                "state": "finished",
                "path": path,
                "pods": [f"pod-{i}"],
                "submitted": submitted,
                "started": submitted + latency,
                "finished": submitted + latency + 0.5,
                "exit_code": 0,
                "failure": None,
                "requeues": 0,
                "requeue_reason": None,
                "guarantee_succeeded": 0,
                "guarantee_failed": 0,
            }
        )
    batch.commit(store)
    store.close()


def test_first_paint_with_1000_jobs(
    tmp_path: Path, browser: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _cfg(tmp_path)
    _fill_store(cfg, 1000)
    with EmbeddedBroker(cfg) as eb:
        _sign_in(browser, eb)
        figures = []
        for _ in range(3):
            browser.get(eb.url + "/")
            _wait_ready(browser)
            figures.append(
                browser.execute_script(
                    "return [performance.getEntriesByName('first-contentful-paint')[0]"
                    "?.startTime ?? null,"
                    " performance.getEntriesByName('stoker-first-data')[0].startTime]"
                )
            )
        started = browser.find_element("id", "kpi-started").text
        assert started == "1000"
        fcp = sorted(f[0] for f in figures if f[0] is not None)
        data = sorted(f[1] for f in figures)
        _say(
            capsys,
            f"first paint, 1,000 jobs in the store (3 loads, median): first contentful paint"
            f" {fcp[len(fcp) // 2]:.0f} ms, numbers on screen {data[1]:.0f} ms"
            f" (all: {[round(x) for x in data]})",
        )


# a spot job that checkpoints on SIGTERM: its first run waits to be preempted
_SPOT = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if os.environ["STOKER_RUN"] == "1":
    time.sleep(90)
"""


def _fmt_n(v: float, digits: int = 1) -> str:
    """As dashboard.js's fmtN writes it (String(Number(v.toFixed(d))))."""
    return f"{round(v, digits):g}"


def test_gpu_pool_panel_shows_a_live_preemption_and_forecast(
    tmp_path: Path, browser: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU-pool panel against a broker that ran it for real: an HP job preempted a spot
    job (an eviction in the last day), the forecaster fitted on the HP demand the broker
    metered and answered (a forecast band), and every figure on the card is the one
    ``GET /v1/pools`` reports."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    cfg = BrokerConfig(
        data_dir=tmp_path / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=1,
        gpu_model="vgpu",
        forecast=ForecastConfig(query_every_s=0.2, refit_every_s=0.5),
        spot=SpotConfig(grace_s=20.0),
    )
    # two days of tenant b's HP demand, as an earlier broker stored it (the meter stores a
    # minute once it has passed: a broker's own first minutes give the forecaster nothing).
    # Busy from 4 to 18 hours ago each day, set by the clock of the run: the hours just past
    # and the same hours a day ago are idle, so the forecast leaves the spot job its quota
    # whatever the time of day (a pattern on the wall clock's hours closed it for half the day)
    cfg.data_dir.mkdir(parents=True)
    store = Store.sqlite(cfg.db_path)
    now_min = int(time.time() // 60)
    store.record_hp_demand(
        [
            ("vgpu", "b", m, float(6 <= (m - now_min) // 60 % 24 < 21))
            for m in range(now_min - 2880, now_min)
        ]
    )
    store.close()
    with EmbeddedBroker(cfg) as eb:
        admin = _api(eb, eb.admin_token)
        a, b = (
            _api(eb, admin.post("/v1/tenants", json={"name": n}).json()["token"])
            for n in ("a", "b")
        )
        body = {"profile": "plain", "reuse_tag": "t", "gpus": 1.0}
        spot = a.post(
            "/v1/jobs",
            json={**body, "argv": ["python", "-c", _SPOT], "job_class": "spot", "guarantee_s": 600},
        ).json()["id"]
        deadline = time.monotonic() + 60
        while admin.get(f"/v1/jobs/{spot}").json()["state"] != "running":
            assert time.monotonic() < deadline, "the spot job did not start"
            time.sleep(0.05)
        hp_code = "import time; time.sleep(2)"  # long enough for the meter to see it
        hp = b.post(
            "/v1/jobs", json={**body, "argv": ["python", "-c", hp_code], "job_class": "hp"}
        ).json()["id"]
        row = wait_finished(admin, hp)
        assert row["state"] == "finished" and row["exit_code"] == 0, row
        # the spot job was put back in the queue, not lost; whether it runs again now is the
        # quota's call (the forecast has just seen the HP job's GPU), so it is not awaited
        row = admin.get(f"/v1/jobs/{spot}").json()
        assert row["requeues"] == 1 and row["state"] in ("queued", "running", "finished"), row

        def live_gpu_pool() -> dict[str, Any] | None:
            (p,) = admin.get("/v1/pools").json()
            return p if p["forecast"] and p["eviction_rate_1d"] > 0 else None

        WebDriverWait(admin, 30, poll_frequency=0.2).until(lambda _: live_gpu_pool())
        _sign_in(browser, eb)

        def card() -> dict[str, Any]:
            # in one script: the page re-renders the card at every poll
            return dict(
                browser.execute_script(
                    """const c = document.querySelector('article.pool[data-gpu-model="vgpu"]');
                    const all = (q, f) => [...c.querySelectorAll(q)].map(f);
                    return c && {h3: c.querySelector("h3").textContent,
                      dd: all("dd", (e) => e.textContent),
                      paths: all("svg path", (e) => e.getAttribute("d"))};"""
                )
                or {}
            )

        def card_matches_api(_: Any) -> dict[str, Any] | None:
            # the page polls every 2 s and the forecast is queried again meanwhile: read
            # the API and the card until one poll shows the same figures
            (gpu_pool,) = admin.get("/v1/pools").json()
            shown = card()
            want = [
                _fmt_n(gpu_pool["hp_gpus"], 2),
                f"{_fmt_n(gpu_pool['spot_gpus'], 2)} / {_fmt_n(gpu_pool['spot_quota'], 2)}",
                _fmt_n(gpu_pool["eta"], 3),
                f"{100 * gpu_pool['eviction_rate_1d']:.1f} %",
                str(gpu_pool["queued"]["hp"]),
                str(gpu_pool["queued"]["spot"]),
            ]
            return shown if shown.get("h3") == "vgpu · 1 GPUs" and shown["dd"] == want else None

        shown = WebDriverWait(browser, 20, poll_frequency=0.5).until(card_matches_api)
        assert shown["dd"][3] != "0.0 %"  # the eviction is on the card
        # HP actual, the forecast band, its mean, spot use and the quota: each one drawn
        assert len(shown["paths"]) == 5 and all(shown["paths"]), shown["paths"]
        assert browser.find_elements(By.ID, "no-gpu-pools") == []
        _screenshot(browser, "dashboard-gpu-pools", 1280, capsys)


# markup that runs where a page writes text as HTML; the tenant name one the API refuses,
# as a store written by hand (or before the rule) may still hold it
_XSS_TENANT = '"><img src=x onerror=window.__pwned=1>'
_XSS = ("<script>window.__pwned=2</script>", '"><svg onload=window.__pwned=3>')


def test_hostile_names_never_run_and_no_page_is_framed_or_signed_in_across_sites(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    cfg = _cfg(tmp_path)
    cfg.data_dir.mkdir(parents=True)
    store = Store.sqlite(cfg.db_path)
    token = new_token()
    store.add_tenant(_XSS_TENANT, hash_token(token))
    store.close()
    with EmbeddedBroker(cfg) as eb:
        admin = _api(eb, eb.admin_token)
        r = admin.post("/v1/tenants", json={"name": _XSS_TENANT})
        assert r.status_code == 422 and r.json()["field"] == "body.name"
        hostile = _api(eb, token)
        body = {
            "profile": "plain",
            "argv": ["python", "-c", "import sys; print(sys.argv)", *_XSS],
            "reuse_tag": _XSS[1],
            "labels": {"note": _XSS[0], "k": _XSS[1]},
        }
        r = hostile.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        job = wait_finished(hostile, r.json()["id"])
        assert job["exit_code"] == 0 and job["labels"]["note"] == _XSS[0], job

        # every page: a CSP of its own script and styles, never in a frame
        anon = httpx.Client(base_url=eb.url)
        form = anon.get("/")
        for resp in (form, httpx.post(f"{eb.url}/login", data={"token": "x"})):
            csp = resp.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, csp
            assert resp.headers["x-frame-options"] == "DENY"
        # the sign-in form carries a CSRF token, the one in its cookie; without it (another
        # site's form: a SameSite=Strict cookie never comes along) the right token is refused
        viewer = (eb.cfg.data_dir / "viewer.token").read_text().strip()
        csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
        assert anon.cookies["stoker_csrf"] == csrf
        for data, cookies in (
            ({"token": viewer}, {}),
            ({"token": viewer}, {"stoker_csrf": csrf}),
            ({"token": viewer, "csrf": csrf}, {}),
            ({"token": viewer, "csrf": "forged"}, {"stoker_csrf": csrf}),
        ):
            r = httpx.post(f"{eb.url}/login", data=data, cookies=cookies)
            assert r.status_code == 403 and "stoker_session" not in r.cookies, (data, cookies)
        r = httpx.post(
            f"{eb.url}/login", data={"token": viewer, "csrf": csrf}, cookies=anon.cookies
        )
        assert r.status_code == 303 and "stoker_session" in r.cookies
        page = httpx.get(f"{eb.url}/", cookies=r.cookies)
        assert "dashboard.js" in page.text
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"

        # in the browser: the name, the labels and the argv are text, nothing runs
        _sign_in(browser, eb)
        row = f'tr[data-job-id="{job["id"]}"]'
        WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.CSS_SELECTOR, row))
        cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, f"{row} td")]
        assert cells[1] == _XSS_TENANT, cells
        WebDriverWait(browser, 15).until(
            lambda d: _XSS_TENANT in d.find_element(By.ID, "gpus").text,
            message="the hostile tenant's warm pod is not on the GPU bars",
        )
        browser.find_element(By.CSS_SELECTOR, f"{row} button").click()
        WebDriverWait(browser, 10).until(
            lambda d: "job.placed" in d.find_element(By.ID, "why-events").text
        )
        ran = browser.execute_script(
            "return {pwned: window.__pwned ?? null,"
            " injected: document.querySelectorAll('img, svg[onload], script:not([src])').length,"
            " scripts: [...document.scripts].map((s) => s.src)}"
        )
        assert ran == {"pwned": None, "injected": 0, "scripts": [f"{eb.url}/static/dashboard.js"]}
        # and the policy blocked nothing of the page's own (its charts' styles included)
        refused = [
            e for e in browser.get_log("browser") if "Content Security Policy" in e["message"]
        ]
        assert refused == [], refused
        assert browser.find_elements(By.CSS_SELECTOR, "#gpus .seg[style*='flex']")


def test_hp_and_spot_pods_have_their_own_panel_and_queued_spot_is_in_the_queue(
    tmp_path: Path, browser: Any
) -> None:
    """A running spot job's pod shows in the hp/spot panel, not as a warm-pool pod on its
    GPU; a second spot job waiting for the card shows in the queue panel."""
    from selenium.webdriver.support.ui import WebDriverWait

    cfg = BrokerConfig(
        data_dir=tmp_path / "data", profiles=[BrokerProfile.simple("plain")], gpu_slots=1
    )
    with EmbeddedBroker(cfg) as eb:
        admin = _api(eb, eb.admin_token)
        a = _api(eb, admin.post("/v1/tenants", json={"name": "a"}).json()["token"])
        body = {"profile": "plain", "reuse_tag": "t", "gpus": 1.0, "job_class": "spot"}
        long = ["python", "-c", "import time; time.sleep(120)"]
        first = a.post("/v1/jobs", json={**body, "argv": long}).json()["id"]
        deadline = time.monotonic() + 60
        while admin.get(f"/v1/jobs/{first}").json()["state"] != "running":
            assert time.monotonic() < deadline, "the spot job did not start"
            time.sleep(0.05)
        second = a.post("/v1/jobs", json={**body, "argv": long}).json()["id"]
        _sign_in(browser, eb)

        def shown(_: Any) -> dict[str, Any] | None:
            got = browser.execute_script(
                """const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)]
                     .map((r) => r.textContent);
                   return {hpspot: rows("hpspot"), queue: rows("queue"),
                     bars: [...document.querySelectorAll("#gpus .seg")].map((e) => e.title)};"""
            )
            ok = any(first in r and "spot" in r for r in got["hpspot"]) and any(
                second in r and "spot" in r for r in got["queue"]
            )
            return got if ok else None

        got = WebDriverWait(browser, 20, poll_frequency=0.5).until(shown)
        assert not any("spot" in t or first in t for t in got["bars"]), got["bars"]
        for job in (first, second):
            a.post(f"/v1/jobs/{job}/cancel")
