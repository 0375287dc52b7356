"use strict";
// A device's explorable timeline: bytes in use over the run, zoomed and panned
// (drag: zoom into a stretch; wheel: zoom; shift+wheel or the arrows: pan; a
// double click: the whole run), the peak marked, the capture's gaps shaded, and a
// click anywhere showing what was live at the moment the analysis took nearest
// to it (series.moments). Below it, the largest buffers over their lives, each
// with the stack that made it on hover. What is drawn is chosen for the zoom
// (series.detail); every figure shown is the analysis' own, never the script's.
window.tpumemTimeline = function (h, device) {
  const { el, svg, bytes, count, say, niceStep, bytesStep, nearest, groupTable, COLORS } = h;
  const s = device.series;
  const W = 1100, H = 260, left = 72, right = 12, top = 16, bottom = 26;
  const plotW = W - left - right, plotH = H - top - bottom;
  const MIN_POINTS = 400; // points across the view before a finer level is drawn
  const toS = (ns) => ns / 1e9;
  const first = toS(s.time_ns[0]), last = toS(s.time_ns[s.time_ns.length - 1]);
  // The whole run, at its real length, however few events a short one had.
  const whole = [Math.min(toS(s.span_ns[0]), first), Math.max(toS(s.span_ns[1]), last)];
  if (whole[1] - whole[0] <= 0) whole[1] = whole[0] + 1e-3;
  const minWidth = Math.max((whole[1] - whole[0]) / 1e8, 1e-9);
  let view = whole.slice();
  const overview = { xs: s.time_ns.map(toS), high: s.in_use, regions: s.regions, pool: s.pool };
  // Every level is drawn as the whole run is, by region with the same names, so a
  // zoom changes how much is drawn, never what. (A finer level's figures come as
  // steps from the point before, to keep a large run's page small.)
  const summed = (steps) => { let v = 0; return steps.map((step) => (v += step)); };
  const levels = [overview, ...s.detail.map((l) => ({
    xs: summed(l.time_step_ns).map(toS), high: summed(l.in_use_steps),
    pool: l.pool_steps && summed(l.pool_steps),
    regions: s.regions.map(([name], r) => [name, summed(l.region_steps[r])]), stretches: l.stretches,
  }))];
  const moments = s.moments;
  const momentXs = moments ? moments.time_ns.map(toS) : [];
  const peak = device.peak;
  let selected = null; // index into moments
  let clickedNs = null; // the time of the last click, on the trace's clock

  function lowerBound(xs, x) {
    let lo = 0, hi = xs.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function timeFormat(step) {
    const digits = Math.min(9, Math.max(0, -Math.floor(Math.log10(step))));
    return (x) => x.toFixed(digits) + " s";
  }

  // The whole run by region; zoomed in, the coarsest level with enough points
  // across the view, else the finest.
  function levelFor(a, b) {
    if (a <= whole[0] && b >= whole[1]) return 0;
    for (let k = 0; k < levels.length; k++) {
      const xs = levels[k].xs;
      if (lowerBound(xs, b) - lowerBound(xs, a) >= MIN_POINTS) return k;
    }
    return levels.length - 1;
  }

  const box = el("div", { class: "chart timeline" });
  const bar = el("div", { class: "timeline-bar" });
  const caption = el("div", { class: "timeline-caption" });
  const tip = el("div", { class: "tip" });
  const buttons = [
    ["zoom_in", say("zoom_in"), () => zoom(0.5, (view[0] + view[1]) / 2)],
    ["zoom_out", say("zoom_out"), () => zoom(2, (view[0] + view[1]) / 2)],
    ["pan_left", say("pan_left"), () => pan(-0.25)],
    ["pan_right", say("pan_right"), () => pan(0.25)],
    ["whole_run", say("whole_run"), () => setView(whole[0], whole[1])],
  ];
  for (const [key, words, act] of buttons) {
    const button = el("button", { type: "button", "data-action": key }, words);
    button.addEventListener("click", act);
    bar.appendChild(button);
  }
  const legend = el("div", { class: "legend" });
  box.appendChild(bar);
  box.appendChild(caption);
  box.appendChild(legend);
  box.appendChild(tip);
  const panel = el("div", { class: "moment" });
  const buffersBox = el("div", { class: "chart buffers" });
  const buffersTip = el("div", { class: "tip" });
  const blocksCaption = el("div", { class: "timeline-caption" });
  let graph = null, blocks = null, pending = false;
  let down = null, brush = null; // where a drag started (px), and its rectangle
  let drawnLevel = null; // the level the chart draws now
  let lastClick = null; // {time, px} of the last click, for a double click

  function setView(a, b) {
    if (b - a < minWidth) { const mid = (a + b) / 2; a = mid - minWidth / 2; b = mid + minWidth / 2; }
    const width = Math.min(b - a, whole[1] - whole[0]);
    a = Math.max(whole[0], Math.min(a, whole[1] - width));
    view = [a, a + width];
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; draw(); }); }
  }
  function zoom(factor, at) { setView(at - (at - view[0]) * factor, at + (view[1] - at) * factor); }
  function pan(share) { const d = (view[1] - view[0]) * share; setView(view[0] + d, view[1] + d); }

  // Grid lines and their labels, at round numbers of the unit shown.
  function bytesAxis(target, yMax, Y) {
    const yStep = bytesStep(yMax);
    for (let y = 0; y <= yMax; y += yStep) {
      target.appendChild(svg("line", { x1: left, x2: W - right, y1: Y(y), y2: Y(y), class: "axis" }));
      const label = svg("text", { x: left - 6, y: Y(y) + 4, "text-anchor": "end" });
      label.textContent = bytes(y);
      target.appendChild(label);
    }
  }

  const X = (x) => left + ((x - view[0]) / (view[1] - view[0])) * plotW;
  const fromPx = (px) => view[0] + ((px - left) / plotW) * (view[1] - view[0]);

  // Stepped outlines: a value holds from its event to the next; before the first
  // event nothing of the run is in use, after the last its value holds to the end.
  function stepped(xs, ys, lo, hi, Y) {
    const out = [];
    let prev = lo > 0 ? ys[lo - 1] : 0;
    out.push([X(Math.max(view[0], lo > 0 ? xs[lo - 1] : whole[0])), Y(prev)]);
    for (let k = lo; k < hi; k++) {
      const x = X(xs[k]);
      out.push([x, Y(prev)], [x, Y(ys[k])]);
      prev = ys[k];
    }
    out.push([X(Math.min(view[1], hi < xs.length ? xs[hi] : whole[1])), Y(prev)]);
    return out;
  }
  const points = (list) => list.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");

  function draw() {
    const [a, b] = view;
    const k = levelFor(a, b);
    const level = levels[k];
    const lo = lowerBound(level.xs, a), hi = lowerBound(level.xs, b);
    const shown = [];
    let below = null;
    for (const [name, values] of level.regions) {
      const tops = below ? values.map((v, i) => v + below[i]) : values.slice();
      shown.push({ name, tops, below: below || values.map(() => 0) });
      below = tops;
    }
    let yMax = 0;
    // Scaled to what the view shows: the value carried into it and its own points
    // (the next point, past its right edge, is not drawn in it).
    // Scaled to bytes in use: a pool far above them (a preallocating framework's)
    // would flatten them; its line is labelled where it runs above the chart.
    for (const r of shown) for (let i = Math.max(0, lo - 1); i < hi; i++) yMax = Math.max(yMax, r.tops[i]);
    if (peak.time_ns !== null && toS(peak.time_ns) >= a && toS(peak.time_ns) <= b) yMax = Math.max(yMax, peak.bytes);
    yMax = yMax * 1.05 || 1;
    const Y = (y) => top + (1 - y / yMax) * plotH;

    if (graph) graph.remove();
    graph = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-view-start": Math.round(a * 1e9),
      "data-view-end": Math.round(b * 1e9), "data-level": k, "data-points": hi - lo });
    // (Nothing needs clipping: the outlines start and end at the view's edges, and
    // the pool's line is held at the chart's top where it runs above it.)
    const plot = svg("g");
    bytesAxis(graph, yMax, Y);
    const xStep = niceStep(b - a, 6), xFormat = timeFormat(xStep);
    for (let x = Math.ceil(a / xStep) * xStep; x <= b; x += xStep) {
      const label = svg("text", { x: X(x), y: H - 8, "text-anchor": "middle" });
      label.textContent = xFormat(x);
      graph.appendChild(label);
    }
    // The step marks, ticked along the top where they have room (a tick 4 px
    // from the last, a label 56 px): where the loop's steps fall on the clock.
    let lastTick = -Infinity, lastLabel = -Infinity;
    for (const [t, n] of s.steps || []) {
      const at = toS(t);
      if (at < a || at > b) continue;
      const x = X(at);
      if (x - lastTick < 4) continue;
      lastTick = x;
      plot.appendChild(svg("line", { x1: x, x2: x, y1: top, y2: top + 6, class: "step-tick" }));
      if (x - lastLabel >= 56 && x + 40 < left + plotW) {
        lastLabel = x;
        const label = svg("text", { x: x + 2, y: top + 15, class: "step-label" });
        label.textContent = say("step_tick", count(n));
        plot.appendChild(label);
      }
    }
    for (const [start, end] of s.gaps_ns || []) {
      // A stretch the capture did not see: shaded, so nothing drawn across it reads as data.
      const x1 = X(Math.max(toS(start), a)), x2 = X(Math.min(toS(end), b));
      if (x2 > x1) plot.appendChild(svg("rect", { x: x1, y: top, width: Math.max(1, x2 - x1), height: plotH, class: "gap" }));
    }
    shown.forEach((r, i) => {
      const upper = stepped(level.xs, r.tops, lo, hi, Y);
      const lower = stepped(level.xs, r.below, lo, hi, Y).reverse();
      plot.appendChild(svg("polygon", { points: points(upper.concat(lower)), fill: COLORS[i % COLORS.length], "fill-opacity": 0.55, stroke: "none", class: "region" }));
    });
    if (level.pool) {
      const held = (y) => Math.max(top, Y(y));
      plot.appendChild(svg("polyline", { points: points(stepped(level.xs, level.pool, lo, hi, held)), fill: "none", stroke: "#24292f", "stroke-dasharray": "5 3" }));
      let poolMax = 0;
      for (let i = Math.max(0, lo - 1); i < hi; i++) poolMax = Math.max(poolMax, level.pool[i]);
      const label = svg("text", { x: left + 6, y: top + 12, class: "pool-label" });
      label.textContent = poolMax > yMax ? say("pool_above", bytes(poolMax)) : say("pool_series");
      graph.appendChild(label);
    }
    caption.textContent = k === 0 ? say("timeline_regions", count(level.xs.length))
      : say("timeline_detail", count(level.stretches), count(level.xs.length));
    legend.textContent = "";
    shown.forEach((r, i) => legend.appendChild(el("span", {}, el("i", { style: "background:" + COLORS[i % COLORS.length] }), r.name)));
    if (level.pool) legend.appendChild(el("span", {}, el("i", { class: "dashed" }), say("pool_series")));
    if (peak.time_ns !== null) {
      const px = X(toS(peak.time_ns));
      if (px >= left && px <= W - right) {
        plot.appendChild(svg("line", { x1: px, x2: px, y1: top, y2: H - bottom, class: "peak-mark" }));
        const label = svg("text", { x: Math.min(px + 4, W - right - 120), y: top - 4, class: "peak-label" });
        label.textContent = say("peak_mark", bytes(peak.bytes));
        graph.appendChild(label);
      }
    }
    if (selected !== null) {
      const px = X(momentXs[selected]);
      if (px >= left && px <= W - right) plot.appendChild(svg("line", { x1: px, x2: px, y1: top, y2: H - bottom, class: "moment-mark" }));
    }
    graph.appendChild(plot);
    brush = svg("rect", { y: top, height: plotH, class: "brush", visibility: "hidden" });
    graph.appendChild(brush);
    const overlay = svg("rect", { x: left, y: top, width: plotW, height: plotH, fill: "transparent", class: "overlay" });
    graph.appendChild(overlay);
    drawnLevel = level;
    caption.textContent += " · " + say("view_range", xFormat(a), xFormat(b), xFormat(whole[0]), xFormat(whole[1]));
    box.insertBefore(graph, tip);
    drawBuffers();
  }

  function pxOf(event) {
    const bounds = graph.getBoundingClientRect();
    return (event.clientX - bounds.left) * (W / bounds.width);
  }
  const clamp = (px) => Math.max(left, Math.min(W - right, px));
  window.addEventListener("mouseup", (event) => {
    if (down === null) return;
    const px = clamp(pxOf(event)), start = down;
    down = null;
    brush.setAttribute("visibility", "hidden");
    if (Math.abs(px - start) > 4) { setView(fromPx(Math.min(px, start)), fromPx(Math.max(px, start))); return; }
    // A second click soon at the same place: a double click (each click redraws
    // the chart, so the browser's own dblclick may find no element to go to).
    const now = event.timeStamp;
    if (lastClick && now - lastClick.time < 500 && Math.abs(px - lastClick.px) < 5) {
      lastClick = null;
      setView(whole[0], whole[1]);
      return;
    }
    lastClick = { time: now, px };
    pick(fromPx(px));
  });
  // Listened to on the chart's box, which stays while each draw replaces the
  // chart: a double click's two clicks land on one element.
  // In the plot itself: not the buttons above it, nor the axes' labels.
  const inPlot = (event) => {
    const bounds = graph.getBoundingClientRect();
    const px = pxOf(event), py = (event.clientY - bounds.top) * (H / bounds.height);
    return px >= left && px <= W - right && py >= top && py <= H - bottom;
  };
  box.addEventListener("mousedown", (event) => {
    if (!graph || !inPlot(event)) return;
    down = pxOf(event);
    event.preventDefault();
  });
  box.addEventListener("mousemove", (event) => {
    if (!graph || (!inPlot(event) && down === null)) { tip.style.display = "none"; return; }
    const px = clamp(pxOf(event));
    if (down !== null && Math.abs(px - down) > 4) {
      brush.setAttribute("x", Math.min(px, down)); brush.setAttribute("width", Math.abs(px - down));
      brush.setAttribute("visibility", "visible");
    }
    const level = drawnLevel, x = fromPx(px), i = lowerBound(level.xs, x + 1e-12) - 1;
    tip.textContent = "";
    tip.appendChild(el("div", { class: "dim" }, timeFormat(niceStep(view[1] - view[0], 60))(x)));
    if (i < 0) {
      tip.appendChild(el("div", {}, say("before_first_tip")));  // (drawn as nothing in use)
    } else {
      // The drawn point's regions, as the legend names them, and their sum.
      tip.appendChild(el("div", {}, say("in_use_tip", bytes(level.high[i]))));
      level.regions.forEach(([name, values], r) => {
        if (values[i]) tip.appendChild(el("div", {}, el("i", { class: "swatch", style: "background:" + COLORS[r % COLORS.length] }), `${name}: ${bytes(values[i])}`));
      });
    }
    tip.style.display = "block";
    tip.style.left = Math.min(px + 12, W - 220) + "px";
    tip.style.top = graph.offsetTop + top + plotH / 3 + "px";  // (below the peak's label)
  });
  box.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  box.addEventListener("wheel", (event) => {
    if (!graph || !inPlot(event)) return;
    event.preventDefault();
    if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
      // (Some systems turn shift+wheel into a sideways wheel: deltaX, deltaY 0.)
      pan((event.shiftKey ? event.deltaX || event.deltaY : event.deltaX) / 500);
    } else {
      zoom(Math.exp(event.deltaY * 0.002), fromPx(pxOf(event)));
    }
  }, { passive: false });

  // What was live at the moment nearest `x`, as the analysis grouped it.
  // Exactly where nothing changed between a moment and the time clicked: that
  // moment; elsewhere the nearest. On the trace's own clock, in whole ns.
  function pick(x) {
    if (!moments || !moments.time_ns.length) return;
    const ns = Math.round(x * 1e9), times = moments.time_ns;
    const before = lowerBound(times, ns + 1) - 1;
    const until = before >= 0 ? moments.until_ns[before] : null;
    selected = before >= 0 && (until === null || ns < until) ? before : nearest(times, ns);
    panel.setAttribute("data-clicked-ns", ns);
    clickedNs = ns;
    showMoment();
    draw();
  }
  function showMoment() {
    panel.textContent = "";
    const j = selected;
    panel.setAttribute("data-event-index", moments.event_index[j]);
    panel.setAttribute("data-time-ns", moments.time_ns[j]);
    const at = (ns) => (ns / 1e9).toFixed(6) + " s";
    const when = at(moments.time_ns[j]), until = moments.until_ns[j];
    const title = j === moments.peak ? say("live_title_peak", when) : say("live_at_title", when);
    panel.appendChild(el("h3", {}, title));
    // Where the click fell, and whether this live set still held there.
    const clicked = clickedNs === null ? moments.time_ns[j] : clickedNs;
    const holds = clicked >= moments.time_ns[j] && (until === null || clicked < until);
    const span = until === null ? say("unchanged_to_end") : say("unchanged_until", at(until));
    panel.appendChild(el("p", { class: "dim" }, holds ? span : say("nearest_moment", at(clicked), span)));
    let line = say("live_figures", bytes(moments.in_use[j]), bytes(moments.live_bytes[j]), count(moments.live_buffers[j]));
    if (moments.stack[j] > 0) line += say("live_stack", bytes(moments.stack[j]));
    if (moments.unattributed[j] > 0) line += say("live_unattributed", bytes(moments.unattributed[j]));
    panel.appendChild(el("p", {}, line));
    const rows = moments.top[j].map(([g, b, c]) => Object.assign({}, moments.groups[g], { bytes: b, count: c }));
    if (moments.rest_buffers[j] > 0) rows.push({ bytes: moments.rest_bytes[j], count: moments.rest_buffers[j], op: say("live_rest") });
    panel.appendChild(groupTable(rows));
    panel.appendChild(el("p", { class: "note" }, say("moments_note", count(moments.time_ns.length))));
  }

  // The largest buffers over their lives, in the same view as the timeline.
  function drawBuffers() {
    const largest = s.largest;
    if (!largest || !largest.buffers.length) return;
    const BH = 220, plotB = BH - 8 - bottom;
    let yMax = 1;
    for (const b of largest.buffers) yMax = Math.max(yMax, b.offset + b.bytes);
    const Y = (y) => 8 + (1 - y / yMax) * plotB;
    if (blocks) blocks.remove();
    blocks = svg("svg", { width: W, height: BH, viewBox: `0 0 ${W} ${BH}` });
    bytesAxis(blocks, yMax, Y);
    const colors = new Map();
    let drawn = 0;
    largest.buffers.forEach((b) => {
      const start = toS(b.start_ns), end = b.end_ns === null ? whole[1] : toS(b.end_ns);
      if (end < view[0] || start > view[1]) return;
      const x1 = X(Math.max(start, view[0])), x2 = X(Math.min(end, view[1]));
      const key = b.source || b.op || "";
      if (!colors.has(key)) colors.set(key, COLORS[colors.size % COLORS.length]);
      const rect = svg("rect", { x: x1, y: Y(b.offset + b.bytes), width: Math.max(1, x2 - x1),
        height: Math.max(1, Y(b.offset) - Y(b.offset + b.bytes)), fill: colors.get(key), class: "block" });
      rect.addEventListener("mousemove", (event) => {
        const bounds = blocks.getBoundingClientRect();
        const px = (event.clientX - bounds.left) * (W / bounds.width);
        buffersTip.textContent = "";
        buffersTip.appendChild(el("div", {}, `${bytes(b.bytes)} · ${(b.dtype || "") + (b.shape || "")} · ${b.op || "-"}`));
        buffersTip.appendChild(el("div", { class: "dim" }, b.source || "-"));
        const frames = b.stack >= 0 ? largest.stacks[b.stack] : [];
        if (!frames.length) buffersTip.appendChild(el("div", { class: "dim" }, say("no_stack")));
        for (const f of frames.slice().reverse()) buffersTip.appendChild(el("div", { class: "frame-line" }, `${f.function}  ${f.file}:${f.line}`));
        buffersTip.style.display = "block";
        buffersTip.style.left = Math.min(px + 12, W - 420) + "px";
        buffersTip.style.top = "8px";
      });
      rect.addEventListener("mouseleave", () => { buffersTip.style.display = "none"; });
      blocks.appendChild(rect);
      drawn++;
    });
    blocks.setAttribute("data-blocks", drawn);
    blocksCaption.textContent = say("largest_in_view", count(drawn), count(largest.buffers.length));
    buffersBox.insertBefore(blocks, buffersTip);
  }

  const part = el("div", { "data-device": device.device });
  part.appendChild(el("h3", {}, say("timeline_title")));
  part.appendChild(el("p", { class: "note" }, say("timeline_hint")));
  part.appendChild(box);
  if (s.gaps_ns && s.gaps_ns.length) part.appendChild(el("p", { class: "note" }, say("gaps_note", count(s.gaps_ns.length))));
  if (moments && moments.time_ns.length) {
    part.appendChild(panel);
    selected = Math.max(0, moments.peak);
    showMoment();
  }
  if (s.largest && s.largest.buffers.length) {
    part.appendChild(el("h3", {}, say("largest_title", count(s.largest.buffers.length), count(s.largest.allocations))));
    part.appendChild(el("p", { class: "note" }, say("largest_note")));
    buffersBox.appendChild(blocksCaption);
    buffersBox.appendChild(buffersTip);
    part.appendChild(buffersBox);
  }
  draw();
  return part;
};
