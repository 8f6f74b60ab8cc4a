"""The HTML timeline: one self-contained page (Note [Self-contained pages]) that zooms from the whole trace
down to single ops, with every op named."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from ._common import BASE_STYLE, PathLike, check_output, escape, format_us, page, write_text
from ._trace_model import KERNEL_ALT, KIND_COLOURS, OTHER_COLOUR, Timeline, load_trace, window_us


def _data(timeline: Timeline, title: str) -> Dict[str, Any]:
    """The page's data: names and argument sets interned, each row's items as parallel arrays."""
    names: Dict[str, int] = {}
    kinds: Dict[str, int] = {}
    args_table: Dict[str, int] = {}
    lanes = []
    for lane in timeline.lanes:
        rows = []
        for row in lane.rows:
            ts, dur, name, kind, arg = [], [], [], [], []
            for item in row:
                ts.append(item.start)
                dur.append(item.dur)
                name.append(names.setdefault(item.name, len(names)))
                kind.append(kinds.setdefault(item.kind, len(kinds)))
                shown = {k: v for k, v in item.args.items() if k != "stream"}  # the lane already says it
                key = json.dumps(shown, sort_keys=True, default=str) if shown else ""
                arg.append(args_table.setdefault(key, len(args_table)) if key else -1)
            rows.append({"ts": ts, "dur": dur, "n": name, "k": kind, "a": arg})
        lanes.append({"label": lane.label, "rows": rows})
    return {
        "title": title,
        "names": list(names),
        "kinds": list(kinds),
        "colours": {k: KIND_COLOURS.get(k, OTHER_COLOUR) for k in kinds},
        "kernelAlt": KERNEL_ALT,
        "args": [json.loads(k) for k in args_table],
        "lanes": lanes,
        "t0": timeline.start,
        "t1": timeline.end,
    }


def _op_table(timeline: Timeline) -> str:
    """Every op of the trace with its count and device time, longest total first."""
    totals: Dict[Tuple[str, str], List[float]] = {}
    for item in timeline.items:
        entry = totals.setdefault((item.name, item.kind), [0, 0.0])
        entry[0] += 1
        entry[1] += item.dur
    busy = sum(t for _, t in totals.values()) or 1.0
    rows = []
    for (name, kind), (count, total) in sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0])):
        rows.append(f"<tr><td>{escape(name)}</td><td>{escape(kind.replace('_', ' '))}</td>"
                    f"<td class=num>{int(count)}</td><td class=num>{escape(format_us(total))}</td>"
                    f"<td class=num>{escape(format_us(total / count))}</td>"
                    f"<td class=num>{100 * total / busy:.1f}%</td></tr>")
    return ("<table id=ops><thead><tr><th>op</th><th>kind</th><th class=num>count</th><th class=num>total</th>"
            "<th class=num>mean</th><th class=num>share of busy time</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


_STYLE = BASE_STYLE + """
#wrap { position: relative; border-bottom: 1px solid #ddd; }
#ov { border-bottom: 1px solid #ddd; cursor: pointer; }
#tl { cursor: grab; }
#tl.dragging { cursor: grabbing; }
#ops td:first-child { font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
kbd { border: 1px solid #bbb; border-radius: 3px; padding: 0 3px; font-size: 11px; background: #fff; }
"""

_SCRIPT = r"""
"use strict";
(function () {
const D = JSON.parse(document.getElementById("data").textContent);
const tl = document.getElementById("tl"), ov = document.getElementById("ov");
const ctx = tl.getContext("2d"), octx = ov.getContext("2d");
const tip = document.getElementById("tip"), details = document.getElementById("details");
const range = document.getElementById("range"), search = document.getElementById("search");
const found = document.getElementById("found");
const LABEL_W = 210, AXIS_H = 26, ROW_H = 20, LANE_GAP = 7, OV_ROW = 5, FONT = "11px system-ui, sans-serif";
const t0 = D.t0, t1 = Math.max(D.t1, D.t0 + 1e-3);
const full = t1 - t0;

// Layout: every row of every lane gets a band ROW_H high, and below it, when names are written under
// the bars, a strip NAMES_H high for the names of bars too narrow to hold theirs. Items of a row are
// sorted and disjoint, so their ends are sorted too and both ends of the visible part are found by
// binary search.
const NAMES_H = 104;
const rows = [];
D.lanes.forEach(function (lane, li) {
  lane.rows.forEach(function (r) {
    r.lane = li; r.end = r.ts.map(function (t, i) { return t + r.dur[i]; });
    rows.push(r);
  });
});
const namesBox = document.getElementById("names");
namesBox.checked = rows.length <= 6;  // on by default where it keeps the page short
let HEIGHT = 0, STRIP = 0;
function layout() {
  STRIP = namesBox.checked ? NAMES_H : 0;
  let y = AXIS_H + 4;
  D.lanes.forEach(function (lane) {
    lane.y0 = y;
    lane.rows.forEach(function (r) { r.y = y; y += ROW_H + STRIP; });
    lane.y1 = y; y += LANE_GAP;
  });
  HEIGHT = Math.max(y, AXIS_H + 60);
}
layout();
const OV_H = Math.max(12, Math.min(D.lanes.length, 16) * OV_ROW + 6);

let v0 = t0 - full * 0.01, v1 = t1 + full * 0.01;   // the visible window, µs
if (D.view) { v0 = D.view[0]; v1 = D.view[1]; }      // window_ms: the page opens on it
let match = null;                                      // name index -> matches the search
let hover = null, selected = null, drag = null;
const widthCache = new Map();

function plotW() { return tl.clientWidth - LABEL_W - 8; }
function X(t) { return LABEL_W + (t - v0) / (v1 - v0) * plotW(); }
function T(x) { return v0 + (x - LABEL_W) / plotW() * (v1 - v0); }

function fmt(us) {
  const a = Math.abs(us);
  if (a === 0) return "0";
  if (a < 1) return +(us * 1e3).toPrecision(4) + " ns";
  if (a < 1e3) return +us.toPrecision(5) + " µs";
  if (a < 1e6) return +(us / 1e3).toPrecision(5) + " ms";
  return +(us / 1e6).toPrecision(5) + " s";
}
function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toPrecision(3) : n) + " " + u[i];
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"}[c];
  });
}
function lowerBound(a, v) {  // the first index with a[i] >= v
  let lo = 0, hi = a.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < v) lo = m + 1; else hi = m; }
  return lo;
}
function upperBound(a, v) {  // the first index with a[i] > v
  let lo = 0, hi = a.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] <= v) lo = m + 1; else hi = m; }
  return lo;
}

function fillOf(r, i) {
  const kind = D.kinds[r.k[i]];
  return kind === "kernel" && (i & 1) ? D.kernelAlt : D.colours[kind];
}
function textOn(hex) {
  const r = parseInt(hex.substr(1, 2), 16), g = parseInt(hex.substr(3, 2), 16), b = parseInt(hex.substr(5, 2), 16);
  return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#000" : "#fff";
}
function nameWidth(n) {
  let w = widthCache.get(n);
  if (w === undefined) { w = ctx.measureText(D.names[n]).width; widthCache.set(n, w); }
  return w;
}
function fitName(n, room) {
  let name = D.names[n];
  if (nameWidth(n) <= room) return name;
  // an ATen op's name without its "aten::" says which op it is in less room
  if (name.startsWith("aten::")) name = name.slice(6);
  const full = ctx.measureText(name).width;
  if (full <= room) return name;
  let k = Math.floor(name.length * room / full) - 1;
  while (k >= 3) { const s = name.slice(0, k) + "…"; if (ctx.measureText(s).width <= room) return s; k--; }
  return "";
}

function niceStep(span, px) {
  const raw = span / Math.max(1, px / 110), p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
function axisUnit(step) {
  if (step >= 1e5) return ["s", 1e6];
  if (step >= 100) return ["ms", 1e3];
  if (step >= 0.1) return ["µs", 1];
  return ["ns", 1e-3];
}

function resize() {
  const dpr = window.devicePixelRatio || 1, w = document.body.clientWidth;
  for (const [c, h] of [[tl, HEIGHT], [ov, OV_H]]) {
    c.style.width = w + "px"; c.style.height = h + "px";
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    c.getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
  }
  buildOverview(); draw();
}

// The overview strip: how busy each lane is along the whole trace, and where the view is.
let ovImage = null;
function buildOverview() {
  const w = ov.clientWidth - LABEL_W - 8, bins = Math.max(1, Math.floor(w));
  const lanes = D.lanes.slice(0, 16);
  ovImage = lanes.map(function (lane) {
    const busy = new Float64Array(bins), bw = full / bins;
    lane.rows.forEach(function (r) {
      for (let i = 0; i < r.ts.length; i++) {
        let a = (r.ts[i] - t0) / bw, b = (r.end[i] - t0) / bw;
        if (b - a < 0.3) b = a + 0.3;    // a short item still shows as a trace of ink
        for (let k = Math.max(0, Math.floor(a)); k < Math.min(bins, Math.ceil(b)); k++)
          busy[k] += Math.min(b, k + 1) - Math.max(a, k);
      }
    });
    return busy;
  });
}
function drawOverview() {
  const w = ov.clientWidth;
  octx.clearRect(0, 0, w, OV_H);
  octx.fillStyle = "#fafafa"; octx.fillRect(0, 0, w, OV_H);
  octx.fillStyle = "#555"; octx.font = FONT; octx.textBaseline = "middle";
  octx.fillText("whole trace (click to go there)", 8, OV_H / 2);
  ovImage.forEach(function (busy, li) {
    for (let k = 0; k < busy.length; k++) {
      if (!busy[k]) continue;
      octx.fillStyle = "rgba(76,114,176," + Math.min(1, 0.25 + busy[k]) + ")";
      octx.fillRect(LABEL_W + k, 3 + li * OV_ROW, 1, OV_ROW - 1);
    }
  });
  const pw = w - LABEL_W - 8, a = LABEL_W + (v0 - t0) / full * pw, b = LABEL_W + (v1 - t0) / full * pw;
  octx.strokeStyle = "#C44E52"; octx.lineWidth = 1.5;
  octx.strokeRect(Math.max(LABEL_W, a), 1, Math.max(2, Math.min(b, LABEL_W + pw) - Math.max(LABEL_W, a)), OV_H - 2);
}

function draw() {
  const w = tl.clientWidth, pw = plotW();
  ctx.clearRect(0, 0, w, HEIGHT);
  ctx.font = FONT; ctx.textBaseline = "middle";
  // lane backgrounds and labels
  D.lanes.forEach(function (lane, li) {
    ctx.fillStyle = li % 2 ? "#ffffff" : "#f4f6fa";
    ctx.fillRect(0, lane.y0 - 3, w, lane.y1 - lane.y0 + 6);
    ctx.fillStyle = "#222";
    ctx.save(); ctx.beginPath(); ctx.rect(0, lane.y0 - 3, LABEL_W - 6, lane.y1 - lane.y0 + 6); ctx.clip();
    ctx.fillText(lane.label, 8, (lane.y0 + lane.y1) / 2);
    ctx.restore();
  });
  // grid and axis
  const step = niceStep(v1 - v0, pw), [unit, scale] = axisUnit(step);
  const digits = Math.max(0, -Math.floor(Math.log10(step / scale) + 1e-9));
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, w, AXIS_H);
  ctx.strokeStyle = "#e2e2e2"; ctx.lineWidth = 1; ctx.fillStyle = "#333"; ctx.textAlign = "center";
  for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
    const x = Math.round(X(t)) + 0.5;
    if (x < LABEL_W) continue;
    ctx.beginPath(); ctx.moveTo(x, AXIS_H - 5); ctx.lineTo(x, HEIGHT); ctx.stroke();
    const label = (t / scale).toFixed(Math.min(digits, 6)), half = ctx.measureText(label).width / 2;
    ctx.fillText(label, Math.min(x, w - half - 2), AXIS_H / 2);
  }
  ctx.textAlign = "left"; ctx.fillStyle = "#666";
  ctx.fillText(unit, 8, AXIS_H / 2);
  ctx.strokeStyle = "#bbb"; ctx.beginPath(); ctx.moveTo(0, AXIS_H + 0.5); ctx.lineTo(w, AXIS_H + 0.5); ctx.stroke();
  // items
  ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, AXIS_H + 1, pw, HEIGHT - AXIS_H); ctx.clip();
  for (const r of rows) drawRow(r);
  ctx.restore();
  writeHash();
  range.textContent = "showing " + fmt(Math.max(v0, t0) - t0) + " to " + fmt(Math.min(v1, t1) - t0) +
    " (" + fmt(v1 - v0) + " wide) of " + fmt(full);
  drawOverview();
}

function drawRow(r) {
  const lo = lowerBound(r.end, v0), hi = upperBound(r.ts, v1), top = r.y + 2, h = ROW_H - 4;
  const lineH = 12;
  let lastName = -1e9;  // right edge of the last name written under this row's bars
  // Items under a pixel wide are merged into runs, so a zoomed-out view of 100k items stays fast
  // and shows where work is dense.
  let runA = -1, runB = -1, runFill = null;
  function flush() {
    if (runFill) {
      ctx.globalAlpha = match ? 0.25 : 1; ctx.fillStyle = runFill; ctx.fillRect(runA, top, runB - runA, h);
    }
    runFill = null;
  }
  for (let i = lo; i < hi; i++) {
    const a = X(r.ts[i]), b = X(r.end[i]), fill = fillOf(r, i);
    if (b - a < 1.5) {
      if (runFill === fill && a <= runB + 0.5) { runB = Math.max(runB, a + 1); continue; }
      flush(); runA = a; runB = a + 1; runFill = fill; continue;
    }
    flush();
    const on = !match || match[r.n[i]];
    ctx.globalAlpha = on ? 1 : 0.2;
    ctx.fillStyle = fill; ctx.fillRect(a, top, b - a, h);
    const left = Math.max(a, LABEL_W), room = Math.min(b, LABEL_W + plotW()) - left - 6;
    const s = room > 14 ? fitName(r.n[i], room) : "";
    if (s) { ctx.fillStyle = textOn(fill); ctx.fillText(s, left + 3, top + h / 2 + 0.5); }
    else if (STRIP) {
      // Upright under its bar, pushed right of the previous name when they would touch (a thin line
      // joins it to its bar); left out when that is too far from the bar: zoom in to see it.
      const centre = (Math.max(a, LABEL_W) + Math.min(b, LABEL_W + plotW())) / 2;
      const at = Math.max(centre, lastName + 1 + lineH / 2);
      const name = at - centre <= 2 * lineH ? fitName(r.n[i], STRIP - 12) : "";
      if (name) {
        const y0 = r.y + ROW_H + 4;
        if (at > centre + 0.5) {
          ctx.strokeStyle = "#999"; ctx.lineWidth = 0.8;
          ctx.beginPath(); ctx.moveTo(centre, top + h); ctx.lineTo(at, y0); ctx.stroke();
        }
        ctx.save(); ctx.translate(at, y0); ctx.rotate(Math.PI / 2);
        ctx.fillStyle = "#222"; ctx.fillText(name, 0, 0); ctx.restore();
        lastName = at + lineH / 2;
      }
    }
  }
  flush();
  ctx.globalAlpha = 1;
  if (match) {  // matches stay visible however narrow: a tick per match
    ctx.fillStyle = "#111";
    for (let i = lo; i < hi; i++) if (match[r.n[i]]) {
      const a = X(r.ts[i]), b = X(r.end[i]);
      if (b - a < 1.5) ctx.fillRect(a, top, 1.5, h);
    }
  }
  for (const it of [hover, selected]) {
    if (it && it.r === r) {
      const a = X(r.ts[it.i]), b = Math.max(X(r.end[it.i]), a + 1.5);
      ctx.strokeStyle = it === selected ? "#C44E52" : "#000"; ctx.lineWidth = 2;
      ctx.strokeRect(a - 1, top - 1, b - a + 2, h + 2);
    }
  }
}

function itemAt(px, py) {
  const r = rows.find(function (r) { return py >= r.y && py < r.y + ROW_H + STRIP; });
  if (!r || px < LABEL_W) return null;
  const t = T(px), tol = 4 * (v1 - v0) / plotW();
  let i = upperBound(r.ts, t) - 1;
  if (i >= 0 && r.end[i] >= t) return {r: r, i: i};
  // nothing under the cursor: the nearest item within a few pixels (a short item is hard to hit)
  let best = null, bestD = tol;
  for (const j of [i, i + 1]) {
    if (j < 0 || j >= r.ts.length) continue;
    const d = t < r.ts[j] ? r.ts[j] - t : t - r.end[j];
    if (d <= bestD) { best = {r: r, i: j}; bestD = d; }
  }
  return best;
}

function describe(it) {
  const r = it.r, i = it.i, lane = D.lanes[r.lane];
  const kv = [["kind", D.kinds[r.k[i]].replace(/_/g, " ")], ["lane", lane.label],
              ["start", fmt(r.ts[i] - t0)], ["duration", fmt(r.dur[i])], ["end", fmt(r.end[i] - t0)]];
  if (i > 0) kv.push(["idle before it", fmt(Math.max(0, r.ts[i] - r.end[i - 1]))]);
  const args = r.a[i] >= 0 ? D.args[r.a[i]] : {};
  for (const k in args) kv.push([k, k === "bytes" ? fmtBytes(args[k]) + " (" + args[k] + ")" : String(args[k])]);
  return "<b>" + esc(D.names[r.n[i]]) + "</b><div class=kv>" +
    kv.map(function (p) { return "<span>" + esc(p[0]) + "</span><span>" + esc(p[1]) + "</span>"; }).join("") + "</div>";
}

function zoomAt(px, factor) {
  const t = T(px);
  let span = (v1 - v0) * factor;
  span = Math.min(Math.max(span, 1e-3), full * 1.5);
  v0 = t - (px - LABEL_W) / plotW() * span; v1 = v0 + span;
  clampView(); draw();
}
function clampView() {
  const span = v1 - v0, lo = t0 - full * 0.25, hi = t1 + full * 0.25;
  if (v0 < lo) { v0 = lo; v1 = lo + span; }
  if (v1 > hi) { v1 = hi; v0 = hi - span; }
}
function pan(dpx) { const dt = dpx / plotW() * (v1 - v0); v0 += dt; v1 += dt; clampView(); draw(); }
function fit() { v0 = t0 - full * 0.01; v1 = t1 + full * 0.01; draw(); }
function showTip(e, html) {
  tip.innerHTML = html; tip.style.display = "block";
  const r = tip.getBoundingClientRect();
  let x = e.clientX + 14, yy = e.clientY + 14;
  if (x + r.width > window.innerWidth - 4) x = e.clientX - r.width - 14;
  if (yy + r.height > window.innerHeight - 4) yy = e.clientY - r.height - 14;
  tip.style.left = Math.max(4, x) + "px"; tip.style.top = Math.max(4, yy) + "px";
}

tl.addEventListener("wheel", function (e) {
  e.preventDefault();
  const rect = tl.getBoundingClientRect(), px = Math.max(LABEL_W, e.clientX - rect.left);
  if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) pan(e.shiftKey ? e.deltaY : e.deltaX);
  else zoomAt(px, Math.exp(e.deltaY * (e.deltaMode === 1 ? 0.05 : 0.0015)));
}, {passive: false});
tl.addEventListener("mousedown", function (e) {
  drag = {x: e.clientX, v0: v0, v1: v1, moved: false}; tl.classList.add("dragging");
});
window.addEventListener("mouseup", function (e) {
  if (drag && !drag.moved) {
    const rect = tl.getBoundingClientRect(), it = itemAt(e.clientX - rect.left, e.clientY - rect.top);
    if (e.target === tl) { selected = it; details.innerHTML = it ? describe(it) : ""; draw(); }
  }
  drag = null; tl.classList.remove("dragging");
});
window.addEventListener("mousemove", function (e) {
  if (drag) {
    const dx = e.clientX - drag.x;
    if (Math.abs(dx) > 2) drag.moved = true;
    const dt = dx / plotW() * (drag.v1 - drag.v0);
    v0 = drag.v0 - dt; v1 = drag.v1 - dt; clampView(); tip.style.display = "none"; draw(); return;
  }
  if (e.target !== tl) { if (hover) { hover = null; draw(); } tip.style.display = "none"; return; }
  const rect = tl.getBoundingClientRect(), it = itemAt(e.clientX - rect.left, e.clientY - rect.top);
  const same = hover && it && hover.r === it.r && hover.i === it.i;
  if (!same) { hover = it; draw(); }
  if (it) showTip(e, describe(it)); else tip.style.display = "none";
});
tl.addEventListener("dblclick", function (e) {
  const rect = tl.getBoundingClientRect(), it = itemAt(e.clientX - rect.left, e.clientY - rect.top);
  if (!it) return;
  const a = it.r.ts[it.i], d = Math.max(it.r.dur[it.i], 1e-3);
  v0 = a - d * 2; v1 = a + d * 3; draw();
});
ov.addEventListener("click", function (e) {
  const rect = ov.getBoundingClientRect(), pw = ov.clientWidth - LABEL_W - 8;
  const t = t0 + (e.clientX - rect.left - LABEL_W) / pw * full, span = v1 - v0;
  v0 = t - span / 2; v1 = t + span / 2; clampView(); draw();
});
window.addEventListener("keydown", function (e) {
  if (e.target === search) return;
  const mid = LABEL_W + plotW() / 2;
  if (e.key === "+" || e.key === "=" || e.key === "w") zoomAt(mid, 0.6);
  else if (e.key === "-" || e.key === "s") zoomAt(mid, 1 / 0.6);
  else if (e.key === "ArrowLeft" || e.key === "a") pan(-plotW() / 5);
  else if (e.key === "ArrowRight" || e.key === "d") pan(plotW() / 5);
  else if (e.key === "0" || e.key === "f") fit();
});
document.getElementById("fit").onclick = fit;
namesBox.addEventListener("change", function () { layout(); resize(); });
document.getElementById("zin").onclick = function () { zoomAt(LABEL_W + plotW() / 2, 0.5); };
document.getElementById("zout").onclick = function () { zoomAt(LABEL_W + plotW() / 2, 2); };
search.addEventListener("input", function () {
  const q = search.value.trim().toLowerCase();
  if (!q) { match = null; found.textContent = ""; draw(); return; }
  match = D.names.map(function (n) { return n.toLowerCase().indexOf(q) >= 0; });
  let count = 0, total = 0;
  for (const r of rows) for (let i = 0; i < r.n.length; i++) if (match[r.n[i]]) { count++; total += r.dur[i]; }
  found.textContent = count + " items, " + fmt(total) + " in total";
  draw();
});
// The view and the search live in the address's fragment (#v=<start µs>,<end µs>&q=<text>), so a
// link or a bookmark reopens the same view.
function readHash() {
  const h = new URLSearchParams(location.hash.slice(1)), v = (h.get("v") || "").split(",").map(Number);
  if (v.length === 2 && isFinite(v[0]) && isFinite(v[1]) && v[1] > v[0]) { v0 = v[0]; v1 = v[1]; }
  if (h.get("q")) search.value = h.get("q");
}
let hashTimer = null;
function writeHash() {
  clearTimeout(hashTimer);
  hashTimer = setTimeout(function () {
    const q = search.value.trim();
    const hash = "#v=" + +v0.toPrecision(9) + "," + +v1.toPrecision(9) + (q ? "&q=" + encodeURIComponent(q) : "");
    try { history.replaceState(null, "", hash); } catch (e) { /* refused for a local file: works without */ }
  }, 300);
}
window.addEventListener("resize", resize);
readHash();
resize();
if (search.value) search.dispatchEvent(new Event("input"));
})();
"""


def timeline_html(trace: PathLike, html: PathLike, title: Optional[str] = None, *,
                  window_ms: Optional[Tuple[float, float]] = None) -> str:
    """Writes the trace at ``trace`` (Chrome trace JSON from ``torch.openreg.trace``) as one self-contained
    HTML page at ``html`` that needs no network: a lane per device and stream (and the communication
    lane of torch.distributed), a time axis, the mouse wheel zooms around the pointer down to single ops,
    dragging pans, op names are written on every bar wide enough and shown with start, duration, bytes
    and the idle time before it on hover; a strip above shows the whole trace and where the view is; a
    search box highlights ops by name; a table lists every op with its count and device time.
    ``window_ms=(start, end)``: the page opens on that part of the trace (ms from its start).
    Returns the path written."""
    view = window_us(window_ms) if window_ms is not None else None  # a bad window fails before any work
    out = check_output(html, "torch.openreg.viz.timeline_html")
    timeline = load_trace(trace)
    title = title or os.path.basename(timeline.path)
    n_items = len(timeline.items)
    legend = "".join(f"<span><span class=chip style=\"background:{KIND_COLOURS.get(k, OTHER_COLOUR)}\"></span>"
                     f"{escape(k.replace('_', ' '))}</span>" for k in sorted({i.kind for i in timeline.items}))
    body = f"""<header><h1>{escape(title)}</h1>
<div class=muted>{n_items} items on {len(timeline.lanes)} lanes, {escape(format_us(timeline.end - timeline.start))}
of device time from {escape(timeline.path)}. Wheel: zoom around the pointer; drag or shift+wheel: pan; double-click
an item: zoom to it; click: keep its details below; keys <kbd>+</kbd> <kbd>-</kbd> <kbd>&larr;</kbd> <kbd>&rarr;</kbd>
<kbd>0</kbd> (whole trace).</div>
<div class=controls><button id=fit>whole trace</button><button id=zin>zoom in</button><button id=zout>zoom out</button>
<label><input id=names type=checkbox> names under narrow bars</label>
<input id=search type=search placeholder="highlight ops by name" size=28><span id=found class=muted></span>
<span class=legend>{legend}</span><span id=range class=muted></span></div></header>
<canvas id=ov></canvas><div id=wrap><canvas id=tl></canvas></div><div id=tip></div>
<section><div id=details class=muted>Click an item to keep its details here.</div></section>
<section><h2 style="font-size:14px">Ops by device time</h2>{_op_table(timeline)}</section>"""
    data = _data(timeline, title)
    data["view"] = view
    return write_text(out, page(f"{title}: openreg timeline", _STYLE, body, data, _SCRIPT),
                      "torch.openreg.viz.timeline_html")
