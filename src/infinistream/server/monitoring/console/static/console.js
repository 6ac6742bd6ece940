// The InfiniStream console: reads nats-server's monitoring endpoints and the console's
// overview every few seconds and draws the page. Hand-written, no build step, no library.
"use strict";

const REFRESH_MS = 3000;
const COLOURS = ["#2f6fde", "#1f9d55", "#d98a00", "#d64545", "#8a4fd6", "#2aa1b3"];

async function fetchJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  // /healthz answers 503 with a JSON body when unhealthy: read the body whatever the status.
  return { status: response.status, body: await response.json() };
}

function num(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 2 });
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function dollars(n) {
  return n < 0.01 && n > 0 ? `$${n.toFixed(6)}` : `$${n.toFixed(2)}`;
}

function when(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function text(id, value) {
  document.getElementById(id).textContent = value;
}

// Rows are built with textContent only: names and subjects are never read as HTML.
function fill(tableId, rows, emptyText) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren();
  if (!rows.length) {
    const tr = body.insertRow();
    const td = tr.insertCell();
    td.colSpan = document.querySelectorAll(`#${tableId} thead th`).length;
    td.className = "empty";
    td.textContent = emptyText;
    return;
  }
  for (const row of rows) {
    const tr = body.insertRow();
    if (row.className) tr.className = row.className;
    for (const cell of row.cells) {
      const td = tr.insertCell();
      const value = typeof cell === "object" && cell !== null ? cell : { text: cell };
      td.textContent = value.text;
      if (value.num) td.classList.add("num");
      if (value.cls) td.classList.add(value.cls);
      if (value.href) {
        td.textContent = "";
        const a = document.createElement("a");
        a.href = value.href;
        a.textContent = value.text;
        td.appendChild(a);
      }
    }
  }
}

function cell(value, options = {}) {
  return { text: value, num: true, ...options };
}

// --- plots: inline SVG polylines over the history's window --------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svgEl(name, attrs) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function plot(figureId, times, series) {
  const figure = document.getElementById(figureId);
  figure.querySelectorAll("svg, .legend").forEach((el) => el.remove());
  const W = 600, H = 150, L = 46, R = 8, T = 10, B = 20;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", preserveAspectRatio: "none" });
  const values = series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined));
  const max = Math.max(1, ...values);
  const t0 = times[0] ?? 0, t1 = times[times.length - 1] ?? 1;
  const x = (t) => L + ((t - t0) / Math.max(t1 - t0, 1)) * (W - L - R);
  const y = (v) => H - B - (v / max) * (H - T - B);
  for (const frac of [0, 0.5, 1]) {
    svg.appendChild(svgEl("line", { x1: L, x2: W - R, y1: y(max * frac), y2: y(max * frac),
      stroke: "#dde3ea", "stroke-width": 1 }));
    const label = svgEl("text", { x: L - 4, y: y(max * frac) + 4, "text-anchor": "end",
      "font-size": 10, fill: "#6b7785" });
    label.textContent = num(max * frac);
    svg.appendChild(label);
  }
  const span = svgEl("text", { x: L, y: H - 4, "font-size": 10, fill: "#6b7785" });
  span.textContent = times.length ? `last ${Math.round(t1 - t0)} s` : "no samples yet";
  svg.appendChild(span);
  series.forEach((s, i) => {
    const points = [];
    s.values.forEach((v, j) => {
      if (v !== null && v !== undefined) points.push(`${x(times[j]).toFixed(1)},${y(v).toFixed(1)}`);
    });
    if (points.length === 1) points.push(points[0].replace(/^[\d.]+/, (px) => String(Number(px) + 2)));
    const colour = s.colour || COLOURS[i % COLOURS.length];
    // The area under the first series, then every series' line.
    if (i === 0 && points.length > 1) {
      const first = points[0].split(",")[0], last = points[points.length - 1].split(",")[0];
      svg.appendChild(svgEl("polygon", { points: `${first},${H - B} ${points.join(" ")} ${last},${H - B}`,
        fill: colour, "fill-opacity": 0.15 }));
    }
    svg.appendChild(svgEl("polyline", { points: points.join(" "), fill: "none", stroke: colour,
      "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
  });
  figure.appendChild(svg);
  if (series.length > 1) {
    const legend = document.createElement("div");
    legend.className = "legend";
    series.forEach((s, i) => {
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = s.colour || COLOURS[i % COLOURS.length];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(s.name));
      legend.appendChild(item);
    });
    figure.appendChild(legend);
  }
}

// --- sections ------------------------------------------------------------------------------

function renderVarz(varz) {
  text("server-name", `${varz.server_name} · ${varz.server_id} · up ${varz.uptime}`);
  text("card-connections", num(varz.connections));
  text("card-cpu", `${num(varz.cpu)} %`);
  text("card-mem", bytes(varz.mem));
  const ours = varz.infinistream || {};
  const pool = ours.pool;
  let agents;
  if (pool && Array.isArray(pool.members) && pool.members.length) {
    agents = pool.members.map((m) => ({
      className: m.self ? "self" : "",
      cells: [m.name, m.id, m.address, m.zone || "–", (m.roles || []).join(", "),
        m.monitor_address ? { text: m.monitor_address, href: `http://${m.monitor_address}/` } : "–"],
    }));
    text("agents-note", `The pool: ${pool.members.length} live agent(s) in group ${ours.group}.`);
  } else {
    agents = [{
      className: "self",
      cells: [varz.server_name, varz.server_id, `${varz.host}:${varz.port}`, "–",
        ((pool && pool.roles) || []).join(", ") || "–",
        `${location.host}`],
    }];
    text("agents-note", `This agent; group ${ours.group || "default"}, objects ${ours.objects || "?"}.`);
  }
  fill("agents", agents, "no agents");
}

function renderJsz(jsz) {
  text("card-streams", num(jsz.streams));
  text("card-consumers", num(jsz.consumers));
  text("card-messages", num(jsz.messages));
  text("card-bytes", bytes(jsz.bytes));
  const streams = [];
  const consumers = [];
  let lag = 0;
  for (const account of jsz.account_details || []) {
    for (const s of account.stream_detail || []) {
      const cfg = s.config || {};
      const st = s.state || {};
      streams.push({ cells: [s.name, (cfg.subjects || []).join(" "), cell(num(st.messages)),
        cell(bytes(st.bytes)), cell(num(st.first_seq)), cell(num(st.last_seq)),
        cell(num(st.consumer_count)), cfg.retention || "–", cfg.compression || "none"] });
      for (const c of s.consumer_detail || []) {
        const ccfg = c.config || {};
        lag += c.num_pending || 0;
        consumers.push({ cells: [s.name, c.name, ccfg.deliver_subject ? "push" : "pull",
          cell(num(c.num_pending), { cls: c.num_pending > 0 ? "lagging" : "" }),
          cell(num(c.num_ack_pending)), cell(num(c.num_redelivered)), cell(num(c.num_waiting)),
          cell(num((c.delivered || {}).stream_seq)), cell(num((c.ack_floor || {}).stream_seq))] });
      }
    }
  }
  text("card-lag", num(lag));
  fill("streams", streams, "no streams yet");
  fill("consumers", consumers, "no consumers yet");
}

function renderHealth(health) {
  const badge = document.getElementById("health");
  const ok = health.status === 200;
  badge.textContent = ok ? "healthy" : `unhealthy: ${health.body.error || health.body.status}`;
  badge.className = `badge ${ok ? "ok" : "bad"}`;
}

function renderOverview(overview) {
  const h = overview.history;
  const rates = h.rates || {};
  const gauges = h.gauges || {};
  text("history-note", `${h.t.length} samples, one every ${h.interval} s, kept in this agent's memory`);
  plot("plot-publishes", h.t, [{ name: "publishes", values: rates.publishes || [] }]);
  plot("plot-requests", h.t, ["puts", "gets", "lists", "deletes"].map((k) => (
    { name: k.toUpperCase().replace(/S$/, ""), values: rates[k] || [] })));
  plot("plot-lag", h.t, [{ name: "lag", values: gauges.lag || [], colour: "#d98a00" },
    { name: "ack pending", values: gauges.ack_pending || [], colour: "#d64545" }]);
  plot("plot-messages", h.t, [{ name: "messages", values: gauges.messages || [], colour: "#1f9d55" }]);

  const totals = h.totals || {};
  const costRates = overview.cost.rates || {};
  const requests = [["PUT", "puts"], ["GET", "gets"], ["HEAD", "heads"], ["LIST", "lists"], ["DELETE", "deletes"]];
  const rows = requests.map(([label, key]) => ({ cells: [label, cell(num(totals[key] || 0)),
    cell(num(costRates[key] || 0))] }));
  rows.push({ cells: ["bytes written", cell(bytes(totals.bytes_put || 0)), cell("")] });
  rows.push({ cells: ["bytes read", cell(bytes(totals.bytes_got || 0)), cell("")] });
  fill("objects", rows, "");
  const c = overview.cost;
  const where = c.billed ? "S3 bills this agent's requests" : "a local directory bills nothing; at S3 prices";
  text("cost", `Requests so far: ${dollars(c.so_far)} · at the recent rate: ${dollars(c.monthly)} a month;`
    + ` storing what the streams hold: ${dollars(c.storage_monthly)} a month (${where}).`);
  text("prices", c.prices);

  const jobs = overview.jobs;
  if (jobs.error) {
    fill("jobs", [], `metadata unavailable: ${jobs.error}`);
    return;
  }
  fill("jobs", jobs.jobs.map((j) => ({ cells: [j.job, j.here ? "yes" : "no",
    j.running ? `running on ${j.running.holder}` : "idle",
    j.last ? when(j.last.finished) : "never", j.last ? j.last.holder : "–",
    j.last ? (j.last.exit_code === 0 ? "ok" : `exit ${j.last.exit_code}`) : "–",
    j.last ? j.last.summary : "–"] })), "");
  fill("tables", (jobs.tables || []).map((t) => ({ cells: [t.table, t.stream, cell(num(t.messages)),
    cell(`${t.seconds.toFixed(1)} s`), when(t.committed)] })),
    "No Iceberg tables yet (infinistream pipeline tables).");
  const elsewhere = "another agent or `infinistream pipeline` may run them.";
  text("jobs-note", jobs.interval ? `This agent runs its jobs every ${jobs.interval} s.`
    : jobs.role ? `This agent is in the jobs role but schedules no jobs (serve --jobs); ${elsewhere}`
      : `This agent is not in the jobs role (serve --roles); ${elsewhere}`);
}

let refreshes = 0;

async function refresh() {
  const [varz, jsz, health, overview] = await Promise.allSettled([
    fetchJSON("/varz"),
    fetchJSON("/jsz?accounts=true&streams=true&consumers=true&config=true"),
    fetchJSON("/healthz"),
    fetchJSON("/console/api/overview"),
  ]);
  // Each section draws from its own answer: one endpoint failing leaves the others shown.
  const sections = [[varz, (r) => renderVarz(r.body)], [jsz, (r) => renderJsz(r.body)],
    [health, renderHealth], [overview, (r) => renderOverview(r.body)]];
  for (const [result, render] of sections) {
    if (result.status === "fulfilled") {
      try { render(result.value); } catch (err) { console.error(err); }
    }
  }
  refreshes += 1;
  document.body.dataset.refreshes = String(refreshes);
  text("updated", `updated ${new Date().toLocaleTimeString()}`);
}

async function loop() {
  try { await refresh(); } catch (err) { console.error(err); }
  setTimeout(loop, REFRESH_MS);
}

loop();
