"""The memory view as one self-contained HTML page (Note [Self-contained pages]): allocated memory over time
with each allocation's size, stream and stack on hover, and the allocator's segments and blocks."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

from ._common import BASE_STYLE, PathLike, check_output, escape, format_bytes, page, write_text
from ._memory_model import (
    STREAM_COLOURS,
    DeviceMemory,
    Snapshot,
    allocated_at,
    device_memory,
    frame_text,
    load_snapshot,
    shade,
    stream_label,
)


class _Stacks:
    """Frames and stacks interned: a training step allocates from the same few lines over and over."""

    def __init__(self) -> None:
        self.frames: Dict[Tuple[str, bool], int] = {}
        self.stacks: Dict[Tuple[int, ...], int] = {}

    def add(self, frames: List[Dict[str, Any]]) -> int:
        if not frames:
            return -1
        key = tuple(self.frames.setdefault((frame_text(f), str(f.get("filename", "")).endswith(".py")),
                                           len(self.frames)) for f in frames)
        return self.stacks.setdefault(key, len(self.stacks))


def _device_data(dm: DeviceMemory, stacks: _Stacks) -> Dict[str, Any]:
    times = None
    if dm.times[0] is not None and all(t is not None for t in dm.times):
        times = [(float(t) - float(dm.times[0])) / 1e3 for t in dm.times]  # type: ignore[arg-type]
    bands = []
    for a in dm.allocations:
        bands.append({
            "s": a.size, "a": a.start, "e": a.end if a.end is not None else dm.steps + 1,
            "o": [v for pair in a.offsets for v in pair], "st": a.stream, "c": shade(a.stream, a.order),
            "addr": f"{a.addr:#x}", "f": stacks.add(a.frames), "pre": a.before_history,
            "fc": a.completed, "live": a.end is None,
        })
    peak, at = dm.peak
    return {
        "device": dm.device, "steps": dm.steps, "times": times, "allocated": dm.allocated, "reserved": dm.reserved,
        "mergedBase": dm.merged_base if dm.merged else None, "merged": dm.merged,
        "streams": [stream_label(dm, i) for i in range(len(dm.streams))],
        "streamColours": [STREAM_COLOURS[i % len(STREAM_COLOURS)] for i in range(len(dm.streams))],
        "peak": [peak, at], "ooms": dm.ooms, "bands": bands,
    }


def _segments_table(dm: DeviceMemory) -> str:
    """The allocator's segments of the device at the snapshot, each with its blocks behind a disclosure."""
    if not dm.segments:
        return "<p class=muted>No segments: the allocator holds no memory on this device.</p>"
    streams = {raw: i for i, raw in enumerate(dm.streams)}
    rows = []
    for seg in dm.segments:
        base = int(seg.get("address", 0))
        blocks = []
        for b in seg.get("blocks") or []:
            where = escape(allocated_at(list(b.get("frames") or [])))
            blocks.append(f"<tr><td>+{int(b.get('address', base)) - base:#x}</td>"
                          f"<td class=num>{escape(format_bytes(int(b.get('size', 0))))}</td>"
                          f"<td class=num>{int(b.get('requested_size', 0))}</td><td>{escape(b.get('state', ''))}</td>"
                          f"<td>{where}</td></tr>")
        stream = int(seg.get("stream", 0) or 0)
        label = stream_label(dm, streams[stream]) if stream in streams else "a stream with nothing recorded"
        rows.append(
            f"<tr><td>{base:#x}</td><td class=num>{escape(format_bytes(int(seg.get('total_size', 0))))}</td>"
            f"<td class=num>{escape(format_bytes(int(seg.get('allocated_size', 0))))}</td>"
            f"<td class=num>{escape(format_bytes(int(seg.get('active_size', 0))))}</td>"
            f"<td>{escape(label)}</td><td>{escape(seg.get('segment_type', ''))}</td>"
            f"<td><details><summary>{len(blocks)} blocks</summary><table><thead><tr><th>offset</th>"
            f"<th class=num>size</th><th class=num>requested</th><th>state</th><th>allocated at</th></tr></thead>"
            f"<tbody>{''.join(blocks)}</tbody></table></details></td></tr>")
    total = sum(int(s.get("total_size", 0)) for s in dm.segments)
    return (f"<p class=muted>{len(dm.segments)} segments, {escape(format_bytes(total))} reserved at the snapshot."
            "</p><table class=segments><thead><tr><th>address</th><th class=num>size</th>"
            "<th class=num>allocated</th><th class=num>active</th><th>stream</th><th>pool</th><th>blocks</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


_STYLE = BASE_STYLE + """
.panel { border-bottom: 1px solid #ddd; }
.panel h2 { font-size: 14px; margin: 10px 14px 2px 14px; }
.panel .stats { margin: 0 14px 4px 14px; }
.panel canvas { cursor: crosshair; }
.segments details summary { cursor: pointer; color: #335; }
.segments td:first-child { font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
"""

_SCRIPT = r"""
"use strict";
(function () {
const D = JSON.parse(document.getElementById("data").textContent);
const tip = document.getElementById("tip"), details = document.getElementById("details");
const xmode = document.getElementById("xmode");
const L = 78, R = 14, TOP = 12, BOTTOM = 40, PLOT_H = 360;

function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? +n.toPrecision(3) : n) + " " + u[i];
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"}[c];
  });
}
function byteStep(top) {
  let unit = 1;
  while (top / (unit * 1024) >= 2 && unit < Math.pow(1024, 4)) unit *= 1024;
  for (const m of [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000]) if (top / (m * unit) <= 8) return m * unit;
  return 1024 * unit;
}
function niceStep(span, px) {
  const raw = span / Math.max(1, px / 100), p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
function offsetAt(b, k) {  // bytes below band b at step k (its offsets: step, offset pairs)
  let lo = 0, hi = b.o.length / 2 - 1;
  while (lo < hi) { const m = (lo + hi + 1) >> 1; if (b.o[2 * m] <= k) lo = m; else hi = m - 1; }
  return b.o[2 * lo + 1];
}
function stackText(f, all) {
  if (f < 0) return all ? "(no stack recorded: call torch.openreg.memory._record_memory_history() first)" : "";
  const frames = D.stacks[f].map(function (i) { return D.frames[i]; });
  const py = frames.filter(function (fr) { return fr[1]; });
  const shown = all || !py.length ? frames : py;
  const lines = shown.slice(0, all ? shown.length : 14).map(function (fr) { return fr[0]; });
  let more = shown.length - lines.length;
  let text = lines.join("\n");
  if (more > 0) text += "\n… " + more + " more frames";
  if (!all && py.length && frames.length > py.length)
    text += "\n(" + (frames.length - py.length) + " C++ frames: click to see all)";
  return text;
}

function Panel(dev, root) {
  const canvas = root.querySelector("canvas"), ctx = canvas.getContext("2d");
  const K = dev.steps, top = Math.max(Math.max.apply(null, dev.reserved), dev.peak[0], 1) * 1.06;
  let v0 = 0, v1 = K + 1, hover = null, drag = null;
  const self = this;
  function timeMode() { return xmode.value === "time" && dev.times; }
  function xs(k) { return timeMode() ? dev.times[Math.min(k, dev.times.length - 1)] : k; }
  function fullRange() { return [xs(0), xs(K + 1)]; }
  function pw() { return canvas.clientWidth - L - R; }
  function X(x) { return L + (x - v0) / (v1 - v0) * pw(); }
  function Y(b) { return TOP + PLOT_H - b / top * PLOT_H; }
  function stepAt(px) {
    const x = v0 + (px - L) / pw() * (v1 - v0);
    if (!timeMode()) return Math.max(0, Math.min(K, Math.floor(x)));
    let lo = 0, hi = K;
    while (lo < hi) { const m = (lo + hi + 1) >> 1; if (dev.times[m] <= x) lo = m; else hi = m - 1; }
    return lo;
  }
  this.reset = function () { const r = fullRange(); v0 = r[0]; v1 = r[1] > r[0] ? r[1] : r[0] + 1; self.draw(); };
  this.resize = function () {
    const dpr = window.devicePixelRatio || 1, w = root.clientWidth, h = TOP + PLOT_H + BOTTOM;
    canvas.style.width = w + "px"; canvas.style.height = h + "px";
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0); self.draw();
  };
  function bandPath(b) {
    ctx.beginPath();
    const n = b.o.length / 2, pts = [];
    for (let i = 0; i < n; i++) {
      const k = b.o[2 * i], next = i + 1 < n ? b.o[2 * i + 2] : b.e, off = b.o[2 * i + 1];
      pts.push([X(xs(k)), off], [X(xs(next)), off]);
    }
    ctx.moveTo(pts[0][0], Y(pts[0][1]));
    for (const p of pts) ctx.lineTo(p[0], Y(p[1]));
    for (let i = pts.length - 1; i >= 0; i--) ctx.lineTo(pts[i][0], Y(pts[i][1] + b.s));
    ctx.closePath();
  }
  function stepLine(values, from) {
    ctx.beginPath();
    for (let k = 0; k <= K; k++) {
      const x0 = X(xs(k)), x1 = X(xs(k + 1)), y = Y(values[k]);
      if (k === 0) ctx.moveTo(x0, y); else ctx.lineTo(x0, y);
      ctx.lineTo(x1, y);
    }
  }
  this.draw = function () {
    const w = canvas.clientWidth, h = TOP + PLOT_H + BOTTOM;
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    // y grid and labels
    const ys = byteStep(top);
    ctx.strokeStyle = "#e6e6e6"; ctx.fillStyle = "#333"; ctx.textAlign = "right"; ctx.lineWidth = 1;
    for (let b = 0; b <= top; b += ys) {
      const y = Math.round(Y(b)) + 0.5;
      ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(w - R, y); ctx.stroke();
      ctx.fillText(b ? fmtBytes(b) : "0", L - 6, y);
    }
    // x grid and labels
    const xsStep = timeMode() ? niceStep(v1 - v0, pw()) : Math.max(1, niceStep(v1 - v0, pw()));
    ctx.textAlign = "center";
    for (let x = Math.ceil(v0 / xsStep) * xsStep; x <= v1; x += xsStep) {
      const px = Math.round(X(x)) + 0.5;
      ctx.beginPath(); ctx.moveTo(px, TOP); ctx.lineTo(px, TOP + PLOT_H); ctx.stroke();
      ctx.fillText(+x.toPrecision(6), px, TOP + PLOT_H + 12);
    }
    ctx.fillStyle = "#555";
    ctx.fillText(timeMode() ? "time since the first recorded event (ms, host clock)"
                            : "allocator events (each allocation and free, in order)", L + pw() / 2, TOP + PLOT_H + 30);
    ctx.save(); ctx.beginPath(); ctx.rect(L, TOP, pw(), PLOT_H); ctx.clip();
    for (const b of dev.bands) {
      if (xs(b.e) < v0 || xs(b.a) > v1) continue;
      bandPath(b); ctx.fillStyle = b.c; ctx.fill();
    }
    if (dev.mergedBase) {
      ctx.beginPath();
      for (let k = 0; k <= K; k++) {
        const y = Y(dev.allocated[k]);
        if (k === 0) ctx.moveTo(X(xs(0)), y); else ctx.lineTo(X(xs(k)), y);
        ctx.lineTo(X(xs(k + 1)), y);
      }
      for (let k = K; k >= 0; k--) {
        const y = Y(dev.mergedBase[k]);
        ctx.lineTo(X(xs(k + 1)), y); ctx.lineTo(X(xs(k)), y);
      }
      ctx.closePath(); ctx.fillStyle = "#d0d0d0"; ctx.fill();
    }
    ctx.setLineDash([5, 4]); ctx.strokeStyle = "#333"; ctx.lineWidth = 1.2;
    stepLine(dev.reserved); ctx.stroke(); ctx.setLineDash([]);
    for (const k of dev.ooms) {  // an out-of-memory error: a red line after the step it followed
      const x = X(xs(k + 1));
      ctx.strokeStyle = "#C44E52"; ctx.beginPath(); ctx.moveTo(x, TOP); ctx.lineTo(x, TOP + PLOT_H); ctx.stroke();
    }
    if (hover && hover.band) { bandPath(hover.band); ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.stroke(); }
    // the peak
    const px = X((xs(dev.peak[1]) + xs(dev.peak[1] + 1)) / 2), py = Y(dev.peak[0]);
    ctx.fillStyle = "#C44E52"; ctx.beginPath();
    ctx.moveTo(px, py - 2); ctx.lineTo(px - 5, py - 10); ctx.lineTo(px + 5, py - 10); ctx.fill();
    ctx.restore();
    ctx.strokeStyle = "#999"; ctx.lineWidth = 1; ctx.strokeRect(L + 0.5, TOP + 0.5, pw(), PLOT_H);
  };
  function find(e) {
    const r = canvas.getBoundingClientRect(), px = e.clientX - r.left, py = e.clientY - r.top;
    if (px < L || px > L + pw() || py < TOP || py > TOP + PLOT_H) return null;
    const k = stepAt(px), bytes = (TOP + PLOT_H - py) / PLOT_H * top;
    for (const b of dev.bands) {
      if (b.a > k || b.e <= k) continue;
      const off = offsetAt(b, k);
      if (bytes >= off && bytes < off + b.s) return {k: k, band: b};
    }
    if (dev.mergedBase && bytes >= dev.mergedBase[k] && bytes < dev.allocated[k]) return {k: k, merged: true};
    if (bytes < dev.reserved[k]) return {k: k, cached: true};
    return {k: k};
  }
  function when(k) {
    return "#" + k + (dev.times ? " (" + +dev.times[Math.min(k, dev.times.length - 1)].toPrecision(6) + " ms)" : "");
  }
  function describe(h, all) {
    const k = h.k;
    const head = "<div class=kv><span>step</span><span>" + esc(when(k)) + "</span><span>allocated</span><span>" +
      esc(fmtBytes(dev.allocated[k])) + "</span><span>reserved</span><span>" + esc(fmtBytes(dev.reserved[k])) +
      "</span></div>";
    if (h.band) {
      const b = h.band, kv = [["size", fmtBytes(b.s) + " (" + b.s + " bytes)"], ["stream", dev.streams[b.st]],
        ["address", b.addr], ["allocated", b.pre ? "before the recorded history" : "at " + when(b.a)],
        ["freed", b.live ? "no: allocated at the snapshot" : "at " + when(b.e)]];
      if (b.fc !== null && b.fc !== undefined && b.fc !== b.e)
        kv.push(["free completed", "after " + when(b.fc) + " (other streams used it)"]);
      return "<b>allocation of " + esc(fmtBytes(b.s)) + "</b><div class=kv>" +
        kv.map(function (p) { return "<span>" + esc(p[0]) + "</span><span>" + esc(p[1]) + "</span>"; }).join("") +
        "</div><pre class=stack>" + esc(stackText(b.f, all)) + "</pre>";
    }
    if (h.merged) return "<b>" + dev.merged + " smaller allocations</b> (drawn as one band): " +
      esc(fmtBytes(dev.allocated[k] - dev.mergedBase[k])) + " at this step" + head;
    if (h.cached) return "<b>cached</b>: reserved by the allocator, not allocated" + head;
    return head;
  }
  canvas.addEventListener("mousemove", function (e) {
    if (drag) {
      const dx = e.clientX - drag.x; if (Math.abs(dx) > 2) drag.moved = true;
      const d = dx / pw() * (drag.v1 - drag.v0);
      v0 = drag.v0 - d; v1 = drag.v1 - d; tip.style.display = "none"; self.draw(); return;
    }
    const h = find(e);
    if ((h && h.band) !== (hover && hover.band)) { hover = h; self.draw(); } else hover = h;
    if (!h) { tip.style.display = "none"; return; }
    tip.innerHTML = describe(h, false); tip.style.display = "block";
    const r = tip.getBoundingClientRect();
    let x = e.clientX + 14, y = e.clientY + 14;
    if (x + r.width > window.innerWidth - 4) x = e.clientX - r.width - 14;
    if (y + r.height > window.innerHeight - 4) y = e.clientY - r.height - 14;
    tip.style.left = Math.max(4, x) + "px"; tip.style.top = Math.max(4, y) + "px";
  });
  canvas.addEventListener("mouseleave", function () {
    tip.style.display = "none";
    if (hover) { hover = null; self.draw(); }
  });
  canvas.addEventListener("mousedown", function (e) { drag = {x: e.clientX, v0: v0, v1: v1, moved: false}; });
  window.addEventListener("mouseup", function (e) {
    if (drag && !drag.moved && e.target === canvas) {
      const h = find(e);
      if (h) details.innerHTML = "<b>openreg:" + dev.device + "</b> " + describe(h, true);
    }
    drag = null;
  });
  canvas.addEventListener("wheel", function (e) {
    e.preventDefault();
    const r = canvas.getBoundingClientRect(), px = Math.max(L, Math.min(L + pw(), e.clientX - r.left));
    const f = fullRange(), full = Math.max(f[1] - f[0], 1e-9);
    if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      const d = (e.shiftKey ? e.deltaY : e.deltaX) / pw() * (v1 - v0); v0 += d; v1 += d;
    } else {
      const x = v0 + (px - L) / pw() * (v1 - v0);
      const span = Math.min(Math.max((v1 - v0) * Math.exp(e.deltaY * 0.0015), full * 1e-6), full);
      v0 = x - (px - L) / pw() * span; v1 = v0 + span;
    }
    self.draw();
  }, {passive: false});
  canvas.addEventListener("dblclick", function () { self.reset(); });
}

const panels = D.devices.map(function (dev, i) { return new Panel(dev, document.getElementById("panel" + i)); });
xmode.addEventListener("change", function () { panels.forEach(function (p) { p.reset(); }); });
window.addEventListener("resize", function () { panels.forEach(function (p) { p.resize(); }); });
panels.forEach(function (p) { p.reset(); p.resize(); });
})();
"""


def memory_html(snapshot: Union[Snapshot, PathLike], html: PathLike, title: Optional[str] = None, *,
                max_allocations: int = 3000) -> str:
    """Writes a memory snapshot as one self-contained HTML page at ``html`` that needs no network: per
    device, the allocated memory over the recorded history (the picture :func:`memory_png` draws, with
    zoom), each allocation's size, stream, address, lifetime and the stack that allocated it on hover
    (click keeps the whole stack below), the reserved memory, and the allocator's segments with their
    blocks. ``snapshot``: ``torch.openreg.memory._snapshot()`` or the path of the pickle
    ``_dump_snapshot`` wrote. Returns the path written."""
    out = check_output(html, "torch.openreg.viz.memory_html")
    snap = load_snapshot(snapshot)
    devices = device_memory(snap, max_allocations)
    stacks = _Stacks()
    devices_data = [_device_data(dm, stacks) for dm in devices]
    data: Dict[str, Any] = {"devices": devices_data,
                            "frames": [[text, py] for (text, py) in stacks.frames],
                            "stacks": [list(s) for s in stacks.stacks]}
    title = title or "openreg memory snapshot"
    panels = []
    for i, dm in enumerate(devices):
        peak, at = dm.peak
        legend = "".join(f"<span><span class=chip style=\"background:{shade(s, 0)}\"></span>"
                         f"{escape(stream_label(dm, s))}</span>" for s in range(len(dm.streams)))
        legend += "<span><span class=chip style=\"background:none;border-top:2px dashed #333;height:0\"></span>" \
                  "reserved</span>"
        if dm.merged:
            legend += f"<span><span class=chip style=\"background:#d0d0d0\"></span>{dm.merged} smaller " \
                      "allocations</span>"
        n = len(dm.allocations) + dm.merged
        history = (f"{dm.steps} allocations and frees recorded" if dm.history else
                   "no history recorded (call torch.openreg.memory._record_memory_history() before the work)")
        panels.append(
            f"<div class=panel><h2>openreg:{dm.device}</h2><div class=stats>"
            f"<b>{escape(format_bytes(dm.allocated[-1]))}</b> allocated at the snapshot ({dm.allocated[-1]} bytes), "
            f"peak <b>{escape(format_bytes(peak))}</b> ({peak} bytes, at step {at}; red mark), "
            f"{escape(format_bytes(dm.reserved[-1]))} reserved; {n} allocations, {escape(history)}.</div>"
            f"<div class=\"controls stats\"><span class=legend>{legend}</span></div>"
            f"<div id=panel{i}><canvas></canvas></div>"
            f"<section><details><summary>Segments and blocks at the snapshot</summary>{_segments_table(dm)}"
            "</details></section></div>")
    if not devices:
        panels.append("<section><p>No memory allocated and no history recorded: call "
                      "torch.openreg.memory._record_memory_history() before the work.</p></section>")
    body = f"""<header><h1>{escape(title)}</h1>
<div class=muted>Each band is one allocation, as high as its size, from its allocation to its free; the stack's top
edge is the memory allocated at each step (memory_allocated()). Colour: the stream it was allocated on. Hover: size,
stream, lifetime, the stack that allocated it; click: keep it below with the whole stack. Wheel: zoom; drag: pan;
double-click: whole history.</div>
<div class=controls><label>x axis <select id=xmode><option value=events>allocator events</option>
<option value=time>time (host clock)</option></select></label></div></header>
{''.join(panels)}<div id=tip></div><section><div id=details class=muted>Click an allocation to keep its details here.
</div></section>"""
    return write_text(out, page(f"{title}: openreg memory", _STYLE, body, data, _SCRIPT),
                      "torch.openreg.viz.memory_html")
