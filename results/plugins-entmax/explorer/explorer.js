// maxbench explorer: renders the data embedded in index.html. Generated text is untrusted: it only
// ever enters the page as text nodes (textContent, createTextNode), never as markup, and each such
// text is isolated for bidi (u(): a <bdi>), so a right-to-left override (U+202E) left open in a prompt or a
// text cannot reverse the labels around it.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("maxbench-data").textContent);
  const LB = D.leaderboard;
  const chunks = {};
  const waiting = {};

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(typeof kid === "string" ? document.createTextNode(kid) : kid);
    return e;
  }
  // an untrusted text (prompt, reference, generated text, system or annotator name), isolated for bidi
  function u(text) { return el("bdi", { class: "u" }, String(text)); }
  const SVG = "http://www.w3.org/2000/svg";
  function sv(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // how a score is shown is the metric's declaration (its ScoreInfo), carried in LB.meta: no list here
  function metaOf(col) { return LB.meta[col] || {}; }
  function metaScale(col) { const s = metaOf(col).scale; return typeof s === "number" ? s : 1; }
  function fmt(v, col) {
    if (v === null || v === undefined) return "n/a";
    const d = metaOf(col).digits;
    return (v * metaScale(col)).toFixed(typeof d === "number" ? d : 2);
  }
  function colName(col) { return col.startsWith("human:") ? col.slice(6) + " (human)" : col; }
  const HUMAN_ROW = LB.rows.find((r) => r.human) || null;
  function goalOf(col) { const g = metaOf(col).goal; return g || (metaOf(col).higher_is_better === false ? "lower" : "higher"); }
  function goalArrow(col) { return { higher: "↑", lower: "↓", human: "≈" }[goalOf(col)]; }
  function goalText(col) {
    const g = metaOf(col).goal;
    const t = { higher: "higher is better", lower: "lower is better", human: "closest to the human row is better" }[goalOf(col)];
    return g ? t : t + " (no goal declared: the metric's direction)";
  }
  // the sort key of a cell: its value, or for a closest-to-human score its distance to the human row
  function sortValue(r, col) {
    const v = (r.cells[col] || {}).v;
    if (v === null || v === undefined) return null;
    if (goalOf(col) !== "human") return v;
    const h = HUMAN_ROW && (HUMAN_ROW.cells[col] || {}).v;
    return h === null || h === undefined ? null : Math.abs(v - h);
  }
  // a system name wraps only after "/" or ",", never inside a model name such as "smollm2-135m"
  function breakable(s) { return s.split(/(?<=[\/,])/).flatMap((part) => [el("span", { class: "nw" }, part), el("wbr")]); }
  // a system's label: its layer and decoding, and its model part too when the systems differ in it
  // (two base models, or a model with and without an adapter: "smollm2-135m+lora")
  const MANY_MODELS = new Set(D.systems.map((s) => s.split("/")[0])).size > 1;
  function shortSystem(s) {
    const p = s.split("/");
    if (p.length !== 3) return s;
    const tail = p[1] + (p[2] !== "top_p=0.9" ? " / " + p[2] : "");
    return MANY_MODELS ? p[0] + " / " + tail : tail;
  }

  // ------------------------------------------------------------ views
  function show(view) {
    for (const b of document.querySelectorAll("#views button")) b.setAttribute("aria-pressed", String(b.dataset.view === view));
    for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
    if (view === "prompts" && !state.selected) selectPrompt(filtered()[0]);
    if (view === "plots") drawPlots();
    if (view === "frontiers") drawFrontiers();
  }
  for (const b of document.querySelectorAll("#views button")) b.addEventListener("click", () => show(b.dataset.view));
  if (D.study) document.querySelector('#views button[data-view="humans"]').hidden = false;
  if (D.frontiers) document.querySelector('#views button[data-view="frontiers"]').hidden = false;
  for (const w of D.warnings) document.getElementById("warnings").append(el("div", {}, "Partial view: ", u(w)));

  // ------------------------------------------------------------ leaderboard
  const state = { columns: "compact", sort: null, dir: -1, selected: null, shade: "p" };
  function visibleColumns() {
    if (state.columns === "compact") return LB.compact.length ? LB.compact : LB.columns.slice(0, 9);
    if (state.columns === "all") return LB.columns;
    return LB.columns.filter((c) => LB.meta[c].family === state.columns);
  }
  function boardTools() {
    const tools = document.getElementById("board-tools");
    tools.textContent = "";
    const fams = LB.families.filter(([k]) => LB.columns.some((c) => LB.meta[c].family === k));
    const choices = [["compact", "Compact"], ...fams, ["all", "All metrics (" + LB.columns.length + ")"]];
    for (const [key, label] of choices) {
      tools.append(el("button", { type: "button", "aria-pressed": String(state.columns === key), "data-columns": key,
        onclick: () => { state.columns = key; boardTools(); drawBoard(); } }, label));
    }
  }
  function drawBoard() {
    const cols = visibleColumns();
    const table = document.getElementById("board");
    table.textContent = "";
    const famRow = el("tr", {}, el("th", { colspan: 1 }));
    let last = null;
    for (const c of cols) {
      const f = LB.meta[c].family;
      if (last && last.dataset.family === f) last.colSpan += 1;
      else { last = el("th", { class: "fam", "data-family": f }, (LB.families.find((x) => x[0] === f) || [f, f])[1]); famRow.append(last); }
    }
    const head = el("tr", {}, el("th", { class: "left" }, "system"));
    for (const c of cols) {
      const arrow = goalArrow(c);
      const th = el("th", { scope: "col", "data-col": c, "data-goal": goalOf(c), title: (metaOf(c).display || colName(c)) + ": " + goalText(c) },
        el("button", { type: "button", onclick: () => { state.dir = state.sort === c ? -state.dir : (goalOf(c) === "higher" ? -1 : 1); state.sort = c; drawBoard(); } }, colName(c) + " " + arrow));
      if (state.sort === c) th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
      head.append(th);
    }
    table.append(el("thead", {}, famRow, head));
    const body = el("tbody");
    let rows = LB.rows.map((r, i) => [r, i]);
    if (state.sort) {
      const key = state.sort;
      rows.sort(([a, i], [b, j]) => {
        if (a.human || b.human) return a.human ? (b.human ? i - j : -1) : 1;  // the human row stays first
        if (LB.grouped && a.model !== b.model) return i - j;
        const va = sortValue(a, key), vb = sortValue(b, key);
        if (va === null || va === undefined) return 1;
        if (vb === null || vb === undefined) return -1;
        return state.dir * (va - vb) || i - j;
      });
    }
    let model = null;
    for (const [r] of rows) {
      if (LB.grouped && !r.human && r.model !== model) {
        model = r.model;
        body.append(el("tr", { class: "group" }, el("td", { colspan: cols.length + 1 }, "base model: ", u(r.model))));
      }
      const tr = el("tr", { "data-system": r.system, class: r.human ? "human" : null }, el("td", { class: "sys", title: r.human ? r.signature || r.system : r.system },
        el("bdi", { class: "u" }, ...breakable(r.label)), r.partial ? el("span", { class: "badge" }, "partial " + r.coverage[0] + "/" + r.coverage[1]) : null));
      for (const c of cols) {
        const e = r.cells[c];
        if (!e) { tr.append(el("td", { class: "num" })); continue; }
        const ci = e.lo !== null && e.lo !== undefined ? "[" + fmt(e.lo, c) + ", " + fmt(e.hi, c) + "]" : "";
        tr.append(el("td", { class: "num" + (e.best ? " best" : ""), "data-col": c, title: e.why || (e.p !== null ? "p = " + e.p : "") },
          fmt(e.v, c), e.mark ? el("span", { class: "mark" }, e.mark) : null, ci ? el("span", { class: "ci" }, ci) : null));
      }
      body.append(tr);
    }
    table.append(body);
    const base = LB.baselines.length ? ["the baseline ", ...LB.baselines.flatMap((b, k) => k ? [", ", u(b)] : [u(b)])] : ["no baseline"];
    const note = document.getElementById("board-note");
    note.textContent = "";
    const asIs = LB.columns.filter((c) => metaScale(c) === 1 && !c.startsWith("human:")).map((c) => metaOf(c).display || c);
    const closest = LB.columns.filter((c) => goalOf(c) === "human").map((c) => metaOf(c).display || c);
    const undeclared = LB.columns.filter((c) => !metaOf(c).goal).map((c) => metaOf(c).display || c);
    note.append("Scores ×100 except " + (asIs.length ? asIs.join(", ") + " and " : "") + "human ratings (as computed); " +
      "[95% interval]; bold = best in column" + (LB.grouped ? " within its base model" : "") +
      ": ↑ highest, ↓ lowest" + (closest.length ? ", ≈ closest to the human row (" + closest.join(", ") + ")" : "") +
      (undeclared.length ? "; no goal declared, so by the metric's direction: " + undeclared.join(", ") : "") +
      "; * p < 0.05, ** p < 0.01 (paired permutation test against ", ...base,
      (closest.length && HUMAN_ROW ? "; for ≈ scores the test is of the distance to the human row, |system − human| − |baseline − human|, prompts resampled jointly for system, baseline and references, and 'closer' or 'farther' says which way" : "") +
      "). " + (HUMAN_ROW ? "The first row is the suite's references scored as a system's texts (" + (HUMAN_ROW.signature || "") + "); n/a where a metric compares with the references. " : "") +
      "Click a header to sort; " +
      "the buttons above switch between the compact view, one metric family and all " + LB.columns.length + " metrics.");
  }

  // ------------------------------------------------------------ prompts
  function loadChunk(c) {
    if (chunks[c]) return Promise.resolve(chunks[c]);
    if (!waiting[c]) {
      waiting[c] = new Promise((resolve, reject) => {
        const s = document.createElement("script");
        s.src = "data/prompts-" + String(c).padStart(3, "0") + ".js";
        s.onload = () => resolve(chunks[c]);
        s.onerror = () => reject(new Error("cannot load " + s.src));
        document.head.append(s);
      });
    }
    return waiting[c];
  }
  window.maxbenchChunk = function (c, records) { chunks[c] = records; };

  const flagSel = document.getElementById("flag-filter");
  for (const [v, label] of [["", "any"], ...D.flags.map((f) => [f, f]), ...(D.study ? [["rated", "rated in the study"]] : [])])
    flagSel.append(el("option", { value: v }, label));
  const diffSel = document.getElementById("diff-metric");
  diffSel.append(el("option", { value: "" }, "(none)"));
  for (const m of D.diff_metrics) diffSel.append(el("option", { value: m }, m));

  function diffOf(p, m) {
    const vals = p.scores[m];
    if (!vals) return null;
    let best = null;
    D.systems.forEach((s, i) => {
      const b = D.baseline_of[i] ? D.systems.indexOf(D.baseline_of[i]) : 0;
      if (b < 0 || b === i || vals[i] === null || vals[b] === null) return;
      const d = vals[i] - vals[b];
      if (best === null || Math.abs(d) > Math.abs(best)) best = d;
    });
    return best;
  }
  const searchText = {};
  function filtered() {
    const q = document.getElementById("search").value.trim().toLowerCase();
    const flag = flagSel.value, m = diffSel.value, min = parseFloat(document.getElementById("diff-min").value) || 0;
    return D.prompts.map((p, i) => i).filter((i) => {
      const p = D.prompts[i];
      if (q && !(p.key.toLowerCase().includes(q) || p.head.toLowerCase().includes(q) || (searchText[i] || "").includes(q))) return false;
      if (flag === "rated" && !p.rated) return false;
      if (flag && flag !== "rated" && !p.flags.some((f) => f.includes(flag))) return false;
      if (m) { const d = diffOf(p, m); if (d === null || Math.abs(d) * metaScale(m) < min) return false; }
      return true;
    });
  }
  function drawList() {
    const list = document.getElementById("prompt-list");
    list.textContent = "";
    const idx = filtered();
    document.getElementById("prompt-count").textContent = idx.length + " of " + D.prompts.length + " prompts";
    const m = diffSel.value;
    for (const i of idx.slice(0, 300)) {
      const p = D.prompts[i];
      const flags = [...new Set(p.flags.flat())];
      const li = el("li", { "data-key": p.key, "aria-selected": String(state.selected === i), onclick: () => selectPrompt(i) },
        el("b", {}, u(p.key), " "), u(p.head.slice(0, 90)),
        ...flags.map((f) => el("span", { class: "badge" }, u(f))), p.rated ? el("span", { class: "badge rated" }, "rated") : null,
        m && diffOf(p, m) !== null ? el("span", { class: "badge" }, "Δ " + (diffOf(p, m) * metaScale(m)).toFixed(2)) : null);
      list.append(li);
    }
  }
  for (const id of ["search", "flag-filter", "diff-metric", "diff-min"]) document.getElementById(id).addEventListener("input", drawList);
  document.getElementById("search").addEventListener("input", () => {
    // texts are searched too, once their chunks are loaded: load them all on the first search
    for (let c = 0; c < D.n_chunks; c++) loadChunk(c).then((recs) => {
      recs.forEach((r, k) => { searchText[c * D.chunk + k] = (r.prompt + "\n" + r.reference + "\n" + r.texts.map((t) => (t ? t.text : "")).join("\n")).toLowerCase(); });
      if (c === D.n_chunks - 1) drawList();
    });
  }, { once: true });
  document.getElementById("shade").addEventListener("input", (e) => { state.shade = e.target.value; if (state.selected !== null) selectPrompt(state.selected); });

  function level(ch) { const k = D.code.indexOf(ch); return k < 0 ? null : (k + 0.5) / D.levels; }
  function shadeOf(p, h) {
    if (state.shade === "p" && p !== null) return "rgba(214, 96, 30, " + (0.75 * (1 - p)).toFixed(3) + ")";
    if (state.shade === "h" && h !== null) return "rgba(40, 100, 200, " + (0.7 * h).toFixed(3) + ")";
    return "";
  }
  function tokens(t) {
    const box = el("div", { class: "text" });
    if (!t.pieces) { box.append(document.createTextNode(t.text)); return box; }
    t.pieces.forEach((piece, k) => {
      const p = level(t.p[k] || "."), h = level(t.h[k] || ".");
      const span = el("span", { class: "tok", tabindex: "0", "data-step": k + 1, "data-p": p === null ? "" : p.toFixed(3),
        "data-h": h === null ? "" : (h * D.entropy_max).toFixed(2) }, piece);
      span.style.background = shadeOf(p, h);
      box.append(span);
    });
    return box;
  }
  const tip = document.getElementById("tip");
  function showTip(span) {
    const p = span.dataset.p, h = span.dataset.h;
    tip.textContent = "";
    tip.append("token ", u(JSON.stringify(span.textContent)), " (step " + span.dataset.step + ")\n" +
      "p(chosen) ≈ " + (p === "" ? "n/a" : p) + "   entropy ≈ " + (h === "" ? "n/a" : h + " nats"));
    const r = span.getBoundingClientRect();
    tip.style.left = (window.scrollX + r.left) + "px";
    tip.style.top = (window.scrollY + r.bottom + 4) + "px";
    tip.hidden = false;
  }
  document.getElementById("cards").addEventListener("mouseover", (e) => { if (e.target.classList.contains("tok")) showTip(e.target); });
  document.getElementById("cards").addEventListener("focusin", (e) => { if (e.target.classList.contains("tok")) showTip(e.target); });
  document.getElementById("cards").addEventListener("mouseout", () => { tip.hidden = true; });

  function selectPrompt(i) {
    if (i === undefined || i === null) return;
    state.selected = i;
    drawList();
    const c = Math.floor(i / D.chunk);
    loadChunk(c).then((recs) => {
      if (state.selected !== i) return;
      const r = recs[i - c * D.chunk];
      const head = document.getElementById("prompt-head");
      head.textContent = "";
      head.append(el("div", { class: "prompt" }, el("span", { class: "label" }, "prompt ", u(r.key)), u(r.prompt)),
        el("div", { class: "ref" }, el("span", { class: "label" }, "reference"), u(r.reference)));
      const cards = document.getElementById("cards");
      cards.textContent = "";
      D.systems.forEach((s, k) => {
        const t = r.texts[k];
        const card = el("div", { class: "card", "data-system": s }, el("h3", { title: s }, u(shortSystem(s))));
        if (!t) { card.append(el("p", { class: "note" }, "no text for this prompt")); cards.append(card); return; }
        for (const f of t.flags) card.querySelector("h3").append(el("span", { class: "badge" }, u(f)));
        card.append(tokens(t));
        const meta = t.finish ? ["finish: ", u(t.finish)] : [];
        if (t.ref_zero) meta.push((meta.length ? " · " : "") + t.ref_zero[0] + " of " + t.ref_zero[1] + " reference tokens got probability 0");
        card.append(el("div", { class: "meta" }, ...meta));
        const rated = r.ratings && r.ratings[k];
        if (rated) card.append(el("div", { class: "ratings" }, "ratings: ",
          ...Object.entries(rated).flatMap(([a, v], n) => [n ? " · " : "", u(a), " " + v.join(", ")])));
        cards.append(card);
      });
    });
    document.getElementById("legend").textContent = state.shade === "p" ? "darker orange = lower probability of the chosen token"
      : state.shade === "h" ? "darker blue = higher entropy (up to " + D.entropy_max + " nats)" : "";
  }

  // ------------------------------------------------------------ plots
  let plotted = false;
  function axes(svg, W, H, m, xr, yr, xlabel, ylabel, logx) {
    const X = (v) => m.l + ((logx ? Math.log10(v) : v) - xr[0]) / (xr[1] - xr[0] || 1) * (W - m.l - m.r);
    const Y = (v) => H - m.b - (v - yr[0]) / (yr[1] - yr[0] || 1) * (H - m.t - m.b);
    const decades = [];
    for (let d = Math.ceil(xr[0]); logx && d <= xr[1]; d++) decades.push(d);
    for (const xv of decades.length >= 2 ? decades : ticks(xr)) {
      const xs = X(logx ? 10 ** xv : xv);
      svg.append(sv("line", { class: "grid", x1: xs, x2: xs, y1: m.t, y2: H - m.b }));
      svg.append(sv("text", { class: "tick", x: xs, y: H - m.b + 16, "text-anchor": "middle" }, logx ? +(10 ** xv).toPrecision(2) : tickText(xv)));
    }
    for (const yv of ticks(yr)) {
      const ys = Y(yv);
      svg.append(sv("line", { class: "grid", x1: m.l, x2: W - m.r, y1: ys, y2: ys }));
      svg.append(sv("text", { class: "tick", x: m.l - 6, y: ys + 4, "text-anchor": "end" }, tickText(yv)));
    }
    svg.append(sv("text", { x: (W + m.l - m.r) / 2, y: H - 6, "text-anchor": "middle" }, xlabel));
    svg.append(sv("text", { x: 14, y: (H - m.b + m.t) / 2, transform: "rotate(-90 14 " + (H - m.b + m.t) / 2 + ")", "text-anchor": "middle" }, ylabel));
    return [X, Y];
  }
  // round tick values (1, 2 or 5 x 10^k apart, 3 to 7 of them) inside [lo, hi]
  function ticks([lo, hi]) {
    const raw = (hi - lo) / 5 || 1, mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((v) => v >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  function tickText(v) { return String(+v.toPrecision(6)); }
  function range(vals, pad) { const lo = Math.min(...vals), hi = Math.max(...vals), d = (hi - lo) || Math.abs(hi) || 1; return [lo - d * pad, hi + d * pad]; }
  const COLORS = ["#1d4f91", "#d6601e", "#2e8540", "#9b2d86", "#b3261e", "#5b6573", "#0f8a9d", "#8a6d00", "#4b3fb8", "#7a4e2d"];
  function figure(title, caption, svg) { return el("figure", {}, el("h3", { text: title }), svg, el("figcaption", { text: caption })); }
  function scatter(xcol, ycol, title) {
    const pts = LB.rows.map((r, i) => [r, i]).filter(([r]) => r.cells[xcol] && r.cells[ycol] && r.cells[xcol].v !== null && r.cells[ycol].v !== null);
    if (pts.length === 0) return null;
    const W = 620, H = 400, m = { l: 60, r: 20, t: 16, b: 44 };
    const sx = metaScale(xcol), sy = metaScale(ycol);
    const xs = pts.flatMap(([r]) => [r.cells[xcol].lo ?? r.cells[xcol].v, r.cells[xcol].hi ?? r.cells[xcol].v].map((v) => v * sx));
    const ys = pts.flatMap(([r]) => [r.cells[ycol].lo ?? r.cells[ycol].v, r.cells[ycol].hi ?? r.cells[ycol].v].map((v) => v * sy));
    const svg = sv("svg", { width: W, height: H, role: "img", "aria-label": title });
    const [X, Y] = axes(svg, W, H, m, range(xs, 0.08), range(ys, 0.08), colName(xcol) + " ×" + sx + " (lower = more diverse)", colName(ycol) + " ×" + sy + " (quality)");
    pts.forEach(([r, i]) => {
      const cx = r.cells[xcol], cy = r.cells[ycol], col = COLORS[i % COLORS.length];
      if (cx.lo !== null && cx.lo !== undefined) svg.append(sv("line", { x1: X(cx.lo * sx), x2: X(cx.hi * sx), y1: Y(cy.v * sy), y2: Y(cy.v * sy), stroke: col, "stroke-width": 1.5 }));
      if (cy.lo !== null && cy.lo !== undefined) svg.append(sv("line", { x1: X(cx.v * sx), x2: X(cx.v * sx), y1: Y(cy.lo * sy), y2: Y(cy.hi * sy), stroke: col, "stroke-width": 1.5 }));
      svg.append(sv("circle", { cx: X(cx.v * sx), cy: Y(cy.v * sy), r: 4.5, fill: col }));
      svg.append(sv("text", { x: X(cx.v * sx) + 7, y: Y(cy.v * sy) - 7, fill: col }, shortSystem(r.system)));
    });
    return figure(title, "Each point is a system; bars are the 95% bootstrap intervals over prompts.", svg);
  }
  function lambdaSweep() {
    const pts = [];
    LB.rows.forEach((r) => {
      const args = (r.system.match(/\/graphmax\(([^)]*)\)\//) || [null, null])[1];
      if (!args) return;
      const kv = Object.fromEntries((args || "").split(",").filter(Boolean).map((s) => s.split("=")));
      if (kv.lam && (kv.solver || "exact") === "exact" && r.cells["bleu-4"] && r.cells["bleu-4"].v !== null) pts.push([+kv.lam, r.cells["bleu-4"]]);
    });
    if (new Set(pts.map((p) => p[0])).size < 2) return el("p", { class: "note" }, "No λ sweep in these runs (it needs graphmax at two or more λ values: maxbench run --lineup lambda-sweep).");
    pts.sort((a, b) => a[0] - b[0]);
    const W = 620, H = 400, m = { l: 60, r: 20, t: 16, b: 44 };
    const svg = sv("svg", { width: W, height: H, role: "img", "aria-label": "lambda sweep" });
    const ys = pts.flatMap(([, c]) => [c.lo ?? c.v, c.hi ?? c.v].map((v) => v * 100));
    const [X, Y] = axes(svg, W, H, m, range(pts.map((p) => Math.log10(p[0])), 0.05), range(ys, 0.08), "λ (log scale)", "BLEU-4 ×100", true);
    svg.append(sv("polyline", { points: pts.map(([l, c]) => X(l) + "," + Y(c.v * 100)).join(" "), fill: "none", stroke: COLORS[0], "stroke-width": 2 }));
    for (const [l, c] of pts) {
      if (c.lo !== null) svg.append(sv("line", { x1: X(l), x2: X(l), y1: Y(c.lo * 100), y2: Y(c.hi * 100), stroke: COLORS[0] }));
      svg.append(sv("circle", { cx: X(l), cy: Y(c.v * 100), r: 4, fill: COLORS[0] }));
    }
    return figure("graphmax: λ sweep", "BLEU-4 of graphmax (exact solver) at each λ; bars are 95% bootstrap intervals.", svg);
  }
  function curves(key, title, ylabel) {
    const series = D.systems.map((s, i) => [s, i, (D.curves[i] || {})[key]]).filter((x) => x[2] && x[2].length);
    if (!series.length) return null;
    const W = 620, H = 400, m = { l: 60, r: 20, t: 16, b: 44 }, rows = Math.ceil(series.length / 2);
    const svg = sv("svg", { width: W, height: H + 8 + 18 * rows, role: "img", "aria-label": title });
    const n = Math.max(...series.map((x) => x[2].length));
    const ys = series.flatMap(([, , c]) => c.flatMap(([v, h]) => [v - h, v + h]));
    const [X, Y] = axes(svg, W, H, m, [1, n], range(ys, 0.05), "decoding step", ylabel);
    series.forEach(([s, i, c]) => {
      const col = COLORS[i % COLORS.length];
      const band = c.map(([v, h], k) => X(k + 1) + "," + Y(v + h)).concat(c.map(([v, h], k) => X(k + 1) + "," + Y(v - h)).reverse());
      svg.append(sv("polygon", { points: band.join(" "), fill: col, opacity: 0.15 }));
      svg.append(sv("polyline", { points: c.map(([v], k) => X(k + 1) + "," + Y(v)).join(" "), fill: "none", stroke: col, "stroke-width": 2 }));
      // the legend: below the axes (never over the curves), a swatch of the line's colour before each name
      const k = series.findIndex((x) => x[1] === i), lx = m.l + (k % 2) * (W - m.l - m.r) / 2, ly = H + 8 + 18 * Math.floor(k / 2);
      svg.append(sv("line", { class: "swatch", x1: lx, x2: lx + 22, y1: ly + 9, y2: ly + 9, stroke: col, "stroke-width": 3 }));
      svg.append(sv("text", { class: "legend", x: lx + 28, y: ly + 13 }, shortSystem(s)));
    });
    return figure(title, "Mean over texts at each step; the band is ±1.96 standard errors.", svg);
  }
  function drawPlots() {
    if (plotted) return;
    plotted = true;
    const box = document.getElementById("plots");
    for (const f of [scatter("self-bleu-4", "bleu-4", "Quality-diversity trade-off"), lambdaSweep(),
      curves("entropy", "Per-step entropy", "entropy (nats)"), curves("p_chosen", "Per-step probability of the chosen token", "p(chosen)"),
      curves("support", "Per-step support size", "tokens with p > 0")]) if (f) box.append(f);
  }

  // ------------------------------------------------------------ frontiers (maxbench frontier's data)
  let frontiersDrawn = false;
  const GOAL_TEXT = { higher: "higher is better", lower: "lower is better", closest: "closest to human is best" };
  function num4(v) { return v === null || v === undefined ? "n/a" : String(+v.toPrecision(4)); }
  function pText(d) { return d.p === null || d.p === undefined ? "" : " (p " + num4(d.p) + ", Holm " + num4(d.holm_p) + ")"; }
  function ciText(ci) { return ci ? " [" + num4(ci[0]) + ", " + num4(ci[1]) + "]" : ""; }
  function frontierPlot(p) {
    const pts = p.curves.flatMap((c) => c.points.filter((q) => q.x !== null && q.y !== null));
    if (!pts.length) return el("p", { class: "note" }, "No point has both scores.");
    const W = 660, H = 430, m = { l: 64, r: 20, t: 16, b: 44 }, rows = Math.ceil((p.curves.length + 1) / 2);
    const xs = pts.flatMap((q) => q.x_ci ? [q.x_ci[0], q.x_ci[1]] : [q.x]);
    const ys = pts.flatMap((q) => q.y_ci ? [q.y_ci[0], q.y_ci[1]] : [q.y]);
    const human = p.human && p.human[0] !== null && p.human[1] !== null ? p.human : null;
    if (human) { xs.push(human[0]); ys.push(human[1]); }
    const svg = sv("svg", { width: W, height: H + 8 + 18 * rows, role: "img", "aria-label": p.quality + " against " + p.match });
    const [X, Y] = axes(svg, W, H, m, range(xs, 0.06), range(ys, 0.06), p.match, p.quality + " (" + GOAL_TEXT[p.goal] + ")");
    if (p.target !== null) svg.append(sv("line", { x1: X(p.target), x2: X(p.target), y1: m.t, y2: H - m.b, stroke: "#777", "stroke-dasharray": "4 3" }));
    const legend = (k, col, name, star) => {
      const lx = m.l + (k % 2) * (W - m.l - m.r) / 2, ly = H + 8 + 18 * Math.floor(k / 2);
      if (star) svg.append(sv("text", { x: lx + 11, y: ly + 15, "text-anchor": "middle" }, "★"));
      else svg.append(sv("line", { class: "swatch", x1: lx, x2: lx + 22, y1: ly + 9, y2: ly + 9, stroke: col, "stroke-width": 3 }));
      svg.append(sv("text", { class: "legend", x: lx + 28, y: ly + 13 }, name));
    };
    p.curves.forEach((c, i) => {
      const col = COLORS[i % COLORS.length], ok = c.points.filter((q) => q.x !== null && q.y !== null);
      svg.append(sv("polyline", { points: ok.map((q) => X(q.x) + "," + Y(q.y)).join(" "), fill: "none", stroke: col, "stroke-width": 1.5 }));
      for (const q of ok) {
        if (q.x_ci) svg.append(sv("line", { x1: X(q.x_ci[0]), x2: X(q.x_ci[1]), y1: Y(q.y), y2: Y(q.y), stroke: col }));
        if (q.y_ci) svg.append(sv("line", { x1: X(q.x), x2: X(q.x), y1: Y(q.y_ci[0]), y2: Y(q.y_ci[1]), stroke: col }));
        const dot = sv("circle", { cx: X(q.x), cy: Y(q.y), r: 3.5, fill: col });
        dot.append(sv("title", {}, q.system + ": " + p.match + " " + num4(q.x) + ", " + p.quality + " " + num4(q.y)));
        svg.append(dot, sv("text", { class: "tick", x: X(q.x) + 5, y: Y(q.y) - 5, fill: col }, String(q.value)));
      }
      legend(i, col, c.name + " (" + c.knob + ")", false);
    });
    if (human) {
      svg.append(sv("text", { x: X(human[0]), y: Y(human[1]) + 7, "text-anchor": "middle", "font-size": 20 }, "★"));
      legend(p.curves.length, "#000", "human (references)", true);
    }
    return svg;
  }
  function frontierTable(head, rows) {
    return el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {}, ...head.map((h, k) => el("th", { class: k < 2 ? "left" : null }, h)))),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c, k) => el("td", { class: k < 2 ? "sys" : "num" }, typeof c === "string" && k < 2 ? u(c) : c)))))));
  }
  function drawFrontiers() {
    if (frontiersDrawn || !D.frontiers) return;
    frontiersDrawn = true;
    const box = document.getElementById("frontiers");
    for (const run of D.frontiers) {
      for (const p of run.planes) {
        box.append(figure(run.run_id + ": " + p.quality + " against " + p.match,
          "Each sweep in its knob's order (the knob's value beside each point); bars are 95% intervals" +
          (p.target === null ? "." : "; the dashed line is the matched value " + num4(p.target) + " (" + p.target_source + ")."), frontierPlot(p)));
        box.append(el("h3", {}, "Matched comparisons against ", u(p.against)));
        if (p.target === null) box.append(el("p", { class: "note" }, "No matched value: the run has no human row (maxbench frontier RUN --match VALUE compares at a value given)."));
        else box.append(frontierTable(["sweep", "against", "difference in " + p.quality + " at " + p.match + " " + num4(p.target) + " [95%]"], p.matched.map((m) => [m.a, m.b,
          m.overlap ? m.differences.map((d) => num4(d.estimate) + ciText(d.ci) + pText(d)).join("; ") : "no overlap"])));
        if (p.multiplicity && p.target !== null && p.matched.length) box.append(el("p", { class: "note" }, "p: the bootstrap p-value of no difference; Holm: " +
          "adjusted over the plane's matched differences (" + p.multiplicity.tests + "), one family. The intervals are per comparison: a difference holds " +
          "for the family where its Holm p is below 0.05."));
        box.append(el("h3", {}, "Dominance over the shared range of " + p.match));
        box.append(frontierTable(["sweep", "against", "dominance"], p.dominance.map((d) => [d.a, d.b, d.verdict])));
        const k = Math.max(...Object.values(p.budget).map((v) => v.length));
        box.append(el("h3", {}, "Tuning budget: expected best " + p.quality + " of N points"));
        box.append(frontierTable(["sweep", ...Array.from({ length: k }, (_, n) => "N=" + (n + 1))],
          Object.entries(p.budget).map(([name, v]) => [name, ...Array.from({ length: k }, (_, n) => n < v.length ? num4(v[n]) + ciText(((p.budget_ci || {})[name] || [])[n]) : "")])));
        box.append(el("p", { class: "note" }, "Each cell: the expected best of N points drawn at random from the sweep, with its 95% interval (prompts resampled jointly for every point, the points re-ranked in each resample)."));
      }
    }
  }

  // ------------------------------------------------------------ metrics vs humans
  function drawHumans() {
    if (!D.study) return;
    const box = document.getElementById("humans");
    const c2 = (v, ci) => v === null ? "n/a" : v.toFixed(2) + (ci ? " [" + ci[0].toFixed(2) + ", " + ci[1].toFixed(2) + "]" : "");
    box.append(el("p", { class: "note" }, "Study ", u(D.study.name), ": Kendall's τ-b and Spearman's ρ between each automatic metric " +
      "(its per-prompt value) and each rated aspect (the mean rating of the text), at item level (one point per rated text) and " +
      "at system level (one point per system), with 95% bootstrap intervals over prompts. A metric where lower is better " +
      "agrees with the raters when its correlation is negative."));
    const aspectSel = el("select", { id: "corr-aspect", "aria-label": "aspect" }, el("option", { value: "" }, "every aspect"),
      ...D.study.aspects.map((a) => el("option", { value: a }, a)));
    const definedOnly = el("input", { type: "checkbox", id: "corr-defined", checked: true });
    box.append(el("div", { class: "tools" }, el("label", {}, "Aspect ", aspectSel), el("label", {}, definedOnly, " only defined correlations")));
    const t = el("table", { id: "correlations" }, el("thead", {}, el("tr", {}, ...["metric", "aspect", "texts", "item τ", "item ρ", "systems", "system τ", "system ρ"].map((h, k) => el("th", { class: k < 2 ? "left" : null }, h)))));
    const body = el("tbody");
    function fill() {
      body.textContent = "";
      for (const r of D.study.correlations) {
        const i = r.item_level, s = r.system_level;
        if (aspectSel.value && r.aspect !== aspectSel.value) continue;
        if (definedOnly.checked && i.kendall_tau === null && s.kendall_tau === null) continue;
        body.append(el("tr", {}, el("td", { class: "sys" }, u(r.metric), r.higher_is_better === false ? " ↓" : ""), el("td", {}, u(r.aspect)),
          el("td", { class: "num" }, String(i.n)), el("td", { class: "num", title: i.reason || "" }, c2(i.kendall_tau, i.kendall_ci)),
          el("td", { class: "num", title: i.reason || "" }, c2(i.spearman_rho, i.spearman_ci)), el("td", { class: "num" }, String(s.n)),
          el("td", { class: "num", title: s.reason || "" }, c2(s.kendall_tau, s.kendall_ci)), el("td", { class: "num", title: s.reason || "" }, c2(s.spearman_rho, s.spearman_ci))));
      }
    }
    aspectSel.addEventListener("input", fill);
    definedOnly.addEventListener("input", fill);
    fill();
    t.append(body);
    box.append(el("div", { class: "scroll" }, t));
  }

  boardTools();
  drawBoard();
  drawHumans();
  document.body.dataset.ready = "1";
})();
