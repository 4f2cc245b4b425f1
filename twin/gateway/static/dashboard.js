// The gateway's dashboard: the sessions list, and one session live from its event stream.
// The token comes from the page's fragment (#token=..., never sent to the server in a URL) or
// a form, is kept for this tab only, and goes out as a bearer header on each request.
"use strict";

(() => {
  const TOKEN_KEY = "twin-token";
  const MAX_POINTS = 1500;
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  function takeToken() {
    const match = /(?:^|&)token=([^&]+)/.exec(location.hash.slice(1));
    if (match) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function askToken(start, why) {
    const form = $("login");
    form.hidden = false;
    status(why || "This page needs a token.");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
      form.hidden = true;
      start();
    }, { once: true });
  }

  function status(text) { $("status").textContent = text; }

  async function api(path) {
    const response = await fetch(path, {
      headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` },
      cache: "no-store",
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      const error = new Error(body.detail || `HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return response;
  }

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows.map((values) => {
      const tr = document.createElement("tr");
      values.forEach((v) => (v instanceof Node ? tr.appendChild(document.createElement("td")).appendChild(v) : cell(tr, v)));
      return tr;
    }));
  }

  const num = (x, digits = 0) => (x === null || x === undefined || Number.isNaN(x) ? "-"
    : x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }));
  const hours = (t_s) => `${num(t_s / 3600, 2)} h`;

  // -- the sessions list ---------------------------------------------------------------------

  async function sessionsPage() {
    if (!takeToken()) { askToken(sessionsPage); return; }
    let list;
    try {
      list = await (await api("/v1/sessions")).json();
    } catch (error) {
      if (error.status === 401) { sessionStorage.removeItem(TOKEN_KEY); askToken(sessionsPage, "The operator token was not accepted."); return; }
      status(`cannot list sessions: ${error.message}`);
      return;
    }
    $("sessions").hidden = false;
    status(list.length ? `${list.length} session(s)` : "no sessions yet");
    fill($("sessions").tBodies[0], list.map((s) => {
      const link = document.createElement("a");
      link.href = `/sessions/${encodeURIComponent(s.session_id)}`;
      link.textContent = s.session_id;
      return [link, s.scenario, num(s.round), hours(s.t_s), s.clock,
        `${s.connected.length}/${s.tenants.length}`, s.ended ? `ended: ${s.ended}` : "live"];
    }));
    setTimeout(sessionsPage, 2000);
  }

  // -- one session, live ---------------------------------------------------------------------

  class Session {
    constructor() {
      this.round = 0; this.t_s = 0; this.ended = null; this.horizon_s = 0;
      this.pools = new Map(); this.tenants = new Map(); this.running = new Map();
      this.offers = new Map(); this.trades = []; this.history = [];
    }

    tenant(name) {
      if (!this.tenants.has(name)) {
        this.tenants.set(name, { queued: 0, running: 0, finished: 0, spent: 0, budget: null,
          reward: 0, diff: null, score: null, defaulted: 0 });
      }
      return this.tenants.get(name);
    }

    pool(name) {
      if (!this.pools.has(name)) this.pools.set(name, { held: 0, busy: 0, max: null });
      return this.pools.get(name);
    }

    stop(e) {
      const run = this.running.get(e.job_id);
      if (!run) return false;
      this.running.delete(e.job_id);
      this.pool(run.pool).busy -= run.gpus;
      this.tenant(run.tenant).running -= 1;
      return true;
    }

    take(e) {
      if (e.t_s !== this.t_s) { this.sample(); this.t_s = e.t_s; }
      switch (e.kind) {
        case "episode_started":
          (e.config.pools || []).forEach((p) => { this.pool(p.name).max = p.max_gpus; });
          (e.config.tenants || []).forEach((t) => { this.tenant(t.name).budget = t.budget_usd ?? null; });
          this.horizon_s = e.config.horizon_s || 0;
          break;
        case "gpus_ready": this.pool(e.pool).held += e.gpus; break;
        case "gpus_released": this.pool(e.pool).held -= e.gpus; break;
        case "node_failed": this.pool(e.pool).held -= 1; break;
        case "job_arrived": this.tenant(e.tenant).queued += 1; break;
        case "job_started":
          this.tenant(e.tenant).queued -= 1;
          this.tenant(e.tenant).running += 1;
          this.running.set(e.job_id, { tenant: e.tenant, pool: e.pool, gpus: e.gpus });
          this.pool(e.pool).busy += e.gpus;
          break;
        case "job_finished": this.stop(e); this.tenant(e.tenant).finished += 1; break;
        case "job_censored": this.stop(e); break;
        case "job_interrupted": this.stop(e); this.tenant(e.tenant).queued += 1; break;
        case "job_failed": if (!this.stop(e)) this.tenant(e.tenant).queued -= 1; break;
        case "budget_charged": this.tenant(e.tenant).spent += e.amount_usd; break;
        case "offer_made": this.offers.set(e.offer_id, e); break;
        case "trade_settled":
          if (e.applied && this.offers.has(e.offer_id)) {
            this.trades.push({ round: this.round + 1, offer: this.offers.get(e.offer_id) });
          }
          break;
        case "round_credited": {
          const t = this.tenant(e.tenant);
          t.reward += e.reward_usd || 0; t.diff = e.difference_reward; t.score = e.score;
          break;
        }
        case "round_committed":
          this.round = e.round;
          e.defaulted.forEach((name) => { this.tenant(name).defaulted += 1; });
          this.offers.clear();
          break;
        case "episode_ended": this.ended = e.reason; break;
        default: break;
      }
    }

    sample() {
      const point = { t_s: this.t_s, pools: {} };
      this.pools.forEach((p, name) => { point.pools[name] = [p.held, p.busy]; });
      this.history.push(point);
      if (this.history.length > MAX_POINTS) this.history = this.history.filter((_, i) => i % 2 === 0);
    }
  }

  const bundle = (b) => {
    const parts = Object.entries(b.gpus || {}).filter(([, n]) => n).map(([pool, n]) => `${n} ${pool}`);
    if (b.usd) parts.push(`$${num(b.usd, 2)}`);
    return parts.join(" + ") || "nothing";
  };

  const poolColour = (i) => `hsl(${(210 + i * 67) % 360} 60% 42%)`;

  function chart(state) {
    const box = $("pool-chart");
    const width = 1000; const height = 180; const pad = 34;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("preserveAspectRatio", "none");
    const points = state.history.concat([{ t_s: state.t_s, pools: Object.fromEntries(
      [...state.pools].map(([n, p]) => [n, [p.held, p.busy]])) }]);
    const end = Math.max(state.horizon_s, state.t_s, 1);
    let top = 1;
    points.forEach((pt) => Object.values(pt.pools).forEach(([held]) => { top = Math.max(top, held); }));
    const x = (t) => pad + (width - pad - 8) * (t / end);
    const y = (v) => height - 18 - (height - 30) * (v / top);
    const axis = document.createElementNS(SVG, "path");
    axis.setAttribute("d", `M${pad},8 V${height - 18} H${width - 8}`);
    axis.setAttribute("class", "axis"); axis.setAttribute("fill", "none");
    svg.appendChild(axis);
    const label = (text, lx, ly, anchor) => {
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("x", lx); t.setAttribute("y", ly); t.setAttribute("text-anchor", anchor);
      t.textContent = text; svg.appendChild(t);
    };
    label(num(top), pad - 4, 14, "end"); label("0", pad - 4, height - 18, "end");
    label(hours(end), width - 8, height - 4, "end"); label("GPUs held (solid) and busy (dashed)", pad + 6, 14, "start");
    [...state.pools.keys()].forEach((name, i) => {
      [0, 1].forEach((which) => {
        const line = document.createElementNS(SVG, "polyline");
        let d = ""; let last = null;
        points.forEach((pt) => {
          const v = pt.pools[name] ? pt.pools[name][which] : 0;
          if (last !== null) d += `${x(pt.t_s)},${y(last)} `;
          d += `${x(pt.t_s)},${y(v)} `; last = v;
        });
        line.setAttribute("points", d.trim());
        line.setAttribute("fill", "none");
        line.setAttribute("stroke", poolColour(i));
        line.setAttribute("stroke-width", "1.5");
        if (which === 1) line.setAttribute("stroke-dasharray", "4 3");
        line.setAttribute("vector-effect", "non-scaling-stroke");
        line.dataset.pool = name;
        svg.appendChild(line);
      });
    });
    box.replaceChildren(svg);
  }

  function render(state, live) {
    $("clock").textContent = `round ${state.round} · ${hours(state.t_s)}`;
    const badge = $("state");
    badge.textContent = state.ended ? `ended: ${state.ended}` : (live ? "live" : "connecting");
    badge.className = `badge ${state.ended ? "ended" : "live"}`;
    fill($("pools").tBodies[0], [...state.pools].map(([name, p]) => [name, num(p.held), num(p.busy),
      p.held > 0 ? `${num((100 * p.busy) / p.held, 1)}%` : "-", num(p.max)]));
    [...$("pools").tBodies[0].rows].forEach((row, i) => { row.cells[0].style.color = poolColour(i); });
    fill($("tenants").tBodies[0], [...state.tenants].map(([name, t]) => [name, num(t.queued),
      num(t.running), num(t.finished), num(t.spent, 2), num(t.budget, 0), num(t.reward, 2),
      num(t.diff, 2), num(t.score, 3), num(t.defaulted)]));
    $("trade-count").textContent = state.trades.length ? `${state.trades.length} trade(s) applied`
      : (state.ended ? "none" : "none yet");
    fill($("trades").tBodies[0], state.trades.slice(-12).reverse().map(({ round, offer }) => [
      num(round), offer.tenant, offer.to_tenant, bundle(offer.give), bundle(offer.take), offer.reason || ""]));
    chart(state);
  }

  async function openReport(id) {
    const button = $("open-report");
    button.disabled = true;
    try {
      const page = await (await api(`/v1/sessions/${encodeURIComponent(id)}/report`)).blob();
      window.open(URL.createObjectURL(page), "_blank");
    } catch (error) {
      status(`cannot draw the report: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  }

  async function sessionPage() {
    const id = decodeURIComponent(location.pathname.split("/").pop());
    $("session-id").textContent = id;
    document.title = `cluster twin · ${id}`;
    if (!takeToken()) { askToken(sessionPage); return; }
    let response;
    try {
      response = await api(`/v1/sessions/${encodeURIComponent(id)}/events?follow=1`);
    } catch (error) {
      if (error.status === 401) { sessionStorage.removeItem(TOKEN_KEY); askToken(sessionPage, "The token was not accepted for this session."); return; }
      $("state").textContent = "error"; $("state").className = "badge error";
      status(error.message);
      return;
    }
    const state = new Session();
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = ""; let drawn = false;
    const draw = () => { drawn = false; render(state, true); };
    status("");
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split("\n");
      buffer = lines.pop();
      lines.filter((l) => l.trim()).forEach((line) => state.take(JSON.parse(line)));
      if (!drawn) { drawn = true; requestAnimationFrame(draw); }
    }
    state.sample();
    render(state, false);
    if (!state.ended) state.ended = "closed";
    render(state, false);
    $("report-links").hidden = false;
    $("open-report").addEventListener("click", () => openReport(id));
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (document.body.dataset.page === "sessions") sessionsPage();
    else sessionPage();
  });
})();
