// agentic-rl report: curves, evaluations, config and a token-level trajectory explorer.
// Everything it shows is in the JSON block #report-data; nothing is fetched.
"use strict";

const REPORT = JSON.parse(document.getElementById("report-data").textContent);
const RUNS = REPORT.runs;
const RUN_COLORS = ["#0969da", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#0598bc", "#e85aad", "#57606a"];
const runColor = (i) => RUN_COLORS[i % RUN_COLORS.length];

// ----------------------------------------------------------------------------------------------
// small helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function fmt(value, digits) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  const a = Math.abs(value);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return value.toExponential(2);
  return value.toFixed(digits === undefined ? 3 : digits);
}

function mix(c1, c2, t) {  // rgb arrays, t in [0, 1]
  t = Math.max(0, Math.min(1, t));
  const c = c1.map((v, i) => Math.round(v + (c2[i] - v) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// ----------------------------------------------------------------------------------------------
// header: the runs

function renderRuns() {
  const table = el("table", { class: "runs" },
    el("tr", {}, ["run", "recipe", "model", "env", "algo", "steps", "wall time", "directory"].map(
      (h) => el("th", { text: h }))));
  RUNS.forEach((run, i) => {
    const cfg = run.config || {}, sum = run.summary || {};
    const model = (cfg.model && cfg.model.name) || sum.model || "";
    const env = (cfg.env && cfg.env.name) || sum.env || "";
    const algo = (cfg.algo && cfg.algo.name) || sum.algo || "";
    const steps = sum.steps !== undefined ? sum.steps : (cfg.trainer ? `(of ${cfg.trainer.steps})` : "");
    const wall = sum.wall_seconds !== undefined ? `${(sum.wall_seconds / 60).toFixed(1)} min` : "unfinished";
    table.appendChild(el("tr", {},
      el("td", {}, el("span", { class: "swatch", style: `background:${runColor(i)}` }), run.name),
      el("td", { text: cfg.recipe || sum.recipe || "" }), el("td", { text: model }),
      el("td", { text: env }), el("td", { text: algo }), el("td", { text: String(steps) }),
      el("td", { text: wall }), el("td", { text: run.path })));
  });
  document.getElementById("runs").appendChild(table);
}

// ----------------------------------------------------------------------------------------------
// curves

const PANELS = [
  { id: "reward", title: "Reward", keys: ["train/reward", "eval/reward"] },
  { id: "success", title: "Success rate", keys: ["train/success", "eval/success"] },
  { id: "kl", title: "KL to the reference", keys: ["train/kl"] },
  { id: "entropy", title: "Entropy (nats / token)", keys: ["train/entropy"] },
  { id: "clip", title: "Clip fraction", keys: ["train/clip_frac"] },
  { id: "lengths", title: "Response length (tokens)", keys: ["train/response_tokens", "eval/response_tokens"] },
  { id: "turns", title: "Turns per episode", keys: ["train/turns", "eval/turns"] },
  { id: "tools", title: "Tool calls and invalid actions / episode",
    keys: ["train/tool_calls_per_episode", "train/invalid_actions_per_episode",
      "train/tool_errors_per_episode", "eval/tool_calls_per_episode"] },
  { id: "mismatch", title: "Rollout / training mismatch",
    match: /^train\/(mismatch_|rollout_correction|stale_)/ },
  { id: "signal", title: "Learning signal",
    keys: ["train/nonzero_adv_fraction", "train/zero_variance_groups", "train/skipped_update"] },
  { id: "grad", title: "Loss and gradient norm", keys: ["train/loss", "train/grad_norm"] },
  { id: "time", title: "Step time (s)", keys: ["train/step_seconds", "train/rollout_seconds"] },
  { id: "throughput", title: "Generation (tokens / s)", keys: ["train/tokens_per_s"] },
];
const EVAL_MARKERS = ["eval_before", "eval_warm_start"];  // step-0 evaluations, drawn as markers

function panelKeys(panel) {
  const keys = new Set();
  for (const run of RUNS) {
    for (const key of Object.keys(run.series)) {
      if (panel.keys ? panel.keys.includes(key) : panel.match.test(key)) keys.add(key);
    }
  }
  const order = panel.keys || [...keys].sort();
  return order.filter((k) => keys.has(k));
}

function smooth(ys, alpha) {
  if (!alpha) return ys;
  let last = null;
  return ys.map((y) => (last = last === null ? y : alpha * last + (1 - alpha) * y));
}

const DASHES = ["solid", "dot", "dash", "longdash", "dashdot"];

function tracesFor(panel, keys, runIndices, alpha) {
  const traces = [];
  for (const r of runIndices) {
    const run = RUNS[r];
    keys.forEach((key, k) => {
      const points = run.series[key];
      if (!points || !points.length) return;
      const isEval = key.startsWith("eval/");
      const x = points.map((p) => p[0]), y = points.map((p) => p[1]);
      const label = (RUNS.length > 1 ? run.name + " · " : "") + key;
      traces.push({
        x, y: isEval ? y : smooth(y, alpha), name: label, type: "scatter",
        mode: isEval || x.length < 3 ? "lines+markers" : "lines",
        line: { color: runColor(r), dash: DASHES[k % DASHES.length], width: 1.8 },
        marker: { size: isEval ? 7 : 4 },
        hovertemplate: `${label}<br>step %{x}: %{y:.4g}<extra></extra>`,
      });
      if (isEval) {  // the evaluations before RL, at step 0
        const name = key.slice(5);
        for (const prefix of EVAL_MARKERS) {
          const before = run.series[`${prefix}/${name}`];
          if (!before) continue;
          traces.push({
            x: before.map((p) => p[0]), y: before.map((p) => p[1]), type: "scatter", mode: "markers",
            name: (RUNS.length > 1 ? run.name + " · " : "") + `${prefix}/${name}`,
            marker: { color: runColor(r), size: 9, symbol: prefix === "eval_before" ? "circle-open" : "diamond-open" },
            hovertemplate: `${prefix}/${name}: %{y:.4g}<extra></extra>`,
          });
        }
      }
    });
  }
  return traces;
}

function plotLayout(title) {
  return {
    title: { text: title, font: { size: 13 }, x: 0.02, xanchor: "left" },
    margin: { l: 48, r: 10, t: 30, b: 24 }, showlegend: true,
    legend: { orientation: "h", y: -0.12, yanchor: "top", font: { size: 10 } },
    xaxis: { zeroline: false, automargin: true },
    yaxis: { zeroline: false, automargin: true }, hovermode: "closest",
  };
}

const PLOT_CONFIG = { displaylogo: false, responsive: true, displayModeBar: "hover",
  modeBarButtonsToRemove: ["lasso2d", "select2d"] };

function renderCurves() {
  const box = document.getElementById("curves");
  const alphaInput = document.getElementById("smoothing");
  const layoutSelect = document.getElementById("curve-layout");
  const alpha = Number(alphaInput.value);
  const sideBySide = RUNS.length > 1 && layoutSelect.value === "side";
  box.innerHTML = "";
  box.className = sideBySide ? "grid side" : "grid";
  box.style.setProperty("--cols", String(RUNS.length));
  const missing = [];
  for (const panel of PANELS) {
    const keys = panelKeys(panel);
    if (!keys.length) { missing.push(panel.title); continue; }
    const groups = sideBySide ? RUNS.map((_, r) => [r]) : [RUNS.map((_, r) => r)];
    for (const runs of groups) {
      const div = el("div", { class: "curve", "data-panel": panel.id,
        "data-runs": runs.map((r) => RUNS[r].name).join(",") });
      box.appendChild(div);
      const title = sideBySide ? `${panel.title} — ${RUNS[runs[0]].name}` : panel.title;
      Plotly.newPlot(div, tracesFor(panel, keys, runs, alpha), plotLayout(title), PLOT_CONFIG);
    }
  }
  if (sideBySide) {  // the same y range for a panel across runs, so the columns compare
    for (const panel of PANELS) {
      const divs = [...box.querySelectorAll(`.curve[data-panel="${panel.id}"]`)];
      const ranges = divs.map((d) => d._fullLayout && d._fullLayout.yaxis.range).filter(Boolean);
      if (ranges.length < 2) continue;
      const range = [Math.min(...ranges.map((r) => r[0])), Math.max(...ranges.map((r) => r[1]))];
      divs.forEach((d) => Plotly.relayout(d, { "yaxis.range": range }));
    }
  }
  document.getElementById("curves-missing").textContent = missing.length
    ? `Not logged by ${RUNS.length > 1 ? "these runs" : "this run"}: ${missing.join(", ")}.` : "";
  renderAnyMetric();
}

function renderAnyMetric() {
  const select = document.getElementById("any-metric");
  const key = select.value;
  const div = document.getElementById("any-curve");
  if (!key) return;
  const alpha = Number(document.getElementById("smoothing").value);
  const panel = { id: "any", title: key, keys: [key] };
  Plotly.react(div, tracesFor(panel, [key], RUNS.map((_, r) => r), alpha), plotLayout(key), PLOT_CONFIG);
}

function setupCurves() {
  const keys = new Set();
  RUNS.forEach((run) => Object.keys(run.series).forEach((k) => keys.add(k)));
  const select = document.getElementById("any-metric");
  [...keys].sort().forEach((k) => select.appendChild(el("option", { value: k, text: k })));
  if (keys.has("train/reward")) select.value = "train/reward";
  select.addEventListener("change", renderAnyMetric);
  document.getElementById("smoothing").addEventListener("change", renderCurves);
  const layoutSelect = document.getElementById("curve-layout");
  if (RUNS.length < 2) layoutSelect.parentElement.style.display = "none";
  layoutSelect.addEventListener("change", renderCurves);
  renderCurves();
}

// ----------------------------------------------------------------------------------------------
// evaluations

const STAGE_NAMES = { eval_before: "before RL", eval_warm_start: "after the warm start", eval: "step" };
const EVAL_COLUMNS = ["success", "reward", "tool_calls_per_episode", "invalid_actions_per_episode",
  "turns", "response_tokens", "episodes", "seconds"];

function renderEvals() {
  const box = document.getElementById("evals");
  const rows = [];
  RUNS.forEach((run, r) => run.evals.forEach((row) => rows.push([r, row])));
  if (!rows.length) { box.appendChild(el("p", { class: "note", text: "No evaluations logged." })); return; }
  const extra = new Set();
  rows.forEach(([, row]) => Object.keys(row).forEach((k) => {
    if (!["stage", "step"].includes(k) && !EVAL_COLUMNS.includes(k)) extra.add(k);
  }));
  const columns = [...EVAL_COLUMNS.filter((c) => rows.some(([, row]) => c in row)), ...[...extra].sort()];
  const table = el("table", { id: "eval-table" }, el("tr", {},
    el("th", { class: "l", text: "run" }), el("th", { class: "l", text: "evaluation" }),
    el("th", { text: "step" }), columns.map((c) => el("th", { text: c.replaceAll("_", " ") }))));
  for (const [r, row] of rows) {
    const stage = row.stage === "eval" ? `step ${row.step}` : (STAGE_NAMES[row.stage] || row.stage);
    table.appendChild(el("tr", {},
      el("td", { class: "l" }, el("span", { class: "swatch", style: `background:${runColor(r)}` }), RUNS[r].name),
      el("td", { class: "l", text: stage }), el("td", { text: String(row.step) }),
      columns.map((c) => el("td", { text: fmt(row[c]) }))));
  }
  box.appendChild(table);
}

// ----------------------------------------------------------------------------------------------
// config

function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = JSON.stringify(v);
  }
  return out;
}

function renderConfig() {
  const box = document.getElementById("config");
  if (RUNS.length > 1) {
    const flat = RUNS.map((run) => flatten(run.config, "", {}));
    const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort()
      .filter((k) => new Set(flat.map((f) => f[k])).size > 1 && !k.startsWith("trainer.run_name")
        && !k.startsWith("trainer.out_dir"));
    const table = el("table", { id: "config-diff" }, el("tr", {}, el("th", { class: "l", text: "setting" }),
      RUNS.map((run) => el("th", { class: "l", text: run.name }))));
    keys.forEach((k) => table.appendChild(el("tr", {}, el("td", { class: "l", text: k }),
      flat.map((f) => el("td", { class: "l", text: f[k] === undefined ? "—" : f[k] })))));
    box.appendChild(el("h3", { text: keys.length ? "Settings that differ" : "The runs' settings are the same" }));
    if (keys.length) box.appendChild(table);
  }
  RUNS.forEach((run) => {
    box.appendChild(el("details", { open: RUNS.length === 1 },
      el("summary", { text: `${run.name}: config.json` }),
      el("pre", { class: "config", text: run.config ? JSON.stringify(run.config, null, 2) : "(no config.json)" })));
  });
}

// ----------------------------------------------------------------------------------------------
// trajectory explorer

const PAGE = 50;
const state = { rows: [], page: 0, selected: null, mode: "mask" };
const ALL = [];  // [{run, index, t}] every sampled trajectory of every run
RUNS.forEach((run, r) => run.trajectories.forEach((t, i) => ALL.push({ r, i, t })));

function option(value, text) { return el("option", { value, text: text === undefined ? value : text }); }

function setupExplorer() {
  const f = (id) => document.getElementById(id);
  if (!ALL.length) {
    f("explorer").replaceChildren(el("p", { class: "note",
      text: "No trajectories logged (trainer.log_trajectories=0, or a run from before trajectory logging)." }));
    return;
  }
  if (RUNS.length > 1) RUNS.forEach((run, r) => f("f-run").appendChild(option(String(r), run.name)));
  else f("f-run").parentElement.style.display = "none";
  const splits = [...new Set(ALL.map((a) => a.t.split))];
  splits.forEach((s) => f("f-split").appendChild(option(s)));
  if (splits.includes("train")) f("f-split").value = "train";
  // multi-agent runs: each role's turns are their own samples; a filter by role
  const roles = [...new Set(ALL.map((a) => a.t.role).filter((role) => role))];
  roles.forEach((role) => f("f-role").appendChild(option(role)));
  if (!roles.length) f("f-role").parentElement.style.display = "none";
  ["f-run", "f-split"].forEach((id) => f(id).addEventListener("change", () => { fillSteps(); applyFilters(); }));
  ["f-step", "f-role", "f-success", "f-trained"].forEach((id) => f(id).addEventListener("change", () => {
    if (id === "f-step") fillGroups();
    applyFilters();
  }));
  ["f-group", "f-rmin", "f-rmax"].forEach((id) => f(id).addEventListener("input", applyFilters));
  f("prev").addEventListener("click", () => { state.page = Math.max(0, state.page - 1); renderList(); });
  f("next").addEventListener("click", () => {
    state.page = Math.min(Math.floor((state.rows.length - 1) / PAGE), state.page + 1); renderList();
  });
  document.querySelectorAll("input[name=color]").forEach((input) => input.addEventListener("change", () => {
    state.mode = input.value;
    if (state.selected) renderDetail(state.selected);
  }));
  const total = RUNS.reduce((n, run) => n + run.logged_trajectories, 0);
  f("sampled-note").textContent = ALL.length < total
    ? `${ALL.length} of ${total} logged trajectories are in this report (evenly spaced steps; `
      + "raise --max-trajectories for more)."
    : `All ${total} logged trajectories.`;
  fillSteps();
  applyFilters();
}

function baseRows() {
  const f = (id) => document.getElementById(id).value;
  return ALL.filter((a) => (f("f-run") === "" || a.r === Number(f("f-run"))) && (f("f-split") === "" || a.t.split === f("f-split")));
}

function fillSteps() {
  const select = document.getElementById("f-step");
  const steps = [...new Set(baseRows().map((a) => a.t.step))].sort((a, b) => a - b);
  select.replaceChildren(option("", "all"), ...steps.map((s) => option(String(s))));
  fillGroups();
}

function fillGroups() {
  const list = document.getElementById("groups");
  const step = document.getElementById("f-step").value;
  const groups = [...new Set(baseRows().filter((a) => step === "" || a.t.step === Number(step)).map((a) => a.t.group_id))];
  list.replaceChildren(...groups.slice(0, 500).map((g) => option(g)));
}

function applyFilters() {
  const v = (id) => document.getElementById(id).value;
  const step = v("f-step"), group = v("f-group").trim(), success = v("f-success"), trained = v("f-trained");
  const role = v("f-role");
  const rmin = v("f-rmin") === "" ? -Infinity : Number(v("f-rmin"));
  const rmax = v("f-rmax") === "" ? Infinity : Number(v("f-rmax"));
  state.rows = baseRows().filter(({ t }) =>
    (step === "" || t.step === Number(step))
    && (!group || t.group_id.includes(group))
    && (role === "" || t.role === role)
    && t.reward >= rmin && t.reward <= rmax
    && (success === "" || (success === "1") === (t.success >= 1))
    && (trained === "" || String(t.trained) === trained));
  state.page = 0;
  renderList();
}

function renderList() {
  const body = document.getElementById("traj-body");
  const start = state.page * PAGE;
  const rows = state.rows.slice(start, start + PAGE);
  body.replaceChildren(...rows.map((a) => {
    const t = a.t;
    const tr = el("tr", { class: "traj-row" + (state.selected === a ? " selected" : ""), "data-run": a.r,
      "data-index": a.i, onclick: () => openTrajectory(a) },
      RUNS.length > 1 ? el("td", { class: "l" }, el("span", { class: "swatch", style: `background:${runColor(a.r)}` })) : null,
      el("td", { text: String(t.step) }), el("td", { class: "l", text: t.split }),
      el("td", { class: "l group", text: t.role ? `${t.group_id} · ${t.role}` : t.group_id,
        title: `${t.group_id} (task ${t.task_id})` }),
      el("td", { text: fmt(t.reward) }),
      el("td", { class: t.success >= 1 ? "ok" : "bad", text: t.success >= 1 ? "yes" : "no" }),
      el("td", { text: String(t.turns.length) }), el("td", { text: String(t.ids.length) }),
      el("td", { text: t.trained === null ? "" : t.trained ? "yes" : "no" }));
    return tr;
  }));
  const runColumn = document.querySelector("#traj-head th");  // the run swatch column
  runColumn.style.display = RUNS.length > 1 ? "" : "none";
  const pages = Math.max(1, Math.ceil(state.rows.length / PAGE));
  document.getElementById("page").textContent =
    `${state.rows.length} trajectories · page ${state.page + 1} / ${pages}`;
}

// -- one trajectory, token by token

const GREY = [230, 232, 235], WHITE = [255, 255, 255], GREEN = [26, 160, 70], RED = [215, 45, 45],
  BLUE = [40, 100, 220], ORANGE = [255, 200, 130];
const VERSION_COLORS = ["#b6e3ff", "#aceebb", "#fff8c5", "#ffd8b5", "#ffcecb", "#e8d8ff", "#c7f0f0", "#f4d3e8"];

function trainMask(t) { return t.train_mask || t.mask; }

function colorMode(t, mode) {
  // -> {color(i) -> css, legend: [nodes], note}
  const mask = t.mask, tmask = trainMask(t);
  const injected = `rgb(${GREY.join(",")})`;
  if (mode === "mask") {
    const trained = t.trained !== false && t.split === "train";
    return {
      color: (i) => (tmask[i] && trained ? "var(--trained)" : mask[i] ? "var(--sampled)" : "var(--injected)"),
      legend: [legendSwatch("var(--trained)", "trained (loss mask 1)"),
        legendSwatch("var(--sampled)", "sampled, not trained"),
        legendSwatch("var(--injected)", "injected: prompt, observations (loss mask 0)")],
    };
  }
  if (mode === "advantage") {
    if (!t.adv) return none(t, "No advantages: " + (t.split === "train" ? "a batch filter dropped this episode." : "evaluations are not trained on."));
    const scale = Math.max(1e-6, ...t.adv.map((a, i) => (tmask[i] ? Math.abs(a) : 0)));
    return {
      color: (i) => (!tmask[i] ? injected : t.adv[i] >= 0 ? mix(WHITE, GREEN, t.adv[i] / scale) : mix(WHITE, RED, -t.adv[i] / scale)),
      legend: [legendBar(`linear-gradient(90deg, rgb(${RED}), #fff, rgb(${GREEN}))`, `−${fmt(scale)}`, `+${fmt(scale)}`, "advantage")],
    };
  }
  if (mode === "logprob") {
    return {
      color: (i) => (!mask[i] ? injected : mix(WHITE, RED, -t.lp[i] / 6)),
      legend: [legendBar(`linear-gradient(90deg, #fff, rgb(${RED}))`, "0", "≤ −6", "behaviour logprob")],
    };
  }
  if (mode === "drift") {
    if (!t.learner_lp) return none(t, "No learner logprobs for this trajectory: the update recorded none (evaluations, dropped samples, or a learner that does not keep them).");
    const d = t.lp.map((lp, i) => (mask[i] ? lp - t.learner_lp[i] : 0));
    const scale = Math.max(0.01, ...d.map(Math.abs));
    return {
      color: (i) => (!mask[i] ? injected : d[i] >= 0 ? mix(WHITE, RED, d[i] / scale) : mix(WHITE, BLUE, -d[i] / scale)),
      legend: [legendBar(`linear-gradient(90deg, rgb(${BLUE}), #fff, rgb(${RED}))`, `−${fmt(scale)}`, `+${fmt(scale)}`,
        "behaviour − learner logprob")],
    };
  }
  if (mode === "version") {
    if (!t.versions) return none(t, "Policy versions were not recorded.");
    const versions = [...new Set(t.versions.filter((v) => v >= 0))].sort((a, b) => a - b);
    const color = (v) => VERSION_COLORS[((v % VERSION_COLORS.length) + VERSION_COLORS.length) % VERSION_COLORS.length];
    return {
      color: (i) => (t.versions[i] < 0 ? injected : color(t.versions[i])),
      legend: versions.map((v) => legendSwatch(color(v), `policy version ${v}`)).concat(
        [legendSwatch(injected, "not sampled")]),
    };
  }
  return none(t, "");
}

function none(t, note) {
  return { color: (i) => (t.mask[i] ? "#f3f4f6" : "var(--injected)"), legend: [], note };
}
function legendSwatch(color, label) {
  return el("span", {}, el("span", { class: "swatch", style: `background:${color}` }), label);
}
function legendBar(gradient, lo, hi, label) {
  return el("span", {}, `${label}: ${lo} `, el("span", { class: "bar", style: `display:inline-block;background:${gradient}` }), ` ${hi}`);
}

function openTrajectory(a) {
  state.selected = a;
  document.querySelectorAll("tr.traj-row.selected").forEach((tr) => tr.classList.remove("selected"));
  const row = document.querySelector(`tr.traj-row[data-run="${a.r}"][data-index="${a.i}"]`);
  if (row) row.classList.add("selected");
  renderDetail(a);
}

function tokenSpans(a, start, end, paint) {
  const { t } = a, vocab = RUNS[a.r].vocab;
  const frag = document.createDocumentFragment();
  for (let i = start; i < end; i++) {
    const span = document.createElement("span");
    span.className = "tok";
    span.dataset.i = i;
    span.dataset.mask = t.mask[i];
    span.style.background = paint(i);
    const piece = vocab[t.ids[i]];
    span.textContent = piece === undefined ? `⟨${t.ids[i]}⟩` : piece;
    frag.appendChild(span);
  }
  return frag;
}

function actionBadge(action) {
  if (!action) return null;
  let text = action.kind;
  if (action.kind === "tool") text = `tool call: ${action.name}(${JSON.stringify(action.arguments || {})})`;
  else if (action.kind === "answer") text = `answer: ${action.text || ""}`;
  else if (action.error) text = `${action.kind}: ${action.error}`;
  return el("span", { class: `action ${action.kind}`, text: text.length > 160 ? text.slice(0, 157) + "…" : text });
}

// Tree rollouts: the leaves of this trajectory's tree (among the sampled records), indented
// under the leaf they branched from, each with the turns it shares with its parent.
function renderTree(a, peers) {
  const tree = a.t.tree;
  const leaves = peers.filter((b) => b.t.tree && b.t.tree.id === tree.id)
    .sort((x, y) => x.t.tree.leaf - y.t.tree.leaf);
  const byLeaf = new Map(leaves.map((b) => [b.t.tree.leaf, b]));
  const depth = (b) => {
    let d = 0, p = b.t.tree.parent;
    while (p >= 0 && byLeaf.has(p) && d < 64) { d += 1; p = byLeaf.get(p).t.tree.parent; }
    return d;
  };
  const rows = leaves.map((b) => el("div", { style: `margin-left:${1.5 * depth(b)}em` },
    el("a", { class: b === a ? "current" : "", onclick: () => openTrajectory(b),
      text: `leaf ${b.t.tree.leaf}` }),
    b.t.tree.parent < 0 ? " root episode" : ` from leaf ${b.t.tree.parent} after turn ${b.t.tree.shared_turns}`
      + ` (${b.t.tree.shared_tokens} tokens shared)`,
    ` · r=${fmt(b.t.reward, 2)}`));
  return el("div", { class: "peers note" }, el("b", { text: `tree ${tree.id}` }),
    ` (${leaves.length} leaves sampled into the log)`, ...rows);
}

// Multi-agent episodes: the samples of this trajectory's episode (among the sampled records) in
// the order the roles wrote them, each its own conversation.
function renderRoles(a, peers) {
  const samples = peers.filter((b) => b.t.episode === a.t.episode).sort((x, y) => x.t.sample - y.t.sample);
  const steps = samples.map((b, k) => [k ? " → " : "", el("a", { class: b === a ? "current" : "",
    onclick: () => openTrajectory(b), text: `${b.t.role || "?"} (${b.t.turns.length} turns)` })]);
  return el("div", { class: "peers note roles" }, el("b", { text: `episode #${a.t.episode}` }),
    ` (${samples.length} conversations sampled into the log): `, ...steps.flat());
}

function renderDetail(a) {
  const { t } = a, run = RUNS[a.r];
  const box = document.getElementById("detail");
  const mode = colorMode(t, state.mode);
  const head = el("div", { class: "head" },
    RUNS.length > 1 ? el("span", {}, el("span", { class: "swatch", style: `background:${runColor(a.r)}` }), run.name) : null,
    el("span", {}, el("b", { text: "step " }), String(t.step), ` (${t.split})`),
    el("span", {}, el("b", { text: "group " }), t.group_id),
    t.role ? el("span", {}, el("b", { text: "role " }), t.role) : null,
    el("span", {}, el("b", { text: "task " }), t.task_id),
    el("span", {}, el("b", { text: "reward " }), fmt(t.reward)),
    el("span", {}, el("b", { text: "step rewards " }), t.step_rewards.map((r) => fmt(r)).join(", ") || "—"),
    el("span", { class: t.success >= 1 ? "ok" : "bad" }, t.success >= 1 ? "success" : "failure"),
    el("span", { text: t.terminated ? "terminated" : t.truncated ? "truncated (a budget cut it)" : "" }),
    el("span", {}, el("b", { text: "tokens " }), `${t.ids.length} (${t.mask.reduce((s, m) => s + m, 0)} sampled)`),
    el("span", {}, el("b", { text: "policy version " }), String(t.policy_version)),
    t.trained === null ? null : el("span", { text: t.trained ? "trained on" : "not trained on (filtered)" }));
  const peers = ALL.filter((b) => b.r === a.r && b.t.step === t.step && b.t.split === t.split && b.t.group_id === t.group_id);
  const peerBox = peers.length > 1 ? el("div", { class: "peers note" }, "group: ",
    peers.map((b) => el("a", { class: b === a ? "current" : "", onclick: () => openTrajectory(b),
      text: `#${b.t.episode}${b.t.sample ? "." + b.t.sample : ""}${b.t.role ? " " + b.t.role : ""}`
        + ` r=${fmt(b.t.reward, 2)}` }))) : null;
  const rolesBox = t.role ? renderRoles(a, peers) : null;
  const treeBox = t.tree ? renderTree(a, peers) : null;
  const legend = el("div", { class: "legend" }, mode.legend);
  const tokens = el("div", { class: "tokens", id: "tokens" });
  // segments: prompt, then each turn and the observation after it
  const prompt = el("details", { class: "seg prompt" },
    el("summary", { text: `prompt (${t.prompt_length} tokens, loss mask 0)` }));
  prompt.appendChild(tokenSpans(a, 0, t.prompt_length, mode.color));
  tokens.appendChild(prompt);
  let cursor = t.prompt_length;
  t.turns.forEach((turn, k) => {
    const [s, e] = turn.span;
    if (s > cursor) {  // tokens between segments (none in multi-turn rollouts)
      tokens.appendChild(el("div", { class: "seg" }, tokenSpans(a, cursor, s, mode.color)));
    }
    const shared = t.tree && k < t.tree.shared_turns ? ` · copied from leaf ${t.tree.parent}` : "";
    const title = el("div", { class: "title" }, `turn ${k + 1} · tokens ${s}–${e}${shared}`,
      turn.reward === null || turn.reward === undefined ? "" : ` · step reward ${fmt(turn.reward)}`,
      actionBadge(turn.action));
    const seg = el("div", { class: "seg turn", "data-turn": k }, title);
    seg.appendChild(tokenSpans(a, s, e, mode.color));
    tokens.appendChild(seg);
    cursor = e;
    if (turn.obs) {
      const [os, oe] = turn.obs;
      const obs = el("details", { class: "seg obs", open: true },
        el("summary", { text: `observation (${oe - os} tokens, loss mask 0)` }));
      obs.appendChild(tokenSpans(a, os, oe, mode.color));
      tokens.appendChild(obs);
      cursor = oe;
    }
  });
  if (cursor < t.ids.length) tokens.appendChild(el("div", { class: "seg" }, tokenSpans(a, cursor, t.ids.length, mode.color)));
  box.replaceChildren(head, peerBox || "", rolesBox || "", treeBox || "", legend, mode.note ? el("p", { class: "note", text: mode.note }) : "", tokens);
}

function setupTooltip() {
  const tip = el("div", { class: "tip" });
  document.body.appendChild(tip);
  document.addEventListener("mouseover", (event) => {
    const span = event.target.closest && event.target.closest(".tok");
    if (!span || !state.selected) { tip.style.display = "none"; return; }
    const { t } = state.selected, i = Number(span.dataset.i);
    const lines = [`#${i} id ${t.ids[i]} ${JSON.stringify(span.textContent)}`,
      `loss mask ${t.mask[i]}${t.train_mask ? ` (trained: ${t.train_mask[i]})` : ""}`];
    if (t.mask[i]) {
      lines.push(`behaviour logprob ${fmt(t.lp[i])}`);
      if (t.learner_lp) lines.push(`learner logprob ${fmt(t.learner_lp[i])}  (drift ${fmt(t.lp[i] - t.learner_lp[i])})`);
      if (t.ref_lp) lines.push(`reference logprob ${fmt(t.ref_lp[i])}`);
      if (t.adv) lines.push(`advantage ${fmt(t.adv[i])}`);
      if (t.versions) lines.push(`policy version ${t.versions[i]}`);
    }
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
  });
  document.addEventListener("mousemove", (event) => {
    tip.style.left = `${event.clientX + 12}px`;
    tip.style.top = `${event.clientY + 14}px`;
  });
}

// ----------------------------------------------------------------------------------------------

renderRuns();
setupCurves();
renderEvals();
renderConfig();
setupExplorer();
setupTooltip();
document.body.dataset.ready = "1";
