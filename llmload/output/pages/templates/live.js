// llmload: charts over time under the LLM tab of the Locust web UI.
// Self-contained (no library, no network beyond this Locust web UI): polls /llmload/live.json
// (llmload.livehistory) and draws four SVG line charts while the LLM tab is open. Locust's
// extended tabs can only show a table, so this script puts its own section right after that
// table while the URL says ?tab=llm (moving it back there whenever the UI re-renders).
(function () {
  "use strict";
  var TAB = "llm", POLL_MS = 2000, NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7"];
  var PANELS = [
    {key: "tok", title: "Output tok/s (last 10 s, by token arrival)", unit: "",
     lines: [{key: "output_tok_s", name: "output tok/s"}]},
    {key: "ttft", title: "TTFT (ms, requests ended in the last 10 s)", unit: " ms",
     lines: [{key: "ttft_p50_ms", name: "p50"}, {key: "ttft_p99_ms", name: "p99", dash: "5 4"}]},
    {key: "tbt", title: "Time between tokens (ms)", unit: " ms",
     lines: [{key: "tbt_p50_ms", name: "p50"}, {key: "tbt_p99_ms", name: "p99", dash: "5 4"}]},
    {key: "users", title: "Requests in flight (users)", unit: "",
     lines: [{key: "users", name: "in flight"}]}
  ];
  var section = null, timer = null, last = null;

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function fmt(v) {
    if (v >= 100 || Math.abs(v - Math.round(v)) < 1e-9) return Math.round(v).toLocaleString("en-US");
    if (v >= 10) return v.toFixed(1);
    return v.toPrecision(2).replace(/\.?0+$/, "");
  }

  function clock(s) {
    s = Math.max(0, Math.round(s));
    return Math.floor(s / 60) + ":" + ("0" + (s % 60)).slice(-2);
  }

  // The top of the y axis: four gridline steps of 1, 2, 2.5 or 5 × a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 4;
    var s = v / 4, p = Math.pow(10, Math.floor(Math.log10(s))), m = s / p;
    return 4 * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }

  function draw(host, panel, points) {
    var W = 560, H = 230, L = 64, R = 12, T = 30, B = 30;
    host.textContent = "";
    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, "class": "llmload-svg", role: "img",
                         "data-chart": panel.key, "aria-label": panel.title}, host);
    var title = el("text", {x: L, y: 16, "font-size": 13, "font-weight": "bold", fill: "currentColor"}, svg);
    title.textContent = panel.title;
    var t0 = points.length ? points[0].t : 0;
    var tmax = points.length ? Math.max(points[points.length - 1].t - t0, 10) : 10;
    var ymax = 0;
    panel.lines.forEach(function (ln) {
      points.forEach(function (p) { if (p[ln.key] != null && p[ln.key] > ymax) ymax = p[ln.key]; });
    });
    ymax = niceMax(ymax * 1.02);
    var x = function (t) { return L + (t - t0) / tmax * (W - L - R); };
    var y = function (v) { return H - B - v / ymax * (H - T - B); };
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4, yy = y(v);
      el("line", {x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#8884", "stroke-width": 1}, svg);
      var lab = el("text", {x: L - 6, y: yy + 4, "text-anchor": "end", "font-size": 11, fill: "currentColor"}, svg);
      lab.textContent = fmt(v) + (i ? panel.unit : "");
    }
    for (var j = 0; j <= 4; j++) {
      var tt = tmax * j / 4, xl = el("text", {x: x(t0 + tt), y: H - 10, "text-anchor": "middle",
                                              "font-size": 11, fill: "currentColor"}, svg);
      xl.textContent = clock(tt);
    }
    panel.lines.forEach(function (ln, k) {
      var colour = PALETTE[k % PALETTE.length], d = "", pen = false;
      points.forEach(function (p) {
        var v = p[ln.key];
        if (v == null) { pen = false; return; }
        d += (pen ? "L" : "M") + x(p.t).toFixed(1) + "," + y(v).toFixed(1);
        pen = true;
      });
      if (d) {
        var path = el("path", {d: d, fill: "none", stroke: colour, "stroke-width": 2,
                               "class": "llmload-line", "data-series": ln.key}, svg);
        if (ln.dash) path.setAttribute("stroke-dasharray", ln.dash);
      }
      var lx = W - R - 90 * (panel.lines.length - k);
      el("line", {x1: lx, x2: lx + 22, y1: 12, y2: 12, stroke: colour, "stroke-width": 2,
                  "stroke-dasharray": ln.dash || ""}, svg);
      var lt = el("text", {x: lx + 27, y: 16, "font-size": 11, fill: "currentColor"}, svg);
      lt.textContent = ln.name;
    });
  }

  function render(data) {
    last = data;
    var pts = (data && data.points) || [];
    var note = section.querySelector(".llmload-note");
    note.textContent = pts.length ? pts.length + " points, one every " + data.interval_s + " s"
      : "No points yet: they start with the first request that ends while users run.";
    PANELS.forEach(function (panel) {
      draw(section.querySelector('[data-panel="' + panel.key + '"]'), panel, pts);
    });
  }

  function poll() {
    fetch("/llmload/live.json", {cache: "no-store"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) { if (d) render(d); })
      .catch(function () {});
  }

  function build() {
    section = document.createElement("section");
    section.id = "llmload-live";
    section.style.cssText = "display:none;padding:8px 24px 32px;font-family:Roboto,Helvetica,Arial,sans-serif;";
    var h = document.createElement("h2");
    h.textContent = "LLM figures over time";
    h.style.cssText = "font-size:1.25rem;font-weight:500;margin:8px 0 2px;";
    var note = document.createElement("div");
    note.className = "llmload-note";
    note.style.cssText = "opacity:.7;font-size:.85rem;margin-bottom:6px;";
    var grid = document.createElement("div");
    grid.style.cssText = "display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:12px;";
    PANELS.forEach(function (panel) {
      var box = document.createElement("div");
      box.className = "llmload-chart";
      box.setAttribute("data-panel", panel.key);
      box.style.cssText = "border:1px solid #8884;border-radius:6px;padding:6px;";
      grid.appendChild(box);
    });
    section.appendChild(h);
    section.appendChild(note);
    section.appendChild(grid);
    render(last);
  }

  function llmTable() {
    var heads = document.querySelectorAll("th");
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].textContent.trim() === "LLM figure") {
        return heads[i].closest(".MuiTableContainer-root") || heads[i].closest("table");
      }
    }
    return null;
  }

  function onLlmTab() {
    return new URLSearchParams(window.location.search).get("tab") === TAB;
  }

  function sync() {
    if (!section) build();
    var table = onLlmTab() ? llmTable() : null, show = !!table;
    if (show && table.nextSibling !== section) table.insertAdjacentElement("afterend", section);
    section.style.display = show ? "block" : "none";
    if (show && !timer) { poll(); timer = setInterval(poll, POLL_MS); }
    if (!show && timer) { clearInterval(timer); timer = null; }
  }

  // The UI changes tabs with history.pushState (no event): look at the URL twice a second.
  setInterval(sync, 500);
  window.addEventListener("popstate", sync);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", sync);
  else sync();
})();
