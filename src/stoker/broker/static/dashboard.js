// stoker dashboard: polls /dashboard/state every 2 s while the tab is visible and renders
// it with plain DOM calls (textContent only: tenant and profile names are never HTML) and
// small inline SVG charts. No framework, no build step.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const STATES = ["active", "warm", "standby", "starting", "recycling", "stopping"];
const $ = (id) => document.getElementById(id);
let painted = false;
let timer = null;
let lastOk = 0;
let last = null; // the last snapshot, redrawn when the window is resized

function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    // through the CSSOM: the page's CSP refuses a style attribute (setAttribute)
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const kid of kids) if (kid != null) node.append(kid);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

const fmtMs = (v) => (v == null ? "–" : v < 10 ? v.toFixed(1) : Math.round(v).toString());
// at most ``d`` decimals, trailing zeros dropped (12.5, 20, 0.95)
const fmtN = (v, d = 1) => (v == null ? "–" : String(Number(v.toFixed(d))));
const pct = (v) => (v == null ? "–" : (100 * v).toFixed(1) + " %");
const ago = (secs) => (secs < 1 ? "now" : secs < 120 ? `-${Math.round(secs)} s` : `-${Math.round(secs / 60)} min`);
const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });

function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren();
  if (!rows.length) {
    tbody.append(el("tr", {}, el("td", { colspan: cols, class: "empty", text: empty })));
    return;
  }
  for (const r of rows) tbody.append(r);
}

// a job's path; a job that has no pod yet has none to show, a finished one never had one
function badge(path, state) {
  if (!path && state !== "finished") return el("span", { class: "empty", text: "–" });
  return el("span", { class: "badge " + (path || "none"), text: path || "none" });
}

// ---------------------------------------------------------------- summary and tables

function renderSummary(s) {
  const st = s.stats;
  $("kpi-hit-rate").textContent = pct(st.hit_rate);
  $("kpi-started").textContent = String(st.started);
  $("kpi-p50").textContent = fmtMs(st.latency_ms.all.p50);
  $("kpi-p90").textContent = fmtMs(st.latency_ms.all.p90);
  $("kpi-queued").textContent = String(s.queued);
  const idle = s.idle_gpus.warm + s.idle_gpus.standby;
  $("kpi-idle").textContent = `${fmtN(idle, 2)} / ${fmtN(s.budget_gpus, 2)}`;
  const rows = ["warm", "standby", "cold"].map((p) => {
    const n = st.paths[p] || 0;
    const lat = st.latency_ms[p];
    return el(
      "tr",
      { "data-path": p },
      el("td", {}, badge(p, "finished")),
      el("td", { class: "num", id: "path-" + p, text: String(n) }),
      el("td", { class: "num", text: st.started ? pct(n / st.started) : "–" }),
      el("td", { class: "num", text: fmtMs(lat.p50) }),
      el("td", { class: "num", text: fmtMs(lat.p90) }),
      el("td", { class: "num", text: fmtMs(lat.p99) }),
    );
  });
  fill($("paths").tBodies[0], rows, "", 6);
}

function renderQueue(s) {
  $("queue-count").textContent = `(${s.queued})`;
  const rows = s.queue.map((j) =>
    el(
      "tr",
      {},
      el("td", { class: "mono", text: j.id }),
      el("td", { text: j.profile }),
      el("td", { text: j.job_class }),
      el("td", { text: j.tenant }),
      el("td", { class: "num", text: j.wait_s.toFixed(1) }),
    ),
  );
  fill($("queue").tBodies[0], rows, "nothing waiting", 5);
}

function renderJobs(s) {
  const rows = s.jobs.map((j) => {
    const code = j.exit_code == null ? "" : ` (exit ${j.exit_code})`;
    const outcome = j.state !== "finished" ? "" : (j.failure || (j.exit_code === 0 ? "ok" : "failed")) + code;
    return el(
      "tr",
      { "data-job-id": j.id },
      el("td", {}, el("button", { class: "linkish", type: "button", text: j.id, "aria-label": `why: events of job ${j.id}`, onclick: () => showWhy(j.id) })),
      el("td", { text: j.tenant }),
      el("td", { text: j.profile }),
      el("td", { text: j.job_class }),
      el("td", { text: j.state }),
      el("td", {}, badge(j.path, j.state)),
      el("td", { class: "num latency", text: fmtMs(j.start_latency_ms) }),
      el("td", { text: outcome }),
    );
  });
  fill($("jobs").tBodies[0], rows, "no jobs yet", 8);
}

async function showWhy(jobId) {
  const box = $("why");
  box.hidden = false;
  $("why-job").textContent = jobId;
  const list = $("why-events");
  list.replaceChildren(el("li", { class: "empty", text: "loading…" }));
  const r = await fetch(`/dashboard/events?job=${encodeURIComponent(jobId)}`, { credentials: "same-origin" });
  const events = r.ok ? await r.json() : [];
  list.replaceChildren(
    ...events.map((e) => el("li", {}, el("span", { class: "kind", text: `${clock(e.at)} ${e.kind}` }), e.message)),
  );
  if (!events.length) list.append(el("li", { class: "empty", text: "no events recorded for this job" }));
}

// ---------------------------------------------------------------- warm pools per GPU

function renderWarm(s) {
  const profiles = s.profiles.map((p) => {
    const chips = STATES.filter((st) => p.pods[st]).map((st) => el("span", { class: "chip", text: `${st} ${p.pods[st]}` }));
    return el(
      "div",
      { class: "profile" },
      el("b", { text: p.name }),
      ...chips,
      chips.length ? null : el("span", { class: "empty", text: "no pods" }),
      p.queued ? el("span", { class: "chip", text: `queued ${p.queued}` }) : null,
    );
  });
  $("profiles").replaceChildren(...profiles);
  const gpus = s.gpus.map((g) => {
    const segs = g.pods.map((p) => {
      const label = `${p.id} ${p.state}${p.tenant ? " · " + p.tenant : ""} (${p.profile}, ${fmtN(p.share, 2)} GPU)`;
      return el("span", {
        class: "seg " + (STATES.includes(p.state) ? p.state : "other"),
        style: `flex: 0 0 ${(100 * p.share).toFixed(2)}%`,
        title: label,
        text: p.state + (p.tenant ? " · " + p.tenant : ""),
      });
    });
    const described = g.pods.length ? g.pods.map((p) => `${p.id} ${p.state} ${fmtN(p.share, 2)}`).join(", ") : "free";
    return el("li", { class: "gpu" }, el("span", { class: "mono", text: g.id }), el("div", { class: "bar", role: "img", "aria-label": `${g.id}: ${described}` }, ...segs));
  });
  $("gpus").replaceChildren(...gpus);
}

// hp and spot pods are no warm pool's: one row each, with its job and the cards it holds
function renderHpSpot(s) {
  const rows = (s.hpspot_pods || []).map((p) =>
    el(
      "tr",
      {},
      el("td", { class: "mono", text: p.id }),
      el("td", { text: p.job_class }),
      el("td", { text: p.state }),
      el("td", { text: p.tenant || "" }),
      el("td", { class: "mono", text: p.job || "" }),
      el("td", { class: "mono", text: p.gpus.join(", ") }),
    ),
  );
  fill($("hpspot").tBodies[0], rows, "no hp or spot pods", 6);
}

function legend(items) {
  return items.map(([label, color, line]) => el("span", {}, el("span", { class: "key" + (line ? " line" : ""), style: `background:${color}` }), label));
}

// ---------------------------------------------------------------- charts

// x: [t0, t1] seconds; y: [0, ymax]; the viewBox is the element's own size, so text is
// never stretched, with a left axis and time ticks below
// ``mid``: a time that takes the middle of the width (the past hour and the hours ahead
// each get half, however long each is)
function frame(node, t0, t1, ymax, ticks, mid) {
  node.replaceChildren();
  const W = Math.max(200, Math.round(node.clientWidth || 600));
  const H = 200, L = 34, B = 18, T = 6;
  node.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const span = W - L - 4;
  const x = mid === undefined || t1 <= mid
    ? (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * span
    : (t) => L + (t <= mid
      ? ((t - t0) / Math.max(1, mid - t0)) * span / 2
      : span / 2 + ((t - mid) / Math.max(1, t1 - mid)) * span / 2);
  const y = (v) => H - B - (v / ymax) * (H - B - T);
  for (const v of [0, ymax / 2, ymax]) {
    node.append(svg("line", { class: "axis", x1: L, x2: W, y1: y(v), y2: y(v) }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = fmtN(v, 1);
    node.append(label);
  }
  ticks.forEach((t, i) => {
    const anchor = i === ticks.length - 1 ? "end" : i === 0 ? "start" : "middle";
    const label = svg("text", { x: x(t.at), y: H - 4, "text-anchor": anchor });
    label.textContent = t.label;
    node.append(label);
  });
  return { x, y };
}

// points of a line; ``step``: each sample holds until the next (sampled gauges), else
// straight segments (a forecast's hourly values)
function points(xs, ys, x, y, step) {
  const out = [];
  xs.forEach((t, i) => {
    if (step && i) out.push([x(t), y(ys[i - 1])]);
    out.push([x(t), y(ys[i])]);
  });
  return out;
}

function draw(pts) {
  return pts.map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
}

function pathOf(xs, ys, x, y, step = true) {
  return draw(points(xs, ys, x, y, step));
}

function area(xs, lo, hi, x, y, step = true) {
  if (!xs.length) return "";
  return draw([...points(xs, hi, x, y, step), ...points(xs, lo, x, y, step).reverse()]) + "Z";
}

function renderHeld(s) {
  const h = s.history;
  const node = $("held-chart");
  // the last hour, or since the broker started when that is shorter
  const t1 = s.now, t0 = Math.max(t1 - 3600, Math.min(h.t[0], t1 - 60));
  const total = h.warm.map((w, i) => w + h.standby[i]);
  const ymax = Math.max(1, ...h.budget, ...total) * 1.1;
  const ticks = [4, 3, 2, 1, 0].map((k) => ({ at: t1 - (k * (t1 - t0)) / 4, label: ago((k * (t1 - t0)) / 4) }));
  const { x, y } = frame(node, t0, t1, ymax, ticks);
  const zero = h.t.map(() => 0);
  node.append(svg("path", { d: area(h.t, zero, h.warm, x, y), fill: "var(--warm)", "fill-opacity": 0.55 }));
  node.append(svg("path", { d: area(h.t, h.warm, total, x, y), fill: "var(--standby)", "fill-opacity": 0.55 }));
  node.append(svg("path", { d: pathOf(h.t, h.budget, x, y), fill: "none", stroke: "var(--ink)", "stroke-width": 2, "stroke-dasharray": "6 4" }));
  const last = h.t.length - 1;
  const now = last >= 0 ? `now: ${fmtN(h.warm[last], 2)} warm + ${fmtN(h.standby[last], 2)} standby GPUs of a ${fmtN(h.budget[last], 2)}-GPU budget` : "no samples yet";
  $("held-desc").replaceChildren(...legend([["idle warm", "var(--warm)"], ["idle standby", "var(--standby)"], ["warm budget", "var(--ink)", true]]), el("span", { text: now }));
}

function forecastTimes(fc, now) {
  // hours are offsets from now, or epoch seconds of each hour's start
  return fc.hours.map((h) => (h > 1e8 ? h : now + h * 3600));
}

function renderPools(s) {
  const box = $("gpu-pools");
  if (!s.gpu_pools.length) {
    box.replaceChildren(el("p", { class: "empty", id: "no-gpu-pools", text: "no GPU pools" }));
    return;
  }
  const draws = [];
  const cards = s.gpu_pools.map((p) => {
    const node = svg("svg", { class: "chart", role: "img" });
    draws.push(() => drawPool(node, p, s));
    const q = p.queued || { hp: 0, spot: 0 };
    return el(
      "article",
      { class: "pool", "data-gpu-model": p.gpu_model },
      el("h3", { text: `${p.gpu_model} · ${fmtN(p.capacity)} GPUs` }),
      el(
        "dl",
        {},
        el("dt", { text: "HP use" }), el("dd", { text: fmtN(p.hp_gpus, 2) }),
        el("dt", { text: "spot use / quota" }), el("dd", { text: `${fmtN(p.spot_gpus, 2)} / ${fmtN(p.spot_quota, 2)}` }),
        el("dt", { text: "eta" }), el("dd", { text: fmtN(p.eta, 3) }),
        el("dt", { text: "eviction rate 1 d" }), el("dd", { text: pct(p.eviction_rate_1d) }),
        el("dt", { text: "queued hp" }), el("dd", { text: String(q.hp) }),
        el("dt", { text: "queued spot" }), el("dd", { text: String(q.spot) }),
      ),
      quotaBar(p),
      el("figure", {}, node, el("figcaption", { class: "legend" }, ...legend([["HP actual", "var(--hp)", true], ["HP forecast band", "rgba(9,105,218,.3)"], ["spot", "var(--spot)", true], ["spot quota", "var(--quota)", true]]))),
    );
  });
  box.replaceChildren(el("div", { class: "pools" }, ...cards));
  for (const draw of draws) draw(); // once in the page, so each chart knows its width
}

// the GPU pool's capacity as a bar: HP use, spot use, and a mark at the spot quota
function quotaBar(p) {
  const cap = Math.max(p.capacity, 1e-9);
  // nothing drawn for a class that holds no GPU
  const seg = (cls, v, label) => (v > 0 ? el("span", { class: "seg " + cls, style: `flex: 0 0 ${((100 * v) / cap).toFixed(2)}%`, text: label }) : null);
  const bar = el(
    "div",
    { class: "bar quota", role: "img", "aria-label": `${p.gpu_model}: HP ${fmtN(p.hp_gpus, 2)}, spot ${fmtN(p.spot_gpus, 2)} of a ${fmtN(p.spot_quota, 2)} spot quota, ${fmtN(p.capacity)} GPUs` },
    seg("hp", p.hp_gpus, "HP"),
    seg("spot", p.spot_gpus, "spot"),
    el("span", { class: "mark", style: `left: ${Math.min(100, (100 * (p.hp_gpus + p.spot_quota)) / cap).toFixed(2)}%`, title: "spot quota" }),
  );
  return bar;
}

// one GPU pool: HP use (past hour), the forecast band ahead, spot use and the spot quota
function drawPool(node, p, s) {
  const h = p.history;
  const fc = p.forecast;
  const ft = fc ? forecastTimes(fc, s.now) : [];
  const t0 = s.now - 3600, t1 = Math.max(s.now, ...ft);
  const lo = fc ? fc.mean.map((m, i) => Math.max(0, m - Math.sqrt(fc.var[i]))) : [];
  const ymax = Math.max(1, p.capacity, ...(fc ? fc.quantile : []), ...h.hp) * 1.05;
  const ticks = [{ at: t0, label: "-1 h" }, { at: s.now, label: "now" }];
  if (t1 > s.now) ticks.push({ at: t1, label: `+${Math.round((t1 - s.now) / 3600)} h` });
  const { x, y } = frame(node, t0, t1, ymax, ticks, s.now);
  if (fc) {
    node.append(svg("path", { d: area(ft, lo, fc.quantile, x, y, false), fill: "var(--hp)", "fill-opacity": 0.18 }));
    node.append(svg("path", { d: pathOf(ft, fc.mean, x, y, false), fill: "none", stroke: "var(--hp)", "stroke-width": 2, "stroke-dasharray": "5 4" }));
  }
  node.append(svg("path", { d: pathOf(h.t, h.hp, x, y), fill: "none", stroke: "var(--hp)", "stroke-width": 2.5 }));
  node.append(svg("path", { d: pathOf(h.t, h.spot, x, y), fill: "none", stroke: "var(--spot)", "stroke-width": 2 }));
  node.append(svg("path", { d: pathOf(h.t, h.quota, x, y), fill: "none", stroke: "var(--quota)", "stroke-width": 1.5, "stroke-dasharray": "2 3" }));
  node.setAttribute("aria-label", `${p.gpu_model}: HP ${fmtN(p.hp_gpus)} GPUs, spot ${fmtN(p.spot_gpus)} of a ${fmtN(p.spot_quota)} quota, capacity ${fmtN(p.capacity)}`);
}

// ---------------------------------------------------------------- loop

function render(s) {
  renderHpSpot(s);
  renderSummary(s);
  renderHeld(s);
  renderWarm(s);
  renderPools(s);
  renderQueue(s);
  renderJobs(s);
  $("state-legend").replaceChildren(...legend(STATES.map((st) => [st, `var(--${st})`])));
  $("status").textContent = `live · ${fmtN(s.capacity_gpus)} GPUs · updated ${clock(s.now)}`;
  $("status").classList.remove("stale");
  last = s;
  if (!painted) {
    painted = true;
    // after the frame that shows the first numbers has been painted
    requestAnimationFrame(() =>
      setTimeout(() => {
        performance.mark("stoker-first-data");
        document.body.dataset.ready = "1";
      }),
    );
  }
}

async function poll() {
  clearTimeout(timer);
  try {
    const r = await fetch("/dashboard/state", { credentials: "same-origin", cache: "no-store" });
    if (r.status === 401) {
      location.reload(); // the session ran out: back to the sign-in form
      return;
    }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const s = await r.json();
    lastOk = s.now;
    render(s);
  } catch (err) {
    const st = $("status");
    st.textContent = `stale: ${err.message}; last update ${lastOk ? clock(lastOk) : "never"}; retrying`;
    st.classList.add("stale");
  }
  if (!document.hidden) timer = setTimeout(poll, POLL_MS);
}

let resizing = null;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => last && render(last), 100);
});
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) poll();
});
poll();
