"use strict";
// tpumem's HTML report: draws every table and plot from the JSON embedded in the
// page. Trace names reach the page only through textContent, never as markup.
(function () {
  const SVG = "http://www.w3.org/2000/svg"; // a namespace name, never fetched
  const COLORS = ["#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7b83",
    "#9a6700", "#cf222e", "#57606a", "#116329"];
  const data = JSON.parse(document.getElementById("tpumem-data").textContent);
  // The page's words are Python's (report/page_words.py): this script draws.
  function say(key, ...args) {
    let next = 0;
    return data.words[key].replace(/\{\}/g, () => String(args[next++]));
  }
  // A table's column titles, the text report's own (a list in the words).
  const heads = (key) => data.words[key];
  const app = document.getElementById("app");

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    return node;
  }

  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function bytes(count) {
    if (count === null || count === undefined) return "-";
    let value = Math.abs(count);
    const sign = count < 0 ? "-" : "";
    for (const unit of UNITS) {
      if (value < 1024 || unit === "PiB") {
        return unit === "B" ? sign + Math.trunc(value) + " B" : sign + value.toFixed(1) + " " + unit;
      }
      value /= 1024;
    }
    return "-";
  }
  const seconds = (ns) => (ns === null || ns === undefined ? "-" : (ns / 1e9).toFixed(3) + " s");
  const share = (x) => (x === null || x === undefined ? "-" : x.toFixed(3));
  const count = (n) => (n === null || n === undefined ? "-" : Math.round(n).toLocaleString("en-US"));
  const FORMATS = {
    bytes: bytes, count: count, share: share, ns: seconds, text: (v) => (v === null ? "-" : String(v)),
    "per second": (v) => (v === null ? "-" : count(v) + " /s"),
  };

  // One stacked bar per run: its peak by kind, each kind in its own color, the
  // widths on one scale (the largest peak the full width).
  function kindBars(names, kinds, words) {
    const totals = names.map((_, i) => kinds.reduce((sum, k) => sum + k.bytes[i], 0));
    const widest = Math.max(1, ...totals);
    const box = el("div", { class: "kind-bars" });
    names.forEach((name, i) => {
      const bar = el("div", { class: "kind-bar" });
      kinds.forEach((k, j) => {
        if (!k.bytes[i]) return;
        const part = el("span", { title: `${words[k.kind]}: ${bytes(k.bytes[i])}`, "data-kind": k.kind,
          style: `width:${(100 * k.bytes[i] / widest).toFixed(3)}%;background:${COLORS[j % COLORS.length]}` });
        bar.appendChild(part);
      });
      box.appendChild(el("div", { class: "kind-row" }, el("span", { class: "kind-name" }, `${name} · ${bytes(totals[i])}`), bar));
    });
    const legend = el("div", { class: "kind-legend" });
    kinds.forEach((k, j) => legend.appendChild(el("span", {}, el("i", { style: `background:${COLORS[j % COLORS.length]}` }), words[k.kind])));
    box.appendChild(legend);
    return box;
  }

  // ---- tables -------------------------------------------------------------
  function figureTable(rows) {
    const table = el("table");
    for (const [name, value, label] of rows) {
      table.appendChild(el("tr", {}, el("th", {}, name), el("td", { class: "num" }, value),
        el("td", { class: "dim" }, label || "")));
    }
    return table;
  }

  // columns: [{title, numeric}], rows: [[{text, sort}]]; a click on a header sorts.
  function sortableTable(columns, rows) {
    const table = el("table");
    const body = el("tbody");
    const head = el("tr");
    let order = { column: -1, descending: false };
    function draw() {
      body.textContent = "";
      for (const row of rows) {
        body.appendChild(el("tr", {}, ...row.map((cell, i) =>
          el("td", { class: columns[i].numeric ? "num" : null }, cell.text))));
      }
    }
    columns.forEach((column, index) => {
      const th = el("th", { class: "sortable" + (column.numeric ? " num" : "") }, column.title);
      th.addEventListener("click", () => {
        order = { column: index, descending: order.column === index ? !order.descending : column.numeric };
        rows.sort((a, b) => {
          const x = a[index].sort, y = b[index].sort;
          const result = x < y ? -1 : x > y ? 1 : 0;
          return order.descending ? -result : result;
        });
        draw();
      });
      head.appendChild(th);
    });
    table.appendChild(el("thead", {}, head));
    table.appendChild(body);
    draw();
    return table;
  }

  // ---- charts -------------------------------------------------------------
  function niceStep(span, ticks) {
    const raw = span / ticks;
    const power = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= raw) return m * power;
    return 10 * power;
  }
  // Ticks at round numbers of the unit the axis shows (MiB, GiB), not of bytes.
  function bytesStep(yMax) {
    const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(yMax) / Math.log(1024))));
    return niceStep(yMax / unit, 4) * unit;
  }
  function nearest(xs, x) {
    let lo = 0, hi = xs.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid + 1; else hi = mid;
    }
    // (Of two as near, the earlier.)
    return lo > 0 && Math.abs(xs[lo - 1] - x) <= Math.abs(xs[lo] - x) ? lo - 1 : lo;
  }

  // spec: {series: [{name, xs, ys, color, stack, dash}], xFormat, yFormat, yMax, height}
  function chart(spec) {
    const box = el("div", { class: "chart" });
    const legend = el("div", { class: "legend" });
    const tip = el("div", { class: "tip" });
    const hidden = new Set();
    const width = 1100, height = spec.height || 240, left = 72, right = 12, top = 8, bottom = 26;
    let graph = null;
    spec.series.forEach((s, i) => {
      s.color = s.color || COLORS[i % COLORS.length];
      const item = el("span", {}, el("i", { style: "background:" + s.color }), s.name);
      item.addEventListener("click", () => {
        if (hidden.has(i)) hidden.delete(i); else hidden.add(i);
        item.classList.toggle("off");
        draw();
      });
      legend.appendChild(item);
    });
    function draw() {
      if (graph) graph.remove();
      const shown = spec.series.map((s, i) => [s, i]).filter(([s, i]) => !hidden.has(i) && s.xs.length);
      // Stacked series add up in legend order; the rest are lines.
      const base = new Map();
      let running = null;
      for (const [s] of shown) {
        if (!s.stack) continue;
        const below = running || s.ys.map(() => 0);
        base.set(s, below);
        running = s.ys.map((y, k) => below[k] + (y || 0));
      }
      const topOf = (s) => (base.has(s) ? s.ys.map((y, k) => base.get(s)[k] + (y || 0)) : s.ys);
      let xMin = Infinity, xMax = -Infinity, yMax = spec.yMax || 0;
      for (const [s] of shown) {
        xMin = Math.min(xMin, s.xs[0]); xMax = Math.max(xMax, s.xs[s.xs.length - 1]);
        for (const y of topOf(s)) if (y !== null && y > yMax) yMax = y;
      }
      if (spec.span) { xMin = Math.min(xMin, spec.span[0]); xMax = Math.max(xMax, spec.span[1]); }
      if (!isFinite(xMin)) { xMin = 0; xMax = 1; }
      if (xMax === xMin) xMax = xMin + 1;
      if (!yMax) yMax = 1;
      const X = (x) => left + ((x - xMin) / (xMax - xMin)) * (width - left - right);
      const Y = (y) => top + (1 - y / yMax) * (height - top - bottom);
      graph = svg("svg", { width: width, height: height, viewBox: `0 0 ${width} ${height}` });
      const yStep = spec.yBytes ? bytesStep(yMax) : niceStep(yMax, 4);
      for (let y = 0; y <= yMax * 1.0001; y += yStep) {
        graph.appendChild(svg("line", { x1: left, x2: width - right, y1: Y(y), y2: Y(y), class: "axis" }));
        const label = svg("text", { x: left - 6, y: Y(y) + 4, "text-anchor": "end" });
        label.textContent = spec.yFormat(y);
        graph.appendChild(label);
      }
      const xStep = niceStep(xMax - xMin, 6);
      for (let x = Math.ceil(xMin / xStep) * xStep; x <= xMax; x += xStep) {
        const label = svg("text", { x: X(x), y: height - 8, "text-anchor": "middle" });
        label.textContent = spec.xFormat(x);
        graph.appendChild(label);
      }
      for (const [start, end] of spec.gaps || []) {
        // A stretch the capture did not see: shaded, so no line across it reads as data.
        const x1 = X(Math.max(start, xMin)), x2 = X(Math.min(end, xMax));
        if (x2 > x1) graph.appendChild(svg("rect", { x: x1, y: top, width: Math.max(1, x2 - x1), height: height - top - bottom, class: "gap" }));
      }
      for (const [s] of shown) {
        const tops = topOf(s);
        const line = [];
        // Bytes in use hold their value until the next event: steps, not ramps.
        const step = spec.steps ? (x, k, ys) => (k > 0 && ys[k - 1] !== null ? [[x, ys[k - 1]], [x, ys[k]]] : [[x, ys[k]]]) : (x, k, ys) => [[x, ys[k]]];
        s.xs.forEach((x, k) => { if (tops[k] !== null) for (const [px, py] of step(x, k, tops)) line.push(`${X(px).toFixed(1)},${Y(py).toFixed(1)}`); });
        if (base.has(s)) {
          const below = base.get(s);
          const under = [];
          s.xs.forEach((x, k) => { for (const [px, py] of step(x, k, below)) under.push(`${X(px).toFixed(1)},${Y(py).toFixed(1)}`); });
          under.reverse();
          graph.appendChild(svg("polygon", { points: line.concat(under).join(" "), fill: s.color, "fill-opacity": 0.55, stroke: "none" }));
        } else {
          graph.appendChild(svg("polyline", { points: line.join(" "), fill: "none", stroke: s.color,
            "stroke-width": 1.5, "stroke-dasharray": s.dash ? "5 3" : "none" }));
        }
      }
      const cursor = svg("line", { y1: top, y2: height - bottom, stroke: "#888", visibility: "hidden" });
      graph.appendChild(cursor);
      const overlay = svg("rect", { x: left, y: top, width: width - left - right, height: height - top - bottom, fill: "transparent" });
      overlay.addEventListener("mousemove", (event) => {
        const bounds = graph.getBoundingClientRect();
        const px = (event.clientX - bounds.left) * (width / bounds.width);
        const x = xMin + ((px - left) / (width - left - right)) * (xMax - xMin);
        tip.textContent = "";
        tip.appendChild(el("div", { class: "dim" }, spec.xFormat(x)));
        for (const [s] of shown) {
          const k = nearest(s.xs, x);
          tip.appendChild(el("div", {}, el("i", { style: `display:inline-block;width:8px;height:8px;margin-right:4px;background:${s.color}` }),
            s.name + ": " + spec.yFormat(s.ys[k])));
        }
        cursor.setAttribute("x1", px); cursor.setAttribute("x2", px);
        cursor.setAttribute("visibility", "visible");
        tip.style.display = "block";
        tip.style.left = Math.min(px + 12, width - 220) + "px";
        tip.style.top = "8px";
      });
      overlay.addEventListener("mouseleave", () => { tip.style.display = "none"; cursor.setAttribute("visibility", "hidden"); });
      graph.appendChild(overlay);
      box.insertBefore(graph, tip);
    }
    box.appendChild(legend);
    box.appendChild(tip);
    draw();
    return box;
  }

  // ---- one run ------------------------------------------------------------
  function deviceFigures(device) {
    // The text report's rows for the device, worded once in Python.
    return figureTable(device.figures);
  }

  function deviceCharts(device) {
    const s = device.series;
    const part = el("div");
    if (!s || !s.time_ns.length) return part;
    const helpers = { el, svg, bytes, count, say, niceStep, bytesStep, nearest, groupTable, COLORS };
    part.appendChild(window.tpumemTimeline(helpers, device));
    const xs = s.time_ns.map((t) => t / 1e9);
    const span = [s.span_ns[0] / 1e9, s.span_ns[1] / 1e9];
    if (s.fragmentation.some((v) => v !== null)) {
      part.appendChild(el("h3", {}, say("fragmentation_title")));
      part.appendChild(chart({ series: [{ name: say("fragmentation_series", device.fragmentation.label), xs, ys: s.fragmentation, color: "#bc4c00" }],
        xFormat: (x) => x.toFixed(2) + " s", yFormat: (y) => (y === null ? "-" : y.toFixed(2)), yMax: 1, height: 160, steps: true, span }));
    }
    part.appendChild(el("p", { class: "note" }, say("thinned_note", count(s.time_ns.length), count(s.events))));
    return part;
  }

  function groupTable(groups) {
    const columns = heads("group_headers").map((title, k) => ({ title, numeric: k < 2 }));
    const rows = groups.map((g) => [
      { text: bytes(g.bytes), sort: g.bytes }, { text: count(g.count), sort: g.count },
      ...["op", "region", "shape", "source"].map((k) => {
        const text = k === "shape" ? (g.dtype || "") + (g.shape || "") : g[k];
        return { text: text || "-", sort: text || "" };
      }),
    ]);
    return el("div", { class: "scroll" }, sortableTable(columns, rows));
  }

  function peakTable(device) {
    const peak = device.peak;
    const part = el("div");
    part.appendChild(el("h3", {}, say("live_title")));
    part.appendChild(groupTable(peak.groups));
    if (peak.groups_total > peak.groups.length) {
      part.appendChild(el("p", { class: "note" }, say("groups_note", count(peak.groups.length), count(peak.groups_total))));
    }
    return part;
  }

  // ---- flame graph --------------------------------------------------------
  // Bytes live at the peak by call stack: the outermost frame on top, each
  // frame as wide as the bytes made below it. A click zooms into a frame (its
  // callers stay on top, full width; a click on one of them zooms out); the
  // search box marks the frames whose file, line or function holds the text.
  // With two runs (tpumem diff) a frame is as wide as the larger of its two
  // sizes and colored by its change: red grew, blue shrank. Frames of the two
  // runs are one frame when their file, function and line of code agree (the
  // line's number may have moved).
  // A library's frame by its package's path (jax/_src/api.py), not the whole
  // path to the environment it is installed in: the frame's label is short.
  function libraryFile(file) {
    const found = /[\\/](?:site|dist)-packages[\\/]/.exec(file);
    return found ? file.slice(found.index + found[0].length) : file;
  }

  function stackTree(runs) {
    const root = { name: "all", code: "", sizes: runs.map(() => 0), buffers: 0, children: new Map(), parent: null };
    runs.forEach((stacks, slot) => {
      for (const stack of stacks) {
        const frames = stack.frames.length ? stack.frames : [{ file: say("no_stack"), line: null, function: "", code: "" }];
        let node = root;
        root.sizes[slot] += stack.bytes;
        root.buffers += stack.buffers;
        for (const f of frames) {
          const key = [f.file, f.function, f.code || f.line].join("\u0000");
          let child = node.children.get(key);
          if (!child) {
            child = { name: "", code: f.code || "", sizes: runs.map(() => 0), buffers: 0, children: new Map(), parent: node };
            node.children.set(key, child);
          }
          const line = f.line === null ? "" : ":" + f.line;
          if (!child.name || slot === runs.length - 1) {
            const short = libraryFile(f.file) + line, where = f.file + line;
            child.name = f.function ? f.function + "  " + short : short;
            child.where = where; // (whole, in the frame's tooltip)
          }
          child.sizes[slot] += stack.bytes;
          child.buffers += stack.buffers;
          node = child;
        }
      }
    });
    return root;
  }

  function flameGraph(runs, title) {
    if (!runs.some((stacks) => stacks.some((s) => s.frames.length))) return null;
    const root = stackTree(runs);
    const two = runs.length === 2;
    // A frame's width: the larger of its sizes, and never less than its
    // children's together (with two runs, a child's larger size may be the other run's).
    (function widen(node) {
      let inner = 0;
      for (const child of node.children.values()) inner += widen(child);
      node.width = Math.max(...node.sizes, inner);
      return node.width;
    })(root);
    const size = (n) => n.width;
    const width = 1100, row = 18, part = el("div", { class: "flame" });
    const search = el("input", { type: "search", placeholder: say("search_frames"), "aria-label": say("search_frames") });
    const status = el("span", { class: "note" });
    part.appendChild(el("h3", {}, say("flame_hint", title)));
    part.appendChild(el("div", { class: "flame-bar" }, search, " ", status));
    const box = el("div", { class: "chart" });
    part.appendChild(box);
    let focus = root, graph = null;
    function fill(node, depth, hit) {
      if (hit) return "#e3b341";
      if (!two) return COLORS[depth % COLORS.length];
      const [before, after] = node.sizes;
      if (after === before) return "#8c959f";
      const strength = Math.min(1, Math.abs(after - before) / Math.max(before, after, 1));
      const light = Math.round(70 - 30 * strength);
      return after > before ? `hsl(355, 75%, ${light}%)` : `hsl(212, 75%, ${light}%)`;
    }
    function describe(node, label) {
      const total = size(root) || 1;
      if (!two) {
        return label + "\n" + say("frame_share", bytes(node.sizes[0]), (100 * node.sizes[0] / total).toFixed(1), count(node.buffers));
      }
      const [before, after] = node.sizes;
      const change = after - before;
      return label + "\n" + say("frame_change", bytes(before), bytes(after), (change > 0 ? "+" : change < 0 ? "-" : "±") + bytes(Math.abs(change)));
    }
    function draw() {
      if (graph) graph.remove();
      const text = search.value.trim().toLowerCase();
      const rows = [];
      for (let n = focus; n; n = n.parent) rows.unshift(n);
      const base = rows.length - 1;
      let deepest = base;
      const drawn = [];
      const span = size(focus) || 1;
      (function place(node, x, depth) {
        drawn.push([node, x, depth]);
        deepest = Math.max(deepest, depth);
        let offset = x;
        const children = [...node.children.values()].sort((a, b) => size(b) - size(a));
        for (const child of children) {
          const w = (size(child) / span) * width;
          if (w >= 0.5) place(child, offset, depth + 1);
          offset += w;
        }
      })(focus, 0, base);
      const tall = (deepest + 1) * row;
      graph = svg("svg", { width, height: tall, viewBox: `0 0 ${width} ${tall}`, role: "img", "aria-label": say("flame_label") });
      let matched = 0;
      const counted = new Set();
      const above = rows.slice(0, base).map((n, depth) => [n, 0, depth]);
      for (const [node, x, depth] of [...above, ...drawn]) {
        const w = node === focus || depth < base ? width : (size(node) / span) * width;
        const hit = text !== "" && node !== root && (node.name + " " + node.code).toLowerCase().includes(text);
        if (hit && depth >= base) {
          let inside = false;
          for (let n = node.parent; n; n = n.parent) if (counted.has(n)) inside = true;
          if (!inside) matched += node.sizes[node.sizes.length - 1];
          counted.add(node);
        }
        const g = svg("g", { class: "frame" + (hit ? " hit" : "") + (depth < base ? " caller" : "") });
        g.appendChild(svg("rect", { x: x, y: depth * row, width: Math.max(w - 0.5, 0.5), height: row - 1, fill: fill(node, depth, hit) }));
        const label = node === root ? (two ? say("flame_root_two") : say("flame_root", bytes(node.sizes[0]))) : node.name;
        const tip = svg("title");
        const whole = node.where && node.where !== label && !label.endsWith(node.where) ? "\n" + node.where : "";
        tip.textContent = describe(node, label + whole + (node.code ? "\n    " + node.code : ""));
        g.appendChild(tip);
        const chars = Math.floor((w - 6) / 6.5);
        if (chars >= 3) {
          const t = svg("text", { x: x + 3, y: depth * row + 13 });
          t.textContent = label.length > chars ? label.slice(0, chars - 1) + "…" : label;
          g.appendChild(t);
        }
        g.addEventListener("click", () => { focus = node === focus ? (node.parent || root) : node; draw(); });
        graph.appendChild(g);
      }
      const found = bytes(matched), percent = (100 * matched / (size(root) || 1)).toFixed(1);
      status.textContent = !text ? "" : two ? say("matched_two", found, percent) : say("matched", found, percent);
      box.appendChild(graph);
    }
    search.addEventListener("input", draw);
    draw();
    return part;
  }

  function fitTable(runs, names) {
    // Worded in Python (report/rows.py: the text report's answers); drawn here.
    const part = el("div");
    const fitted = runs.filter((r) => r.fit);
    if (!fitted.length) return part;
    const title = runs.length === 1 ? fitted[0].fit.title : data.fit_title;
    part.appendChild(el("h2", {}, title));
    part.appendChild(el("p", { class: "note" }, fitted[0].fit.explanation));
    const head = el("tr", {}, el("th", {}, say("accelerator_head")), el("th", { class: "num" }, say("memory_head")), ...names.map((n) => el("th", {}, n)));
    const table = el("table", {}, el("thead", {}, head));
    data.accelerators.forEach((acc, i) => {
      const cells = runs.map((run) => {
        const row = run.fit && run.fit.rows[i];
        if (!row) return el("td", {}, "-");
        return el("td", {}, el("span", { class: row.fits ? "best" : "no" }, row.answer),
          el("span", { class: "label" }, row.setting_text),
          row.capacity_text ? el("span", { class: "label" }, row.capacity_text) : null);
      });
      table.appendChild(el("tr", {}, el("td", {}, acc.name), el("td", { class: "num" }, bytes(acc.memory_bytes)), ...cells));
    });
    part.appendChild(table);
    for (const [i, run] of runs.entries()) {
      for (const note of (run.fit ? run.fit.notes : [])) part.appendChild(el("p", { class: "note" }, `${names[i]}: ${note}`));
    }
    part.appendChild(el("p", { class: "note" }, data.accelerators_note));
    return part;
  }

  function runFacts(run) {
    // The text report's rows, worded once in Python (Ended, Capture, Set by tpumem, ...).
    const part = el("div", {}, figureTable(run.facts.map(([name, value]) => [name, value, ""])));
    for (const warning of run.warnings) part.appendChild(el("p", { class: "note" }, say("warning", warning)));
    return part;
  }

  function banner(run) {
    // What failed (or, at the capacity asked about, would fail), worded in Python;
    // then what was live at each failure.
    const part = el("div");
    if (!run.headline.length) return part;
    const failed = run.out_of_memory.length || run.capacity.some((c) => c.failure);
    part.appendChild(el("div", { class: failed ? "banner failed" : "banner" },
      figureTable(run.headline.map(([name, value]) => [name, value, ""]))));
    for (const table of run.failure_tables) {
      part.appendChild(el("h3", {}, table.title));
      part.appendChild(groupTable(table.groups));
    }
    return part;
  }

  function bufferTable(buffers) {
    const columns = heads("buffer_headers").map((title, k) => ({ title, numeric: k === 0 }));
    const rows = buffers.map((b) => [
      { text: bytes(b.bytes) + (b.bytes > b.unpadded_bytes ? say("padding_suffix", bytes(b.bytes - b.unpadded_bytes)) : ""), sort: b.bytes },
      ...["kind", "shape", "source", "op", "instruction"].map((k) => ({ text: b[k] || "-", sort: b[k] || "" })),
    ]);
    return el("div", { class: "scroll" }, sortableTable(columns, rows));
  }

  function programDetail(program) {
    // One program as XProf's memory viewer shows it: the heap over program order
    // (whole-program buffers included), and what is live at its peak.
    const heap = program.heap;
    const part = el("div", { class: "program", "data-program": program.name });
    part.appendChild(el("h3", {}, say("program_peak_title", program.name, bytes(heap.peak_bytes)) +
      (heap.peak_instruction ? say("program_peak_at", heap.peak_instruction) : "")));
    if (heap.heap_bytes.length > 1) {
      const xs = heap.heap_bytes.map((_, k) => k);
      part.appendChild(chart({ series: [{ name: say("heap_series"), xs, ys: heap.heap_bytes, color: "#0969da" }],
        xFormat: (x) => say("event_axis", Math.round(x)), yFormat: bytes, yBytes: true, steps: true, height: 200 }));
    } else {
      part.appendChild(el("p", { class: "note" }, say("no_heap_note")));
    }
    part.appendChild(el("p", { class: "note" }, say("whole_program_note", bytes(heap.whole_program_bytes),
      bytes(heap.parameter_bytes), bytes(heap.output_bytes))));
    part.appendChild(bufferTable(heap.live_at_peak));
    return part;
  }

  function programsSection(run) {
    const part = el("div");
    if (!run.programs.length) return part;
    part.appendChild(el("h2", {}, say("programs_title", count(run.programs.length))));
    part.appendChild(el("p", { class: "note" }, say("programs_note")));
    const columns = heads("page_program_headers").map((title, k) => ({ title, numeric: k >= 1 && k <= 3 }));
    const rows = run.programs.map((p) => {
      const h = p.heap;
      const args = h ? h.parameter_bytes : p.argument_bytes, outs = h ? h.output_bytes : p.output_bytes;
      return [{ text: p.name, sort: p.name }, { text: bytes(p.peak_bytes), sort: p.peak_bytes },
        { text: bytes(args), sort: args || 0 }, { text: bytes(outs), sort: outs || 0 },
        { text: h ? h.peak_instruction || "-" : p.hlo_problem || "-", sort: h ? h.peak_instruction : "" }];
    });
    part.appendChild(el("div", { class: "scroll short" }, sortableTable(columns, rows)));
    const planned = run.programs.filter((p) => p.heap);
    if (!planned.length) return part;
    const select = el("select", { "aria-label": heads("page_program_headers")[0] });
    planned.forEach((p, i) => select.appendChild(el("option", { value: String(i) }, `${p.name} · ${bytes(p.peak_bytes)}`)));
    const focus = Math.max(0, planned.findIndex((p) => p.name === data.focus_program));
    select.value = String(focus);
    const detail = el("div");
    const show = () => { detail.textContent = ""; detail.appendChild(programDetail(planned[Number(select.value)])); };
    select.addEventListener("change", show);
    part.appendChild(el("p", {}, say("program_pick"), select));
    part.appendChild(detail);
    show();
    return part;
  }

  function tpuSection(run) {
    // What XLA:TPU compiled for each topology (--tpu), per chip; titles and notes
    // worded in Python. A program's TPU buffer assignment as the memory viewer shows it.
    const part = el("div");
    for (const target of run.tpu) {
      part.appendChild(el("h2", {}, target.title));
      if (target.verdict_text) {
        const fits = target.fit && target.fit.fits;
        part.appendChild(el("div", { class: fits ? "banner" : "banner failed" }, target.verdict_text));
      }
      const columns = heads("tpu_headers").map((title, k) => ({ title, numeric: k > 0 }));
      const sized = (n) => ({ text: bytes(n), sort: n || 0 });
      const rows = target.programs.map((p) => [{ text: p.name, sort: p.name }, { text: count(p.chips), sort: p.chips },
        sized(p.need_bytes), sized(p.argument_bytes), sized(p.output_bytes), sized(p.alias_bytes), sized(p.hbm_temp_bytes),
        sized(p.generated_code_bytes), p.heap ? sized(p.padding_at_peak_bytes) : { text: "-", sort: -1 }]);
      // Refused: XLA:TPU's own need, and no plan to break down.
      const refused = target.refused.map((r) => [{ text: r.name, sort: r.name }, { text: count(r.chips), sort: r.chips },
        { text: say("refused_need", r.needed ? bytes(r.needed.bytes) : "-"), sort: r.needed ? r.needed.bytes : 0 },
        ...columns.slice(3).map(() => ({ text: "-", sort: -1 }))]);
      rows.unshift(...refused);
      part.appendChild(el("div", { class: "scroll short" }, sortableTable(columns, rows)));
      for (const note of target.notes) part.appendChild(el("p", { class: "note" }, note));
      const planned = target.programs.filter((p) => p.heap);
      if (planned.length) part.appendChild(programDetail(planned[0]));
    }
    return part;
  }

  function answerSection(run) {
    // The answer first, worded in Python: the peak, its kinds, the lines that
    // hold it, what to change with the figure for each.
    const answer = run.answer;
    const part = el("div", { class: "answer" });
    if (!answer) return part;
    part.appendChild(el("h2", {}, answer.headline));
    for (const verdict of answer.verdicts) part.appendChild(el("p", {}, el("strong", {}, verdict)));
    for (const table of answer.tables) {
      part.appendChild(el("h3", {}, table.title));
      const columns = table.headers.map((title, k) => ({ title, numeric: k === 0 }));
      // The byte columns sort by the bytes Python gives; the rest by their words.
      const rows = table.rows.map((row, i) => row.map((text, k) => ({ text, sort: k === 0 ? table.bytes[i] : text })));
      part.appendChild(el("div", { class: "scroll short" }, sortableTable(columns, rows)));
    }
    for (const note of answer.notes) part.appendChild(el("p", { class: "note" }, note));
    if (answer.changes.length) {
      part.appendChild(el("h3", {}, answer.changes_title));
      part.appendChild(el("ul", { class: "changes" }, ...answer.changes.map(([figure, sentence, how]) =>
        el("li", {}, el("strong", {}, figure), " ", sentence, " ", el("span", { class: "dim" }, `(${how})`)))));
    }
    return part;
  }

  function runSections(run) {
    const part = el("div");
    // The answer, then each device's timeline before its tables (it came a screen
    // and a half down), then the run's facts.
    part.appendChild(banner(run));
    part.appendChild(answerSection(run));
    if (!run.devices.length) part.appendChild(el("p", {}, say("no_events")));
    for (const device of run.devices) {
      part.appendChild(el("h2", {}, say("device_title", device.device, device.fidelity, count(device.allocations))));
      part.appendChild(deviceCharts(device));
      part.appendChild(deviceFigures(device));
      part.appendChild(peakTable(device));
      const flame = flameGraph([device.peak.stacks || []], say("stacks_title"));
      if (flame) part.appendChild(flame);
    }
    part.appendChild(runFacts(run));
    part.appendChild(programsSection(run));
    part.appendChild(tpuSection(run));
    return part;
  }

  function renderReport() {
    const run = data.runs[0];
    app.appendChild(el("h1", {}, say("report_title", run.path || run.framework)));
    app.appendChild(runSections(run));
    app.appendChild(fitTable([run], [run.framework]));
  }

  // ---- several runs -------------------------------------------------------
  // One column per run: each value, the lowest marked, how it was obtained and
  // its ratio against the first run (compare_json.py's rows).
  function compareTable(cmp, rows) {
    const head = el("tr", {}, el("th", {}, say("figure_head")), ...cmp.names.map((n, i) =>
      el("th", {}, n, el("span", { class: "label" }, `${cmp.devices[i] || "-"} · ${data.runs[i].path || ""}`))));
    const table = el("table", {}, el("thead", {}, head));
    for (const row of rows) {
      const format = FORMATS[row.unit] || FORMATS.text;
      const cells = row.values.map((value, i) => {
        const notes = [];
        if (value !== null && row.labels[i] && row.labels[i] !== data.words.not_available) notes.push(row.labels[i]);
        if (i > 0 && row.ratios[i] !== null && ["bytes", "count", "per second"].includes(row.unit)) notes.push("×" + row.ratios[i].toFixed(2));
        return el("td", { class: "num" }, el("span", { class: row.best === i ? "best" : null }, format(value)),
          notes.length ? el("span", { class: "label" }, notes.join(", ")) : null);
      });
      table.appendChild(el("tr", {}, el("th", {}, row.figure), ...cells));
    }
    return table;
  }

  function renderCompare() {
    const cmp = data.comparison, names = cmp.names;
    app.appendChild(el("h1", {}, say("compare_title", names.join(" / "))));
    app.appendChild(compareTable(cmp, cmp.rows));
    app.appendChild(el("p", { class: "note" }, say("compare_note")));

    const aligned = cmp.alignment === "step";
    const useSeries = [], fragSeries = [];
    data.runs.forEach((run, i) => {
      const device = run.devices.find((d) => d.device === cmp.devices[i]);
      if (!device || !device.series || !device.series.time_ns.length) return;
      const s = device.series;
      const t0 = s.time_ns[0], span = Math.max(1, s.time_ns[s.time_ns.length - 1] - t0);
      const xs = aligned ? s.step_position : s.time_ns.map((t) => (t - t0) / span);
      useSeries.push({ name: names[i], xs, ys: s.in_use, color: COLORS[i] });
      if (s.fragmentation.some((v) => v !== null)) fragSeries.push({ name: names[i], xs, ys: s.fragmentation, color: COLORS[i] });
    });
    const xFormat = aligned ? (x) => say("step_axis", x.toFixed(1)) : (x) => (100 * x).toFixed(0) + "%";
    app.appendChild(el("h2", {}, say("overlaid_title")));
    app.appendChild(el("p", { class: "note" }, aligned ? say("by_step_note") : say("by_time_note")));
    app.appendChild(chart({ series: useSeries, xFormat, yFormat: bytes, yBytes: true, steps: true }));
    if (fragSeries.length) {
      app.appendChild(el("h2", {}, say("fragmentation_overlaid_title")));
      app.appendChild(chart({ series: fragSeries, xFormat, yFormat: (y) => (y === null ? "-" : y.toFixed(2)), yMax: 1, height: 180, steps: true }));
    }

    app.appendChild(el("h2", {}, say("differences_title")));
    const kindWords = data.words.kind_words;
    app.appendChild(kindBars(names, cmp.kinds, kindWords));
    const kindColumns = [{ title: say("kind_head") }, ...names.map((n, i) => ({ title: i ? say("against_first", n, names[0]) : n, numeric: true }))];
    const kindRows = cmp.kinds.map((r) => [{ text: kindWords[r.kind], sort: r.kind }, ...r.bytes.map((b, i) => ({
      text: bytes(b) + (i ? ` (${r.change[i] > 0 ? "+" : ""}${r.change[i] ? bytes(r.change[i]) : "="})` : ""), sort: b }))]);
    app.appendChild(sortableTable(kindColumns, kindRows));
    if (cmp.difference) app.appendChild(el("p", { class: "note" }, cmp.difference));
    const depth = Math.max(0, ...cmp.top_ops.map((t) => t.length));
    const ops = el("table", {}, el("thead", {}, el("tr", {}, ...names.map((n) => el("th", {}, n)))));
    for (let k = 0; k < depth; k++) {
      ops.appendChild(el("tr", {}, ...cmp.top_ops.map((top) => el("td", {}, k < top.length ? `${bytes(top[k][1])} ${top[k][0]}` : ""))));
    }
    app.appendChild(el("h3", {}, say("top_ops_title")));
    app.appendChild(ops);
    if (cmp.program_rows.length) {
      app.appendChild(el("h2", {}, say("step_program_title")));
      app.appendChild(compareTable(cmp, cmp.program_rows));
    }
    app.appendChild(fitTable(data.runs, names));
    data.runs.forEach((run, i) => {
      const details = el("details", {}, el("summary", {}, say("every_figure", names[i])));
      details.appendChild(runSections(run));
      app.appendChild(details);
    });
  }

  // ---- two runs of one program (tpumem diff) -------------------------------
  function renderDiff() {
    const diff = data.diff;
    app.appendChild(el("h1", {}, say("diff_title", diff.before || "?", diff.after || "?")));
    if (diff.frameworks_note) app.appendChild(el("p", { class: "note" }, diff.frameworks_note));
    app.appendChild(el("p", { class: "note" }, say("noise_note", bytes(diff.noise_bytes))));
    if (diff.process_rows) {
      app.appendChild(el("h2", {}, say("process_peaks_title")));
      const table = el("table", {}, el("tr", {}, ...heads("diff_process_headers").map((h) => el("th", {}, h))));
      for (const row of diff.process_rows) table.appendChild(el("tr", {}, el("th", {}, row[0]), ...row.slice(1).map((c) => el("td", { class: "num" }, c))));
      app.appendChild(table);
      app.appendChild(el("p", {}, diff.pair_note));
    }
    for (const device of diff.devices) {
      app.appendChild(el("h2", {}, device.title));
      const table = el("table", {}, el("tr", {}, ...heads("diff_figure_headers").map((h) => el("th", {}, h))));
      for (const row of device.figure_rows) {
        table.appendChild(el("tr", {}, el("th", {}, row[0]), ...row.slice(1).map((c) => el("td", { class: "num" }, c))));
      }
      app.appendChild(table);
      const [before, after] = data.runs.map((run) => run.devices.find((d) => d.device === device.device));
      const series = [];
      [before, after].forEach((d, i) => {
        const s = d && d.series;
        if (!s || !s.time_ns.length) return;
        const total = s.time_ns.map((_, k) => s.regions.reduce((sum, [, values]) => sum + (values[k] || 0), 0));
        series.push({ name: heads("diff_figure_headers")[i ? 2 : 1], xs: s.time_ns.map((t) => t / 1e9), ys: total, color: i ? "#cf222e" : "#0969da" });
      });
      if (series.length) {
        app.appendChild(el("h3", {}, say("diff_in_use_title")));
        app.appendChild(chart({ series, xFormat: (x) => x.toFixed(2) + " s", yFormat: bytes, yBytes: true, steps: true }));
      }
      if (device.steps.length) {
        const xs = device.steps.map((s) => s.step);
        app.appendChild(el("h3", {}, say("diff_steps_title")));
        app.appendChild(chart({ series: [
          { name: heads("diff_figure_headers")[1], xs, ys: device.steps.map((s) => s.before), color: "#0969da" },
          { name: heads("diff_figure_headers")[2], xs, ys: device.steps.map((s) => s.after), color: "#cf222e" },
        ], xFormat: (x) => say("step_axis", Math.round(x)), yFormat: bytes, yBytes: true }));
      }
      for (const [field, title] of data.words.breakdowns) {
        const changes = device[field];
        if (!changes.length) continue;
        app.appendChild(el("h3", {}, say("diff_live_title", title.split(",")[0])));
        const columns = [...heads("change_headers").map((t) => ({ title: t, numeric: true })), { title }];
        const rows = changes.map((c) => [
          { text: (c.change > 0 ? "+" : "-") + bytes(Math.abs(c.change)), sort: c.change },
          { text: bytes(c.before), sort: c.before }, { text: bytes(c.after), sort: c.after }, { text: c.name, sort: c.name }]);
        app.appendChild(el("div", { class: "scroll short" }, sortableTable(columns, rows)));
      }
      const flame = flameGraph([before ? before.peak.stacks : [], after ? after.peak.stacks : []],
        say("diff_stacks_title"));
      if (flame) app.appendChild(flame);
    }
  }

  // ---- the processes of one distributed run ---------------------------------
  // Tables worded in Python (run_report.py); each process's bytes in use on its
  // busiest device, on one axis: by step where every process marked its steps,
  // else by the hosts' wall clocks from the earliest start.
  function renderProcesses() {
    const run = data.processes;
    const ids = run.run_ids.length === 1 ? say("run_id", run.run_ids[0]) : "";
    app.appendChild(el("h1", {}, say("processes_report_title", run.path, run.processes.length, ids)));
    for (const note of run.notes) app.appendChild(el("p", { class: "note" }, say("warning", note)));
    const headers = heads("process_headers");
    const columns = headers.map((title, k) => ({ title, numeric: k >= 2 && k <= 6 }));
    const sorts = run.processes.map((p) => [p.index, p.host, p.peak_bytes, p.peak_device, p.peak_step, p.pool_bytes, p.fragmentation_at_peak, p.ended]);
    const rows = run.rows.map((row, i) => row.map((text, k) => ({ text, sort: sorts[i][k] === null ? -1 : sorts[i][k] })));
    app.appendChild(el("h2", {}, say("processes_title")));
    app.appendChild(el("div", { class: "scroll short" }, sortableTable(columns, rows)));
    app.appendChild(el("h2", {}, say("spread_title")));
    const spread = el("table", {}, el("tr", {}, ...heads("spread_headers").map((h) => el("th", {}, h))));
    for (const row of run.spread_rows) spread.appendChild(el("tr", {}, el("th", {}, row[0]), ...row.slice(1).map((c) => el("td", { class: "num" }, c))));
    app.appendChild(spread);
    app.appendChild(el("p", {}, run.summary));
    const stepped = run.axis === "step";
    const start = Math.min(...run.lines.map((l) => l.time_ns[0]));
    const series = run.lines.map((line, i) => ({ name: line.name, color: COLORS[i % COLORS.length], ys: line.in_use,
      xs: stepped ? line.step_position : line.time_ns.map((t) => (t - start) / 1e9) }));
    if (series.length) {
      app.appendChild(el("h2", {}, say("process_lines_title")));
      app.appendChild(el("p", { class: "note" }, stepped ? say("process_steps_note") : say("process_clocks_note")));
      app.appendChild(chart({ series, xFormat: stepped ? (x) => say("step_axis", x.toFixed(1)) : (x) => x.toFixed(2) + " s", yFormat: bytes, yBytes: true, steps: true }));
    }
    app.appendChild(el("h2", {}, run.busiest_title));
    app.appendChild(runSections(data.runs[0]));
  }

  app.textContent = "";
  if (data.kind === "compare") renderCompare();
  else if (data.kind === "diff") renderDiff();
  else if (data.kind === "processes") renderProcesses();
  else renderReport();
  document.body.setAttribute("data-rendered", "ok");
  performance.mark("tpumem-drawn"); // (benchmarks/page_scale.py times the page to here)
})();
