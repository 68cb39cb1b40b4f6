// The etlstage status page: renders api/status (inlined in the page at first) and polls it.
// No framework, no build step, nothing loaded from elsewhere.
"use strict";

const REFRESH_MS = 2000;
const CHART_SPAN_S = 300; // the history the supervisor keeps
const CHART_MIN_S = 60;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const num = (n) => (n === null || n === undefined ? "-" : Math.round(n).toLocaleString("en-US"));
const mb = (b) => `${(b / 1e6).toLocaleString("en-US", { maximumFractionDigits: 0 })} MB`;
function bytes(b) {
  if (b >= 1e9) return `${(b / 1e9).toFixed(2)} GB`;
  if (b >= 1e6) return `${(b / 1e6).toFixed(1)} MB`;
  if (b >= 1e3) return `${(b / 1e3).toFixed(1)} kB`;
  return `${b} B`;
}
function secs(s) {
  if (s === null || s === undefined) return "-";
  if (s === 0) return "0 s";
  if (s < 0.001) return `${(s * 1e6).toFixed(0)} µs`;
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
const clock = (t) => new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z";

function figure(label, value, key, cls) {
  return el("div", {}, el("dt", {}, label), el("dd", { "data-figure": key, class: cls }, value));
}

function latency(lat) {
  const buckets = (lat && lat.buckets) || [];
  const count = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!count) return { mean: null, p95: "-" };
  const need = 0.95 * count;
  const hit = buckets.find(([, n]) => n >= need);
  const bound = hit[0] === "+Inf" ? "> " + secs(Number(buckets[buckets.length - 2][0])) : "≤ " + secs(Number(hit[0]));
  return { mean: lat.sum / count, p95: bound };
}

function spanLabel(s) {
  return s >= 120 ? `-${Math.round(s / 60)} min` : `-${Math.round(s)} s`;
}

function chart(history) {
  const pts = (history || []).filter(([ago]) => ago <= CHART_SPAN_S);
  // as wide as the history there is (at least a minute), up to what the supervisor keeps
  const span = Math.min(CHART_SPAN_S, Math.max(CHART_MIN_S, ...pts.map(([ago]) => ago + 2)));
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${span} 60`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const max = Math.max(1, ...pts.map(([, r]) => r));
  const xy = pts.map(([ago, r]) => `${(span - ago).toFixed(1)},${(58 - (r / max) * 54).toFixed(1)}`);
  svg.setAttribute("aria-label", `messages per second over the last ${spanLabel(span).slice(1)}, peak ${num(max)}`);
  if (xy.length > 1) {
    const area = document.createElementNS(svg.namespaceURI, "polygon");
    const first = xy[0].split(",")[0];
    const last = xy[xy.length - 1].split(",")[0];
    area.setAttribute("points", `${first},60 ${xy.join(" ")} ${last},60`);
    const line = document.createElementNS(svg.namespaceURI, "polyline");
    line.setAttribute("points", xy.join(" "));
    svg.append(area, line);
  }
  return el(
    "div",
    {},
    svg,
    el("div", { class: "chart-label" }, el("span", {}, spanLabel(span)), el("span", {}, `peak ${num(max)}/s`), el("span", {}, "now"))
  );
}

function reports(rep) {
  const items = [];
  for (const [k, v] of Object.entries(rep || {})) {
    if (Array.isArray(v)) {
      // "output": where the workers wrote (paths, tables, topics)
      items.push(el("li", {}, el("span", { class: "k" }, `${k}: `), v.join(", ")));
    } else if (v !== null && typeof v === "object") {
      const inner = Object.entries(v)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([kk, vv]) => `${kk} ${num(vv)}`)
        .join(", ");
      items.push(el("li", {}, el("span", { class: "k" }, `${k}: `), inner || "none"));
    } else {
      items.push(el("li", {}, el("span", { class: "k" }, `${k}: `), num(v)));
    }
  }
  return items.length ? el("ul", { class: "reports", "data-figure": "reports" }, items) : null;
}

function card(name, st) {
  const lat = latency(st.latency);
  const failures = Object.entries(st.failures || {})
    .filter(([, n]) => n)
    .map(([why, n]) => `${n} ${why}`)
    .join(", ");
  const rss = (st.workers || []).length ? mb(st.rss || 0) : "-";
  // a figure the engine cannot know is absent from the document (under Spark the workers
  // run on executors: no queues, resources or requests in flight the driver could show)
  const has = (key) => key in st;
  const errors = (st.last_errors || [])
    .slice()
    .reverse()
    .map((e) => el("li", {}, el("time", {}, clock(e.at)), e.error));
  return el(
    "article",
    { class: "card", "data-stage": name },
    el(
      "h3",
      {},
      el("span", { class: "name" }, name),
      el("span", { class: "type" }, st.type || ""),
      el("span", { class: "rate", "data-figure": "rate" }, num(st.rate || 0), el("span", { class: "unit" }, " msg/s"))
    ),
    chart(st.history),
    el(
      "dl",
      { class: "figures" },
      // an E-stage takes nothing in; an L-stage hands nothing on
      st.type === "E" ? null : figure("in", num(st.in), "in"),
      st.type === "L" ? null : figure("out", num(st.out), "out"),
      st.type === "E" ? null : figure("bytes in", bytes(st.bytes_in || 0), "bytes_in"),
      st.type === "L" ? null : figure("bytes out", bytes(st.bytes_out || 0), "bytes_out"),
      figure(st.type === "E" ? "cycles" : "requests", num(st.jobs), "jobs"),
      has("in_flight") ? figure("in flight", num(st.in_flight), "in_flight") : null,
      has("queued") ? figure("queued", num(st.queued.messages), "queued") : null,
      figure("mean latency", secs(lat.mean), "latency_mean"),
      figure("p95 latency", lat.p95, "latency_p95"),
      figure("restarts", num(st.restarts) + (failures ? ` (${failures})` : ""), "restarts", st.restarts ? "bad" : undefined),
      figure("dead letters", num(st.deadletters), "deadletters", st.deadletters ? "bad" : undefined),
      has("workers") ? figure("workers", num(st.workers.length), "workers") : null,
      has("rss") ? figure("RSS", rss, "rss") : null,
      has("cpu") ? figure("CPU", `${st.cpu.toFixed(0)}%`, "cpu") : null
    ),
    reports(st.reports),
    errors.length ? el("ul", { class: "errors", "data-figure": "errors" }, errors) : null
  );
}

// The Spark engine's start-up phases (JVM, session, pre-flight job, query start, first
// micro-batch) with their durations; the one still running ends with an ellipsis.
function startup(phases) {
  if (!phases || !phases.length) return [];
  const total = phases.reduce((sum, p) => sum + p.seconds, 0);
  const parts = phases.map((p) =>
    el("span", { class: "phase", "data-phase": p.name, "data-done": String(p.done) }, `${p.name} ${secs(p.seconds)}${p.done ? "" : "…"}`)
  );
  const joined = parts.flatMap((p, i) => (i ? [" · ", p] : [p]));
  return [el("span", {}, "start-up ", el("b", { "data-figure": "startup" }, secs(total)), " (", ...joined, ")")];
}

function render(doc) {
  const run = (doc.running || [])[0];
  const live = (run && run.progress) || {};
  document.getElementById("pipeline").textContent = live.pipeline || "";
  document.title = `etlstage ${live.pipeline || ""}`;
  const dead = (doc.deadletters || {}).total || 0;
  const summary = document.getElementById("summary");
  summary.replaceChildren(
    el("span", {}, live.engine === "spark" ? "Spark driver " : "supervisor ", el("b", { "data-figure": "state" }, run ? `pid ${run.pid}, ${run.state}` : "not running")),
    el("span", {}, "elapsed ", el("b", { "data-figure": "elapsed" }, secs(live.elapsed))),
    ...startup(live.startup),
    el("span", {}, "windows in flight ", el("b", { "data-figure": "windows" }, num((doc.windows_in_flight || []).length))),
    el("span", {}, "dead letters ", el("b", { "data-figure": "deadletters", class: dead ? "bad" : undefined }, `${num(dead)} (${num((doc.deadletters || {}).new || 0)} new)`)),
    el("span", {}, "as of ", el("b", {}, clock(doc.time)))
  );
  const stages = live.stages || {};
  document.getElementById("stages").replaceChildren(...Object.entries(stages).map(([n, st]) => card(n, st)));
  const windows = doc.windows_in_flight || [];
  document.getElementById("window-count").textContent = `(${windows.length})`;
  document.querySelector("#windows tbody").replaceChildren(
    ...windows.map((w) =>
      el(
        "tr",
        {},
        el("td", {}, w.source),
        el("td", {}, w.seq),
        el("td", {}, w.state),
        el("td", {}, num(w.messages)),
        el("td", {}, secs(w.age_seconds)),
        el("td", {}, w.request ? JSON.stringify(w.request) : "-")
      )
    )
  );
  document.querySelector("#checkpoints tbody").replaceChildren(
    ...(doc.checkpoints || []).map((c) =>
      el(
        "tr",
        {},
        el("td", {}, c.source),
        el("td", {}, num(c.windows_done)),
        el("td", {}, num(c.messages)),
        el("td", {}, c.committed_end === null ? "-" : JSON.stringify(c.committed_end)),
        el("td", {}, clock(c.updated_at))
      )
    )
  );
}

function banner(text) {
  const b = document.getElementById("banner");
  b.textContent = text || "";
  b.hidden = !text;
}

async function refresh() {
  try {
    const r = await fetch("api/status", { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
    banner("");
  } catch (err) {
    banner(`No answer from the supervisor (${err.message}): the run may have ended. Showing the last state.`);
  }
}

render(JSON.parse(document.getElementById("initial-state").textContent));
setInterval(refresh, REFRESH_MS);
