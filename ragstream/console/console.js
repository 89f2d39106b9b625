// ragstream console: plain JavaScript over the HTTP API (no build step, no CDN).
// Ask: a conversation, POST /v1/chat {"messages", "stream": true} (Server-Sent Events: `text`
// deltas, then `answer`); the thread lives in the page ("New conversation" or a reload
// starts over), each turn with its answer, citations and effective query.
// Files: GET /v1/files (the per-file ledger; a tenant key sees its own sources only), a
// file's page GET /v1/files/{doc_id} (its chunks in order). Live: GET /v1/events (SSE).
// Reindex: /v1/admin/reindex/*. Quality: GET /v1/eval (the saved `ragstream eval` reports).
"use strict";

const $ = (sel) => document.querySelector(sel);
const keyInput = $("#api-key");
keyInput.value = localStorage.getItem("ragstream-key") || "";
keyInput.addEventListener("change", () => localStorage.setItem("ragstream-key", keyInput.value));

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  if (keyInput.value) h.Authorization = "Bearer " + keyInput.value;
  return h;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

// ---- views ---------------------------------------------------------------------------------
function show(route) {
  const [view, ...rest] = route.split("/");
  for (const section of document.querySelectorAll(".view")) {
    section.hidden = section.id !== "view-" + view;
  }
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.view === view);
  }
  if (view === "files") loadFiles();
  if (view === "file") {  // #file/<doc id>[@start-end]: a cited span, its chunks marked
    const [, docId, start, end] = decodeURIComponent(rest.join("/")).match(/^(.*?)(?:@(\d+)-(\d+))?$/);
    loadFile(docId, start === undefined ? null : [Number(start), Number(end)]);
  }
  if (view === "live") followLive();
  if (view === "quality") loadQuality();
  clearInterval(reindexTimer);
  if (view === "reindex") {
    refreshReindex();
    reindexTimer = setInterval(refreshReindex, 1000);
  }
}
window.addEventListener("hashchange", () => show(location.hash.slice(1) || "ask"));

// ---- Ask: a conversation ------------------------------------------------------------------
// Each finished turn adds the question and, unless refused, the answer's text (without its
// [S1] markers) to the history the next question is sent with, within the API's bounds
// (1,000 messages of at most 32,000 characters; the server reads the newest
// `query.conversation.max_turns` of them and says how many it left out).
let history = [];
const MAX_MESSAGES = 1000;
const MAX_MESSAGE_CHARS = 32000;

function startTurn(question) {
  for (const id of ["answer", "refusal"]) {  // the newest turn's parts carry the ids
    const old = document.getElementById(id);
    if (old) old.removeAttribute("id");
  }
  const turn = el("li", { class: "turn" },
    el("p", { class: "asked", text: question }),
    el("article", { id: "answer", class: "answer" }),
    el("p", { class: "effective muted", hidden: "" }),
    el("div", { id: "refusal", class: "refusal", hidden: "" }));
  $("#thread").append(turn);
  return turn;
}

$("#ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = $("#question").value.trim();
  if (!question) return;
  $("#question").value = "";
  const turn = startTurn(question);
  const answerBox = turn.querySelector(".answer");
  answerBox.dataset.state = "streaming";
  $("#source").hidden = true;
  $("#ask-status").textContent = "asking…";
  const messages = [...history.slice(-(MAX_MESSAGES - 1)), { role: "user", content: question }];
  try {
    const response = await fetch("/v1/chat", {
      method: "POST",
      headers: headers(true),
      body: JSON.stringify({ messages, stream: true, ...filterOf() }),
    });
    if (!response.ok) {
      const err = await response.json().catch(() => ({ error: response.statusText }));
      const where = err.details && err.details[0] ? `: ${err.details[0].msg}` : "";
      throw new Error((err.error || response.statusText) + where);
    }
    await readEvents(response, (kind, data) => {
      if (kind === "text") answerBox.textContent += data.delta;
      else if (kind === "answer") {
        renderAnswer(data, turn);
        const reply = data.text.replace(/\s*\[S\d+\]/g, "").trim().slice(0, MAX_MESSAGE_CHARS);
        history = [...messages, ...(reply ? [{ role: "assistant", content: reply }] : [])];
      } else if (kind === "error") throw new Error(data.error);
    });
    $("#ask-status").textContent = "";
  } catch (error) {
    turn.classList.add("failed");  // not part of the conversation sent next
    $("#ask-status").textContent = "error: " + error.message;
  } finally {
    answerBox.dataset.state = "done";
  }
});

// Filter by metadata: the catalogue (GET /v1/fields) fills the field list; a field, an
// operator that suits its type and a value add one comparison to the filter's text form,
// which every question sends as `filter` (docs/guide/filters.md).
const OPS = {
  keyword: ["=", "!=", "exists"], keywords: ["=", "!=", "exists"], bool: ["=", "!=", "exists"],
  integer: ["=", "!=", ">=", "<=", ">", "<", "exists"], float: [">=", "<=", ">", "<", "=", "exists"],
  datetime: [">=", "<=", ">", "<", "=", "exists"],
};
let catalogue = [];

function filterOf() {
  const text = $("#filter").value.trim();
  return text ? { filter: text } : {};
}

function quoted(value) {
  return /^[^\s()<>=!,"']+$/.test(value) ? value : JSON.stringify(value);
}

function pickField() {
  const field = catalogue.find((f) => f.name === $("#filter-field").value);
  $("#filter-op").replaceChildren(...(field ? OPS[field.type] : []).map((op) => el("option", { text: op })));
  $("#filter-examples").replaceChildren(...(field ? field.examples : []).map((v) => el("option", { value: v })));
  $("#filter-value").placeholder = field && field.type === "datetime" ? "2024-01-01 or -30d" : "value";
}

async function loadFields() {
  const response = await fetch("/v1/fields", { headers: headers(false) });
  if (!response.ok) return;
  catalogue = await response.json();
  $("#filter-field").replaceChildren(...catalogue.map((f) =>
    el("option", { value: f.name, text: `${f.name} (${f.type}, ${f.docs} docs)` })));
  $("#filter-fields").textContent = catalogue.length ? "" : "no document carries metadata fields yet";
  pickField();
}

$("#filter-builder").addEventListener("toggle", () => { if ($("#filter-builder").open) loadFields(); });
$("#filter-field").addEventListener("change", pickField);
$("#filter-add").addEventListener("click", () => {
  const name = $("#filter-field").value, op = $("#filter-op").value;
  const value = $("#filter-value").value.trim();
  if (!name || (op !== "exists" && !value)) return;
  const term = op === "exists" ? `${name} exists` : `${name} ${op} ${quoted(value)}`;
  const now = $("#filter").value.trim();
  $("#filter").value = now ? `${now} and ${term}` : term;
  $("#filter-value").value = "";
});

$("#new-conversation").addEventListener("click", () => {
  history = [];
  $("#thread").textContent = "";
  $("#source").hidden = true;
  $("#why").hidden = true;
  $("#ask-status").textContent = "";
  $("#question").focus();
});

async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const kind = (frame.match(/^event: (.*)$/m) || [])[1];
      const data = (frame.match(/^data: (.*)$/m) || [])[1];
      if (kind && data) onEvent(kind, JSON.parse(data));
    }
  }
}

function claimClass(claim) {
  if (claim.contradicted) return "contradicted";
  return claim.supported ? "supported" : "unsupported";
}

function renderAnswer(answer, turn) {
  const box = turn.querySelector(".answer");
  box.textContent = "";
  const sources = Object.fromEntries(answer.sources.map((s) => [s.cid, s]));
  for (const claim of answer.claims) {
    const span = el("span", {
      class: "claim " + claimClass(claim),
      title: `${claimClass(claim)} (score ${claim.score.toFixed(2)})`,
    });
    span.textContent = claim.text.replace(/\s*\[S\d+\]/g, "");
    for (const cid of claim.cids) {
      const cite = el("button", { class: "cite", type: "button", text: cid });
      cite.addEventListener("click", () => {
        showSource(sources[cid], claim);
        renderWhy(answer);
      });
      span.append(cite);
    }
    box.append(span, " ");
  }
  const effective = effectiveText(answer);
  const line = turn.querySelector(".effective");
  line.hidden = !effective;
  line.textContent = effective;
  if (answer.refusal) {
    const r = answer.refusal;
    const panel = turn.querySelector(".refusal");
    panel.hidden = false;
    panel.textContent = "";
    panel.append(
      el("strong", { text: "Refused: " + r.reason }),
      el("p", { text: r.detail }),
    );
    const scores = answer.answerability ? answer.answerability.signals : {};
    if (r.best_score !== null && r.best_score !== undefined) scores.best_score = r.best_score;
    const list = el("ul", { class: "muted" });
    for (const [name, value] of Object.entries(scores)) {
      list.append(el("li", { text: `${name}: ${Number(value).toFixed(3)}` }));
    }
    panel.append(list);
  }
  renderWhy(answer);
}

// What retrieval ran, where the history changed it: the legs whose text differs from the
// question as asked (one line when both ran the same rewrite), and the history left out.
function effectiveText(answer) {
  const eq = answer.effective_query;
  const parts = [];
  if (eq) {
    const changed = [["BM25", eq.sparse], ["dense", eq.dense]].filter(([, t]) => t !== answer.query);
    if (changed.length === 2 && eq.sparse === eq.dense) parts.push("effective query: " + eq.dense);
    else for (const [leg, text] of changed) parts.push(`effective query (${leg}): ${text}`);
  }
  const dropped = answer.conversation ? answer.conversation.dropped_messages : 0;
  if (dropped) parts.push(`${dropped} oldest messages left out`);
  return parts.join(" · ");
}

function showSource(source, claim) {
  const panel = $("#source");
  panel.hidden = false;
  panel.textContent = "";
  if (!source) return;
  const version = source.file_version || {};
  const when = source.indexed_at ? new Date(source.indexed_at * 1000).toLocaleString() : "-";
  const where = el("div", { class: "meta", text: `${source.cid} · ${source.path}` });
  if (source.source === "ocr") where.prepend(ocrBadge(source.ocr_confidence, source.bbox), " ");
  panel.append(
    where,
    el("div", {
      class: "meta",
      text: `${(source.section_path || []).join(" › ") || "(no section)"}`
        + (source.page ? ` · page ${source.page}` : ""),
    }),
    el("div", {
      class: "meta",
      text: `version ${version.size ?? "?"} B, xxh3 ${(version.digest || "").slice(0, 12)}, `
        + `indexed ${when}` + (source.possibly_stale ? " · the file changed since" : ""),
    }),
  );
  const text = source.text;
  const pre = el("pre");
  const span = claim && claim.support_cid === source.cid ? claim.support_span : null;
  if (span) {
    // the span counts code points (Python's str), a JS string counts UTF-16 units: an
    // astral character (CJK Extension B, an emoji) before it would shift the mark
    const chars = Array.from(text);
    const part = (a, b) => chars.slice(a, b).join("");
    pre.append(part(0, span[0]), el("mark", { text: part(span[0], span[1]) }),
      part(span[1]));
  } else {
    pre.textContent = text;
  }
  panel.append(pre);
}

// Text read by OCR from a page image: a badge with the engine's confidence and, when known,
// where on the page the cited lines are (percent of the page from its top-left corner).
function ocrBadge(confidence, bbox) {
  const conf = confidence === null || confidence === undefined ? "?" : confidence.toFixed(2);
  const pct = (v) => Math.round(v * 100) + "%";
  const region = bbox ? `; region ${pct(bbox[0])}–${pct(bbox[2])} across, `
    + `${pct(bbox[1])}–${pct(bbox[3])} down the page` : "";
  return el("span", {
    class: "badge ocr",
    text: "OCR",
    title: `read by OCR from a page image (confidence ${conf}${region})`,
  });
}

function renderWhy(answer) {
  $("#why").hidden = false;
  const used = new Set(answer.sources.map((s) => s.point_id));
  const body = $("#candidates tbody");
  body.textContent = "";
  answer.candidates.forEach((c, i) => {
    const fmt = (v) => (v === null || v === undefined ? "-" : Number(v).toFixed(3));
    const row = el("tr", { class: used.has(c.point_id) ? "used" : "cut" },
      el("td", { text: String(i + 1) }),
      el("td", { text: c.doc_id }),
      el("td", { text: c.ranks.lexical ?? "-" }),
      el("td", { text: c.ranks.dense ?? "-" }),
      el("td", { text: fmt(c.score) }),
      el("td", { text: fmt(c.rerank_score) }),
      el("td", { text: used.has(c.point_id) ? "in context" : "cut" }));
    body.append(row);
  });
  const timings = $("#timings tbody");
  timings.textContent = "";
  for (const [stage, ms] of Object.entries(answer.timings_ms)) {
    timings.append(el("tr", {}, el("td", { text: stage }), el("td", { text: ms.toFixed(1) })));
  }
  $("#trace").textContent = answer.trace_id;
}

// ---- Files ---------------------------------------------------------------------------------
let ledger = [];

async function loadFiles() {
  const response = await fetch("/v1/files", { headers: headers(false) });
  if (response.ok) {
    ledger = await response.json();
    renderFiles();
    return;
  }
  const err = await response.json().catch(() => ({ error: response.statusText }));
  ledger = [];
  renderFiles();
  $("#file-counts").textContent = "error: " + (err.error || response.statusText);
}

function renderFiles() {
  const text = $("#file-search").value.toLowerCase();
  const state = $("#file-state").value;
  const counts = {};
  for (const r of ledger) counts[r.state] = (counts[r.state] || 0) + 1;
  $("#file-counts").textContent = Object.entries(counts)
    .map(([s, n]) => `${s} ${n}`).join(" · ") || "no files";
  const body = $("#files tbody");
  body.textContent = "";
  for (const r of ledger) {
    if (state && r.state !== state) continue;
    if (text && !r.doc_id.toLowerCase().includes(text)) continue;
    const when = r.indexed_at ? new Date(r.indexed_at * 1000).toLocaleString() : "-";
    body.append(el("tr", { "data-state": r.state },
      el("td", { class: "state " + r.state, text: r.state }),
      el("td", { title: r.path },
        el("a", { href: "#file/" + encodeURIComponent(r.doc_id), text: r.doc_id })),
      el("td", { text: String(r.chunks) }),
      el("td", { text: r.embedder || "-" }),
      el("td", { text: when }),
      el("td", { text: r.reason })));
  }
}
$("#file-search").addEventListener("input", renderFiles);
$("#file-state").addEventListener("change", renderFiles);
$("#files-reload").addEventListener("click", loadFiles);

// ---- a file's page: its chunks in order -----------------------------------------------------
async function loadFile(docId, span = null) {
  $("#file-title").textContent = docId;
  $("#file-meta").textContent = "loading…";
  $("#file-summary").textContent = "";
  const body = $("#file-chunks tbody");
  body.textContent = "";
  const response = await fetch("/v1/files/" + encodeURIComponent(docId), { headers: headers(false) });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) {
    $("#file-meta").textContent = "error: " + (data.error || response.statusText);
    return;
  }
  const r = data.record;
  const fp = r.fingerprint;
  $("#file-meta").textContent = [
    r.state, r.path, r.embedder || "no embedder",
    r.pages ? `${r.pages} page${r.pages === 1 ? "" : "s"}`
      + (r.ocr_pages ? ` (${r.ocr_pages} read by OCR)` : "") : "",
    fp ? `version ${fp.size} B, xxh3 ${fp.digest || "-"}` : "no version",
    r.indexed_at ? "indexed " + new Date(r.indexed_at * 1000).toLocaleString() : "",
    r.reason,
  ].filter(Boolean).join(" · ");
  const origins = {};
  for (const c of data.chunks) origins[c.vector_origin || "unknown"] = (origins[c.vector_origin || "unknown"] || 0) + 1;
  $("#file-summary").textContent = `${data.chunks.length} live chunks; at the last change: `
    + (Object.entries(origins).map(([k, n]) => `${k} ${n}`).join(" · ") || "none");
  for (const c of data.chunks) {
    const cited = span !== null && c.char_start < span[1] && c.char_end > span[0];
    body.append(el("tr", { "data-origin": c.vector_origin || "unknown", ...(cited ? { class: "cited" } : {}) },
      el("td", { text: String(c.ordinal) }),
      el("td", { class: "hash", text: c.content_hash, title: "point " + c.point_id }),
      el("td", { class: "origin " + (c.vector_origin || "unknown"), text: c.vector_origin || "-" }),
      el("td", { text: c.in_bm25 ? "yes" : "missing" }),
      el("td", { text: c.section_path.join(" › ") }),
      el("td", {}, c.page === null ? "-" : String(c.page),
        ...(c.origin === "ocr" ? [" ", ocrBadge(c.ocr_confidence, null)] : [])),
      el("td", { text: `${c.char_start}–${c.char_end}` }),
      el("td", { class: "chunk-text", text: c.text })));
  }
  const first = body.querySelector("tr.cited");
  if (first) first.scrollIntoView({ block: "center" });
}

// ---- Live ----------------------------------------------------------------------------------
let following = false;

async function followLive() {
  if (following) return;
  following = true;
  const status = $("#live-status");
  try {
    const response = await fetch("/v1/events", { headers: headers(false) });
    if (!response.ok) {
      const err = await response.json().catch(() => ({ error: response.statusText }));
      throw new Error(err.error || response.statusText);
    }
    status.textContent = "following the sync: every document written appears here";
    status.dataset.state = "connected";
    await readEvents(response, (kind, data) => {
      if (kind === "drift") renderDrift(data);
      else if (kind === "outcome") addOutcome(data);
    });
    status.textContent = "the feed ended";
  } catch (error) {
    status.textContent = "live feed unavailable: " + error.message;
  } finally {
    status.dataset.state = "closed";
    following = false;
  }
}

function renderDrift(counts) {
  const box = $("#live-drift");
  if (!counts) {
    box.textContent = "drift: no audit yet (ragstream verify)";
    return;
  }
  const found = Object.entries(counts).filter(([, n]) => n > 0);
  box.textContent = "drift (last audit): "
    + (found.length ? found.map(([k, n]) => `${k} ${n}`).join(" · ") : "none");
}

function addOutcome(o) {
  const what = o.dead_letter ? "dead letter: " + o.dead_letter.reason
    : o.deleted ? "deleted" : o.changed ? "indexed" : "unchanged";
  const when = o.at ? new Date(o.at * 1000).toLocaleTimeString() : "-";
  const row = el("tr", { "data-doc": o.doc_id },
    el("td", { text: when }),
    el("td", { text: o.doc_id }),
    el("td", { text: what }),
    el("td", { text: String(o.chunks_embedded) }),
    el("td", { text: String(o.chunks_reused) }),
    el("td", { text: String(o.chunks_moved) }),
    el("td", { text: String(o.chunks_tombstoned) }),
    el("td", { text: o.lag_s === null || o.lag_s === undefined ? "-" : o.lag_s.toFixed(2) + " s" }));
  $("#live tbody").prepend(row);
}

// ---- Reindex -------------------------------------------------------------------------------
let reindexTimer = null;

async function admin(command, body) {
  const response = await fetch("/v1/admin/reindex/" + command, {
    method: "POST",
    headers: headers(true),
    body: JSON.stringify(body || {}),
  });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

async function refreshReindex() {
  try {
    renderReindex(await admin("status"));
  } catch (error) {
    $("#reindex-message").textContent = "error: " + error.message;
  }
}

function renderReindex(st) {
  const record = st.record;
  $("#phase").textContent = record ? record.phase : "none";
  $("#reindex-message").textContent = st.message || "";
  const body = $("#reindex-sides tbody");
  body.textContent = "";
  for (const side of st.sides) {
    body.append(el("tr", { "data-serving": String(side.serving) },
      el("td", { text: side.collection }),
      el("td", { text: side.embedder.name }),
      el("td", { text: String(side.live) }),
      el("td", { text: String(side.deleted) }),
      el("td", { text: side.serving ? "serving" : "" })));
  }
  const p = record ? record.progress : null;
  $("#reindex-progress").textContent = p && p.total
    ? `backfill ${p.done} / ${p.total} checked, ${p.embedded} embedded, ${p.reused} reused`
      + (p.eta_s ? `, ETA ${p.eta_s.toFixed(0)} s` : "")
      + (st.lag !== null && st.lag !== undefined ? ` · lag ${st.lag}` : "")
    : "";
  const g = record ? record.gate : null;
  $("#reindex-gate").textContent = g
    ? `gate ${g.passed ? "passed" : "refused"}: missing ${g.missing}, stale ${g.stale}`
      + (g.eval_metric ? `, ${g.eval_metric} old ${g.eval_old} new ${g.eval_new}` : "")
      + ` — ${g.reason}`
    : "";
}

for (const button of document.querySelectorAll("#view-reindex button[data-cmd]")) {
  button.addEventListener("click", async () => {
    const command = button.dataset.cmd;
    const embedder = $("#reindex-embedder").value;
    const what = command === "start" ? `start a reindex to ${embedder}` : command;
    if (!confirm(`Really ${what}?`)) return;
    const body = command === "start" ? { embedder }
      : command === "cleanup" ? { confirm: true } : {};
    try {
      renderReindex(await admin(command, body));
    } catch (error) {
      $("#reindex-message").textContent = "error: " + error.message;
    }
  });
}

// ---- Quality: the saved eval reports as a table and two plots (SVG, drawn here) -------------
let reports = [];
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

async function loadQuality() {
  const response = await fetch("/v1/eval", { headers: headers(false) });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  const pick = $("#quality-report");
  pick.textContent = "";
  if (!response.ok) {
    reports = [];
    $("#quality-meta").textContent = "error: " + (data.error || response.statusText);
    return;
  }
  reports = data;
  for (const [i, saved] of reports.entries()) {
    const r = saved.report;
    const when = r.created_at ? new Date(r.created_at * 1000).toLocaleString() : "";
    pick.append(el("option", { value: String(i), text: `${saved.file} — ${r.dataset} ${r.split} ${r.mode} ${when}` }));
  }
  if (!reports.length) {
    $("#quality-meta").textContent = "no eval yet: run `ragstream eval DATASET --data-dir` on this data dir";
    return;
  }
  renderQuality(reports[0].report);
}
$("#quality-report").addEventListener("change", (e) => renderQuality(reports[Number(e.target.value)].report));

function renderQuality(r) {
  $("#quality-meta").textContent = `${r.dataset} ${r.split}, mode ${r.mode}: ${r.queries} queries, `
    + `depth ${r.depth} per leg` + (r.failure_config ? `; failures of ${r.failure_config}: `
    + Object.entries(r.failures || {}).map(([k, n]) => `${k} ${n}`).join(" · ") : "");
  const body = $("#quality-rows tbody");
  body.textContent = "";
  const f = (v, d) => (v === null || v === undefined ? "-" : Number(v).toFixed(d));
  for (const row of r.rows || []) {
    body.append(el("tr", { "data-name": row.name },
      el("td", { text: row.name }),
      el("td", { text: f(row["ndcg@10"], 4) }),
      el("td", { text: f(row["recall@10"], 4) }),
      el("td", { text: f(row["recall@100"], 4) }),
      el("td", { text: f(row["mrr@10"], 4) }),
      el("td", { text: f(row.p50_ms, 1) }),
      el("td", { text: f(row.p95_ms, 1) })));
  }
  plotBars($("#quality-ndcg"), (r.rows || []).map((row) => [row.name, row["ndcg@10"]]));
  plotBoxes($("#quality-latency"), Object.entries(r.stage_ms || {}).filter(([, v]) => v.length));
  const summary = $("#quality-summary tbody");
  summary.textContent = "";
  for (const [section, values] of Object.entries(r)) {
    if (!values || typeof values !== "object" || Array.isArray(values) || section === "stage_ms"
        || section === "failures") continue;
    for (const [k, v] of Object.entries(values)) {
      if (typeof v === "number") summary.append(el("tr", {}, el("td", { text: `${section}.${k}` }), el("td", { text: f(v, 4) })));
    }
  }
}

const LABEL_W = 170, PLOT_W = 420, ROW_H = 24;

function plotBars(box, bars) {
  box.textContent = "";
  box.setAttribute("width", LABEL_W + PLOT_W + 60);
  box.setAttribute("height", bars.length * ROW_H + 24);
  for (const [i, [name, value]] of bars.entries()) {
    const y = i * ROW_H + 4;
    box.append(svg("text", { x: LABEL_W - 6, y: y + 15, "text-anchor": "end", class: "label" }, name));
    box.append(svg("rect", { x: LABEL_W, y, width: Math.max(0, value) * PLOT_W, height: ROW_H - 6, class: "bar", "data-name": name }));
    box.append(svg("text", { x: LABEL_W + value * PLOT_W + 4, y: y + 15, class: "value" }, Number(value).toFixed(4)));
  }
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    box.append(svg("text", { x: LABEL_W + t * PLOT_W, y: bars.length * ROW_H + 18, "text-anchor": "middle", class: "tick" }, String(t)));
  }
}

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)))];
}

function plotBoxes(box, stages) {
  box.textContent = "";
  box.setAttribute("width", LABEL_W + PLOT_W + 60);
  box.setAttribute("height", stages.length * ROW_H + 24);
  const all = stages.flatMap(([, v]) => v).map((x) => Math.max(x, 0.001));
  if (!all.length) return;
  const lo = Math.floor(Math.log10(Math.min(...all))), hi = Math.ceil(Math.log10(Math.max(...all)));
  const x = (ms) => LABEL_W + ((Math.log10(Math.max(ms, 0.001)) - lo) / Math.max(hi - lo, 1)) * PLOT_W;
  for (const [i, [name, values]] of stages.entries()) {
    const v = [...values].sort((a, b) => a - b);
    const [p5, p25, p50, p75, p95] = [0.05, 0.25, 0.5, 0.75, 0.95].map((q) => quantile(v, q));
    const y = i * ROW_H + 4, mid = y + (ROW_H - 6) / 2;
    const g = svg("g", { class: "stage", "data-stage": name, "data-p50": p50 });
    g.append(svg("text", { x: LABEL_W - 6, y: y + 15, "text-anchor": "end", class: "label" }, name));
    g.append(svg("line", { x1: x(p5), x2: x(p95), y1: mid, y2: mid, class: "whisker" }));
    g.append(svg("rect", { x: x(p25), y, width: Math.max(1, x(p75) - x(p25)), height: ROW_H - 6, class: "box" }));
    g.append(svg("line", { x1: x(p50), x2: x(p50), y1: y, y2: y + ROW_H - 6, class: "median" }));
    g.append(svg("text", { x: x(p95) + 4, y: y + 15, class: "value" }, `p50 ${p50.toFixed(1)}`));
    box.append(g);
  }
  for (let e = lo; e <= hi; e++) {
    box.append(svg("text", { x: x(10 ** e), y: stages.length * ROW_H + 18, "text-anchor": "middle", class: "tick" }, String(10 ** e)));
  }
}

show(location.hash.slice(1) || "ask");
