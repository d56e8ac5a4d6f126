"""Runs -> one self-contained HTML file: the data as a JSON block, plotly.js (from the `plotly`
package, `pip install agentic-rl[report]`) and the page's own script and style inlined, so the
file opens anywhere without a network."""

from __future__ import annotations

import html
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from agentic_rl.report.data import ReportError, load_run

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header>
  <h1>{title}</h1>
  <div class="meta">agentic-rl report · generated {generated} · self-contained: no network needed</div>
</header>
<nav>
  <a href="#sec-runs">Runs</a><a href="#sec-curves">Curves</a><a href="#sec-evals">Evaluations</a>
  <a href="#sec-trajectories">Trajectories</a><a href="#sec-config">Config</a>
</nav>
<section id="sec-runs"><h2>Runs</h2><div id="runs"></div></section>
<section id="sec-curves">
  <h2>Curves</h2>
  <div class="controls">
    <span><label for="smoothing">smoothing</label>
      <select id="smoothing"><option value="0">none</option><option value="0.6">0.6</option>
        <option value="0.9">0.9</option><option value="0.97">0.97</option></select></span>
    <span><label for="curve-layout">compare runs</label>
      <select id="curve-layout"><option value="overlay">overlaid</option>
        <option value="side">side by side</option></select></span>
  </div>
  <p class="note">x: the RL step. Dashed: evaluations on the held-out tasks (open markers: before RL
    and after the warm start, at step 0). Drag to zoom, double-click to reset.</p>
  <div id="curves" class="grid"></div>
  <p id="curves-missing" class="note"></p>
  <div class="controls"><label for="any-metric">any metric</label><select id="any-metric"></select></div>
  <div id="any-curve" class="curve"></div>
</section>
<section id="sec-evals"><h2>Evaluations</h2><div id="evals"></div></section>
<section id="sec-trajectories">
  <h2>Trajectories</h2>
  <div id="explorer">
    <div class="controls">
      <span><label for="f-run">run</label> <select id="f-run"><option value="">all runs</option></select></span>
      <span><label for="f-split">split</label> <select id="f-split"><option value="">all</option></select></span>
      <span><label for="f-step">step</label> <select id="f-step"></select></span>
      <span><label for="f-role">role</label> <select id="f-role"><option value="">all</option></select></span>
      <span><label for="f-group">group</label>
        <input id="f-group" list="groups" placeholder="group id contains"><datalist id="groups"></datalist></span>
      <span><label for="f-rmin">reward</label> <input id="f-rmin" type="number" step="any" placeholder="min">
        <input id="f-rmax" type="number" step="any" placeholder="max"></span>
      <span><label for="f-success">success</label> <select id="f-success"><option value="">any</option>
        <option value="1">yes</option><option value="0">no</option></select></span>
      <span><label for="f-trained">trained on</label> <select id="f-trained"><option value="">any</option>
        <option value="true">yes</option><option value="false">no (filtered)</option></select></span>
    </div>
    <p id="sampled-note" class="note"></p>
    <div class="explorer">
      <div>
        <div class="list"><table>
          <thead id="traj-head"><tr><th></th><th>step</th><th class="l">split</th><th class="l">group</th>
            <th>reward</th><th>success</th><th>turns</th><th>tokens</th><th>trained</th></tr></thead>
          <tbody id="traj-body"></tbody></table></div>
        <div class="pager"><button id="prev">◀</button><button id="next">▶</button><span id="page"></span></div>
      </div>
      <div>
        <div class="controls" id="color-modes">colour tokens by:
          <label><input type="radio" name="color" value="mask" checked> loss mask</label>
          <label><input type="radio" name="color" value="advantage"> advantage</label>
          <label><input type="radio" name="color" value="logprob"> logprob</label>
          <label><input type="radio" name="color" value="drift"> behaviour vs learner</label>
          <label><input type="radio" name="color" value="version"> policy version</label>
        </div>
        <div id="detail" class="detail"><p class="note">Click a trajectory to open it.</p></div>
      </div>
    </div>
  </div>
</section>
<section id="sec-config"><h2>Config</h2><div id="config"></div></section>
<script id="report-data" type="application/json">{data}</script>
<script>{plotly}</script>
<script>{app}</script>
</body>
</html>
"""


def plotly_js() -> str:
    """plotly.js, from the `plotly` Python package (imported only here)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as err:
        raise ReportError(
            "the report needs plotly (its plotly.js is inlined): pip install 'agentic-rl[report]'"
        ) from err
    return get_plotlyjs()


def _asset(name: str) -> str:
    return resources.files("agentic_rl.report").joinpath("assets", name).read_text("utf-8")


def _script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no "</script>" or "<!--" can appear."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_report(runs: list[dict[str, Any]], title: str = "") -> str:
    """The HTML page for runs loaded with `data.load_run`."""
    title = title or "agentic-rl report: " + ", ".join(run["name"] for run in runs)
    data = {"title": title, "runs": runs}
    # A script body ends at "</script"; plotly.js and ours never contain it, but check.
    scripts = [plotly_js(), _asset("report.js")]
    if any("</script" in s.lower() for s in scripts):
        raise ReportError("an inlined script contains '</script': cannot inline it")
    return _PAGE.format(
        title=html.escape(title),
        generated=time.strftime("%Y-%m-%d %H:%M"),
        css=_asset("report.css"),
        data=_script_json(data),
        plotly=scripts[0],
        app=scripts[1],
    )


def _unique_names(paths: list[Path]) -> list[str]:
    """Run names for the legend: the directory names, with parents added where they clash."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


def write_report(
    run_dirs: list[Path], out: Path, max_trajectories: int = 400, title: str = ""
) -> Path:
    """Write the report of `run_dirs` to `out`; `max_trajectories` per run (sampled)."""
    paths = [Path(p) for p in run_dirs]
    names = _unique_names([p.resolve() for p in paths])
    runs = [load_run(p, max_trajectories, name) for p, name in zip(paths, names, strict=True)]
    page = render_report(runs, title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
