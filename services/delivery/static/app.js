/* imprint reference web client: no build step, no dependencies.
 *
 * - opens /v1/runs/{run}/events with the browser's own EventSource, authorized by a
 *   short-lived stream ticket (POST …/stream-tickets with the bearer token; EventSource
 *   cannot send Authorization): the browser reconnects by itself with Last-Event-ID,
 *   and the source is closed on `done` (a reconnect after the end would get 204).
 *   Without EventSource (or with #transport=fetch) it reads the stream with fetch and
 *   a streaming SSE parser and resumes with Last-Event-ID after any drop;
 * - applies state-carrying block frames: blocks[block_id] = frame.block (null removes);
 *   renders blocks by delivery_ordinal, replaces revisions in place, marks previews
 *   as unsaved, shows source hints and truncation, drops withdrawn blocks;
 * - holds every frame id and body hash across reconnects and checks stream-summary
 *   and the terminal (D3); any gap, repeat, frame after done or mismatch is an error;
 * - skips a frame of a kind it does not know (R8: a later v1 server may add kinds) but keeps
 *   its id as a position: stream-summary counts it like any frame. Read with fetch, such a
 *   frame arrives and is held (its id and body hash) without being applied; EventSource never
 *   dispatches a kind nobody listens to, so there its id shows as a step over ids the browser
 *   read and did not hand on, and at the end the page reads those frames once with fetch to
 *   check their body hashes against the summary;
 * - on a `reset` frame (D8: the server cannot continue after the id this client held,
 *   e.g. a store restored from an older backup) forgets everything it held and rebuilds
 *   from the frames that follow, ids from 1 again; the reset's own id is 0, so a
 *   reconnect right after it asks for the whole view;
 * - reports client.received / client.rendered (and client.conflict) receipts, naming
 *   itself (a client id per page load) and the revision of every block it shows;
 * - learns of a withdrawal after the run's end (D7: nothing follows `done`) from the
 *   notices its conversation stream carries (below): a notice about a block the page shows
 *   marks it withdrawn in place (its text is no longer shown) and is acknowledged with a
 *   client.received receipt naming the notice;
 * - follows the run's conversation stream (D9: GET …/conversations/{id}/events with the
 *   conversation's ticket, resumed with Last-Event-ID; one connection for the queue and the
 *   notices, so two tabs stay within a browser's six connections to a host): every question of the conversation
 *   in order with its state, and the queue under the live answer, the same in every tab;
 *   a waiting question can be cancelled or sent now (POST …/queue/{run}/cancel|send-now,
 *   a 409 says it had already started). Once the answer shown has ended and a later
 *   question started, the page moves on to it, keeping the ended answer's blocks above.
 *   With #conversation=<id>&token=… (no run) it shows the conversation's live question;
 * - "Stop generating" asks the run to stop (POST …/cancel, X11: never a dropped connection)
 *   and says which saved blocks the answer names as kept; a preview the stopped run never
 *   saved is dropped from the page, and the page says so;
 * - renders model markdown with DOM nodes and textContent only: model text can never
 *   become markup or script.
 */
(function () {
  "use strict";

  // ---------------------------------------------------------------- SHA-256 (UTF-8)
  const K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);

  function sha256Hex(text) {
    const bytes = new TextEncoder().encode(text);
    const bitLength = bytes.length * 8;
    const padded = new Uint8Array(((bytes.length + 9 + 63) >> 6) << 6);
    padded.set(bytes);
    padded[bytes.length] = 0x80;
    const view = new DataView(padded.buffer);
    view.setUint32(padded.length - 8, Math.floor(bitLength / 0x100000000));
    view.setUint32(padded.length - 4, bitLength >>> 0);
    const h = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
    const w = new Uint32Array(64);
    const rotr = (x, n) => (x >>> n) | (x << (32 - n));
    for (let offset = 0; offset < padded.length; offset += 64) {
      for (let i = 0; i < 16; i++) w[i] = view.getUint32(offset + i * 4);
      for (let i = 16; i < 64; i++) {
        const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
        const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
        w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
      }
      let [a, b, c, d, e, f, g, hh] = h;
      for (let i = 0; i < 64; i++) {
        const S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        const ch = (e & f) ^ (~e & g);
        const t1 = (hh + S1 + ch + K[i] + w[i]) >>> 0;
        const S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        const maj = (a & b) ^ (a & c) ^ (b & c);
        const t2 = (S0 + maj) >>> 0;
        hh = g; g = f; f = e; e = (d + t1) >>> 0; d = c; c = b; b = a; a = (t1 + t2) >>> 0;
      }
      h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
    }
    return Array.from(h, (x) => (x >>> 0).toString(16).padStart(8, "0")).join("");
  }

  // ---------------------------------------------------------------- state
  const $ = (id) => document.getElementById(id);
  /** Who this page is on its receipts (D7): one id per page load, never stored. */
  function newClientId() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return "page-" + window.crypto.randomUUID();
    const bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return "page-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }
  const WITHDRAWN_CAUSE = {
    source_revoked: "its source was revoked", source_tombstoned: "its source was deleted",
    conversation_deleted: "the conversation was deleted", source_rejected: "its source is no longer authorized",
  };
  const TERMINAL = new Set(["stream-summary", "done"]);
  const HINT_LABEL = {
    sources_verified: ["sources verified", "verified"],
    sources_partial: ["some sources unverified", "partial"],
    sources_unverified: ["sources unverified", "unverified"],
    unknown: ["sources unknown", "unknown"],
  };
  const STATUS_LABEL = { unsaved: "unsaved preview", save_unknown: "unsaved — save unconfirmed", conflict: "conflicting versions" };

  const client = {
    runId: "", token: "",
    lastId: 0,
    held: new Map(),        // id -> {event, sha}: every frame held, across reconnects (D3)
    skipped: new Set(),     // ids EventSource read and did not dispatch: kinds this page does not know (R8)
    blocks: new Map(),      // block_id -> display entry
    content: new Map(),     // seq -> text
    summary: null,          // {id, data}
    done: false, validated: null,
    errors: [], duplicates: 0, connections: 0, resets: 0,
    status: null,
    abort: null, source: null, transport: "", retryDelay: 250, stopped: false,
    receipts: { received: 0, rendered: 0, timers: {} },
    renderQueued: false,
    stop: null,             // X11: {kept: {as_of_event_id, blocks}} once a stop was accepted
    dropped: [],            // block ids whose unsaved preview a stopped run dropped
    clientId: newClientId(),
    notices: { last: 0, duplicates: 0, acked: new Set() },
    conversation: { id: "", last: 0, source: null, connections: 0, duplicates: 0, retryDelay: 500,
                    questions: new Map(), queue: [], running: [], earlier: [] },
  };
  window.imprintClient = client;

  function fail(code, message) {
    client.errors.push(code);
    const p = document.createElement("p");
    p.dataset.code = code;
    p.textContent = message;
    $("errors").appendChild(p);
  }

  function notice(message) {
    const p = document.createElement("p");
    p.textContent = message;
    $("notices").appendChild(p);
  }

  // ---------------------------------------------------------------- safe markdown
  const INLINE = /\[\[(cite|num|ref):([^\]\s]{1,200})\]\]|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|`([^`]+)`/g;

  function inline(parent, text, block) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      last = m.index + m[0].length;
      if (m[1] === "cite") {
        const idx = (block.citations || []).findIndex((c) => c.source_id === m[2]);
        const sup = document.createElement("sup");
        sup.className = "cite";
        const status = idx >= 0 ? block.citations[idx].status : "unverified";
        sup.textContent = idx >= 0 && status === "valid" ? `[${idx + 1}]` : "[?]";
        sup.title = idx >= 0 ? `${m[2]} (${status})` : "citation not verified";
        parent.appendChild(sup);
      } else if (m[1] === "num") {
        const n = (block.numbers || []).find((x) => x.handle_id === m[2]);
        const span = document.createElement("span");
        if (n) { span.textContent = n.rendered; } else { span.className = "num-missing"; span.textContent = "value unavailable"; }
        parent.appendChild(span);
      } else if (m[1] === "ref") {
        const span = document.createElement("span");
        span.className = "ref";
        span.textContent = "(see block " + m[2] + ")";
        parent.appendChild(span);
      } else if (m[3] !== undefined) {
        const strong = document.createElement("strong");
        strong.textContent = m[3];
        parent.appendChild(strong);
      } else if (m[4] !== undefined) {
        const em = document.createElement("em");
        em.textContent = m[4];
        parent.appendChild(em);
      } else if (m[5] !== undefined) {
        const code = document.createElement("code");
        code.textContent = m[5];
        parent.appendChild(code);
      }
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function renderMarkdown(container, markdown, block) {
    let paragraph = null;
    let list = null;
    for (const line of String(markdown).split(/\r?\n/)) {
      const item = /^\s*(?:([-*+])|(\d{1,6})[.)])\s+(.*)$/.exec(line);
      if (item) {
        paragraph = null;
        const kind = item[1] ? "UL" : "OL";
        if (!list || list.tagName !== kind) { list = document.createElement(kind.toLowerCase()); container.appendChild(list); }
        const li = document.createElement("li");
        inline(li, item[3], block);
        list.appendChild(li);
        continue;
      }
      list = null;
      if (!line.trim()) { paragraph = null; continue; }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) {
        paragraph = null;
        const h = document.createElement("h" + Math.min(6, heading[1].length + 2));
        inline(h, heading[2], block);
        container.appendChild(h);
        continue;
      }
      if (!paragraph) { paragraph = document.createElement("p"); container.appendChild(paragraph); }
      else paragraph.appendChild(document.createElement("br"));
      inline(paragraph, line, block);
    }
  }

  // ---------------------------------------------------------------- rendering
  function badge(text, cls) {
    const span = document.createElement("span");
    span.className = "badge " + (cls || "");
    span.textContent = text;
    return span;
  }

  function fillBlock(el, entry) {
    el.replaceChildren();
    el.dataset.blockId = entry.block_id;
    el.dataset.revision = String(entry.revision);
    el.dataset.status = entry.status;
    el.dataset.ordinal = String(entry.delivery_ordinal);
    if (entry.status === "withdrawn") return fillWithdrawn(el, entry);
    const badges = document.createElement("div");
    badges.className = "badges";
    if (entry.status !== "saved") badges.appendChild(badge(STATUS_LABEL[entry.status] || entry.status, entry.status === "conflict" ? "conflict" : "unsaved"));
    const hint = HINT_LABEL[entry.source_hint] || HINT_LABEL.unknown;
    if (entry.status !== "conflict") badges.appendChild(badge(hint[0], hint[1]));
    if (entry.revision > 1) badges.appendChild(badge("revision " + entry.revision));
    for (const h of entry.hints || []) badges.appendChild(badge(h.replace(/_/g, " ")));
    if (entry.conflict && entry.status !== "conflict") badges.appendChild(badge("a newer version conflicts", "conflict"));
    el.appendChild(badges);
    const body = document.createElement("div");
    body.className = "body";
    if (entry.content === null || entry.content === undefined) {
      const p = document.createElement("p");
      p.textContent = "This block has conflicting versions and is withheld.";
      body.appendChild(p);
    } else if (entry.content.type === "table") {
      const pre = document.createElement("pre");
      pre.textContent = entry.content.markdown;
      body.appendChild(pre);
    } else {
      renderMarkdown(body, entry.content.markdown, entry);
    }
    el.appendChild(body);
    if (entry.truncated) {
      const t = document.createElement("p");
      t.className = "truncated";
      t.textContent = "This block was truncated.";
      el.appendChild(t);
    }
  }

  /** D7: a block withdrawn after the answer finished keeps its place, struck out: what it
   *  said is no longer shown, only that it was withdrawn and why. */
  function fillWithdrawn(el, entry) {
    el.classList.add("withdrawn");
    const badges = document.createElement("div");
    badges.className = "badges";
    badges.appendChild(badge("withdrawn", "withdrawn"));
    if (entry.revision > 1) badges.appendChild(badge("revision " + entry.revision));
    el.appendChild(badges);
    const body = document.createElement("div");
    body.className = "body";
    const p = document.createElement("p");
    p.textContent = "This block was withdrawn after the answer finished: "
      + (WITHDRAWN_CAUSE[entry.withdrawn.cause] || "it is no longer shown") + ".";
    body.appendChild(p);
    el.appendChild(body);
  }

  function render() {
    client.renderQueued = false;
    const container = $("blocks");
    const existing = new Map();
    for (const el of Array.from(container.children)) existing.set(el.dataset.blockId, el);
    for (const [id, el] of existing) if (!client.blocks.has(id)) el.remove();
    const ordered = Array.from(client.blocks.values()).sort(
      (a, b) => a.delivery_ordinal - b.delivery_ordinal || (a.block_id < b.block_id ? -1 : 1));
    let previous = null;
    for (const entry of ordered) {
      let el = existing.get(entry.block_id);
      if (!el) { el = document.createElement("section"); el.className = "block"; }
      if (el.dataset.rendered !== JSON.stringify(entry)) {
        fillBlock(el, entry);
        el.dataset.rendered = JSON.stringify(entry);
      }
      const want = previous ? previous.nextSibling : container.firstChild;
      if (want !== el) container.insertBefore(el, want);  // in place; moved only if out of order
      previous = el;
    }
    const text = Array.from(client.content.keys()).sort((a, b) => a - b).map((k) => client.content.get(k)).join("");
    if (text) { $("closed").hidden = false; $("content").textContent = text; }
    requestReceipt("client.rendered");
  }

  function scheduleRender() {
    if (client.renderQueued) return;
    client.renderQueued = true;
    requestAnimationFrame(render);
  }

  // ---------------------------------------------------------------- receipts
  /** A POST whose answer does not matter beyond whether it was accepted. */
  async function post(path, body) {
    const { status } = await postForAnswer(path, body);
    return status >= 200 && status < 300;
  }

  /** A POST whose answer matters: {status, body} (status 0: the request did not get through). */
  async function postForAnswer(path, body) {
    try {
      const response = await fetch(path, {
        method: "POST", cache: "no-store",
        headers: { "Content-Type": "application/json", Authorization: "Bearer " + client.token },
        body: JSON.stringify(body),
      });
      let answer = null;
      try { answer = await response.json(); } catch (e) { /* no body */ }
      return { status: response.status, body: answer };
    } catch (e) {
      return { status: 0, body: null };
    }
  }

  function requestReceipt(type, immediate) {
    const key = type === "client.received" ? "received" : "rendered";
    if (client.lastId <= client.receipts[key]) return;
    if (client.receipts.timers[key] && !immediate) return;
    const send = () => {
      client.receipts.timers[key] = null;
      const last = client.lastId;
      if (last <= client.receipts[key]) return;
      client.receipts[key] = last;
      const shown = Array.from(client.blocks.values()).filter((b) => b.status !== "withdrawn").slice(0, 500);
      const revisions = {};
      for (const b of shown) if (Number.isInteger(b.revision) && b.revision > 0) revisions[b.block_id] = b.revision;
      post(`/v1/runs/${encodeURIComponent(client.runId)}/receipts`, {
        type, last_event_id: last, block_ids: shown.map((b) => b.block_id), client_id: client.clientId, revisions,
      });
    };
    if (immediate) { clearTimeout(client.receipts.timers[key]); send(); return; }
    client.receipts.timers[key] = setTimeout(send, 1500);
  }

  function reportConflict(detail) {
    post(`/v1/runs/${encodeURIComponent(client.runId)}/receipts`, {
      type: "client.conflict", last_event_id: client.lastId, detail: String(detail).slice(0, 2000),
      client_id: client.clientId,
    });
  }

  // ---------------------------------------------------------------- frames
  function verifySummary(summaryId, data) {
    const ids = Array.from(client.held.keys()).filter((id) => id < summaryId && !TERMINAL.has(client.held.get(id).event)).sort((a, b) => a - b);
    if (Array.from(client.skipped).some((id) => id < summaryId && !client.held.has(id))) return false;
    const lines = ids.map((id) => `${id}:${client.held.get(id).sha}\n`).join("");
    const ok = data && data.frame_count === ids.length && data.last_id === (ids.length ? ids[ids.length - 1] : 0)
      && data.digest === sha256Hex(lines);
    return ok;
  }

  /** What the status says once the stream ended: only a completed run reads as complete (D5).
   *  Any other end keeps the saved blocks shown above and says the answer is incomplete, and why. */
  function endedAs(status) {
    if (!status || !status.state || status.state === "completed") return "complete";
    const why = ENDED_REASON[status.reason] || status.reason;
    return `${status.state}${why ? " — " + why : ""}; the answer is incomplete (saved blocks are kept)`;
  }
  const ENDED_REASON = {
    runtime_lost: "the research runtime stopped responding",
    stop_requested: "stopped at your request",
  };

  /** Everything held of the run shown: a reset (D8) or the next question's answer (D9). */
  function forget() {
    client.held.clear();
    client.skipped.clear();
    client.lastId = 0;
    client.blocks.clear();
    client.content.clear();
    client.summary = null;
    client.validated = null;
    client.status = null;
    client.receipts.received = 0;
    client.receipts.rendered = 0;
    $("progress").textContent = "";
    $("evidence").replaceChildren();
    $("content").textContent = "";
    $("closed").hidden = true;
    $("integrity").dataset.state = "pending";
    $("integrity").textContent = "stream not finished";
  }

  /** D8: the stream starts over. Everything held is forgotten; what follows is the
   * whole current view from frame 1, checked on its own (D3). */
  function reset(raw) {
    let data = {};
    try { data = JSON.parse(raw) || {}; } catch (e) { /* the reset holds even without its detail */ }
    client.resets += 1;
    forget();
    notice(`The stream started over: it could not continue after frame ${data.last_event_id}; `
      + "showing the answer as it stands now.");
    scheduleRender();
  }

  function handleFrame(id, event, raw) {
    if (event === "reset") { if (!client.done) reset(raw); return; }
    if (!Number.isInteger(id)) { fail("missing_id", "A frame arrived without an id."); return; }
    if (client.held.has(id) || id <= client.lastId) { client.duplicates += 1; fail("duplicate_id", "Frame " + id + " arrived twice."); return; }
    if (id !== client.lastId + 1) {
      if (client.transport === "eventsource" && id > client.lastId + 1) {
        // EventSource hands on only the kinds listened to; its own Last-Event-ID (and this page's
        // resume after the last frame dispatched) means nothing in between was lost: frames of
        // kinds this page does not know (R8), checked against the summary at the end.
        for (let skipped = client.lastId + 1; skipped < id; skipped++) client.skipped.add(skipped);
      } else {
        fail("id_gap", "Frames " + (client.lastId + 1) + "–" + (id - 1) + " are missing.");
      }
    }
    if (client.done) { fail("frame_after_terminal", "A frame arrived after the end of the stream."); reportConflict("frame after terminal"); }
    let data = raw;
    if (event !== "done") {
      try { data = JSON.parse(raw); } catch (e) { fail("bad_frame", "Frame " + id + " is not JSON."); }
    }
    client.held.set(id, { event, sha: data && typeof data === "object" ? data.body_sha256 || "" : "" });
    client.lastId = id;

    if (event === "done") {
      if (client.done) { fail("duplicate_terminal", "The stream ended twice."); return; }
      client.done = true;
      if (Array.from(client.skipped).some((skipped) => !client.held.has(skipped))) {
        $("integrity").textContent = "checking the frames of kinds this page does not know";
        const runId = client.runId;
        readSkipped().then(() => { if (client.runId === runId && client.lastId === id) verdict(id, raw); });
      } else {
        verdict(id, raw);
      }
      $("cancel").disabled = true;
      requestReceipt("client.received", true);
      render();
      requestReceipt("client.rendered", true);
      followNext();
      return;
    }
    if (event === "stream-summary") {
      if (client.summary) fail("duplicate_summary", "Two stream summaries arrived.");
      client.summary = { id, data };
      return;
    }
    if (!data || typeof data !== "object") return;
    apply(event, data);
  }

  /** D3 once `done` arrived: the summary against every frame held (and skipped, R8). */
  function verdict(id, raw) {
    const problems = [];
    if (raw !== "[DONE]") problems.push("contradictory terminal");
    if (!client.summary) problems.push("missing stream summary");
    else if (client.summary.id !== id - 1) problems.push("summary not right before the terminal");
    else if (!verifySummary(client.summary.id, client.summary.data)) problems.push("stream summary does not match the frames held");
    client.validated = problems.length === 0;
    const footer = $("integrity");
    if (client.validated) {
      footer.dataset.state = "ok";
      footer.textContent = `complete: ${client.held.size} frames, summary verified`;
      $("status").textContent = endedAs(client.status);
    } else {
      footer.dataset.state = "error";
      footer.textContent = "stream integrity error: " + problems.join("; ");
      fail("summary_mismatch", "The stream could not be verified: " + problems.join("; "));
      reportConflict(problems.join("; "));
    }
  }

  /** R8: the frames EventSource read and did not dispatch (kinds this page does not know), read
   *  once with fetch from the first of them so their ids and body hashes can be checked (D3).
   *  Nothing of them is applied. */
  async function readSkipped() {
    const first = Math.min(...client.skipped);
    const controller = new AbortController();
    try {
      const response = await fetch(`/v1/runs/${encodeURIComponent(client.runId)}/events`, {
        headers: { Accept: "text/event-stream", Authorization: "Bearer " + client.token, "Last-Event-ID": String(first - 1) },
        cache: "no-store", signal: controller.signal });
      if (!response.ok || !response.body) return;
      await readEvents(response, (id, event, data) => {
        if (!client.skipped.has(id) || client.held.has(id)) return true;
        let parsed = null;
        try { parsed = JSON.parse(data); } catch (e) { /* held without a hash: the summary says so */ }
        client.held.set(id, { event, sha: parsed && typeof parsed === "object" ? parsed.body_sha256 || "" : "" });
        return Array.from(client.skipped).some((skipped) => !client.held.has(skipped));
      });
    } catch (e) {
      // unread: the summary check says the frames held do not match
    } finally {
      controller.abort();
    }
  }

  function apply(event, data) {
    const stripped = data.superseded || data.purged || data.withdrawn;
    switch (event) {
      case "answer-preview": case "answer-publication": case "answer-withdrawn": case "answer-rejected":
        if (!stripped && "block" in data && data.block_id) {
          if (data.block) client.blocks.set(data.block_id, data.block);
          else client.blocks.delete(data.block_id);
        }
        if (!stripped && data.status === "dropped") {  // X11: never saved, and never will be
          client.dropped.push(data.block_id);
          notice(data.block
            ? `An unsaved revision was dropped: the run stopped before it was saved; the saved revision ${data.block.revision} stays.`
            : "An unsaved preview was dropped: the run stopped before it was saved.");
        }
        if (event === "answer-rejected" && !stripped) {
          notice(data.rejection === "revision" ? `A revision was not applied (${data.reason}).` : `A block could not be published (${data.reason}).`);
        }
        if (stripped && data.block_id && (data.withdrawn || data.purged)) client.blocks.delete(data.block_id);
        break;
      case "error":
        if (!stripped) {
          fail("protocol_conflict", `Block ${data.block_id} revision ${data.revision} arrived with two different bodies; neither is shown as final.`);
          reportConflict(`protocol conflict on ${data.block_id} r${data.revision}`);
        }
        break;
      case "run-status":
        if (!stripped) {
          client.status = data;
          const label = data.state === "completed" && !client.done ? "completed — delivering" : data.state + (data.outcome ? " (" + data.outcome + ")" : "");
          $("status").textContent = label;
          $("status").dataset.state = data.state || "";
          const ended = ["completed", "stopped", "failed", "throttled", "rejected"].includes(data.state);
          $("cancel").disabled = ended;
          if (ended) $("progress").textContent = "";  // a stage is news only while the run works
        }
        break;
      case "progress":
        if (!stripped) $("progress").textContent = data.stage + (data.detail ? ": " + data.detail : "");
        break;
      case "content":
        if (!stripped && typeof data.text === "string") client.content.set(data.seq, data.text);
        break;
      case "evidence-summary":
        if (!stripped) {
          const list = $("evidence");
          list.replaceChildren();
          for (const item of data.items || []) {
            const li = document.createElement("li");
            li.textContent = item.redacted ? "(redacted source)" : (item.title || item.source_id);
            list.appendChild(li);
          }
          $("closed").hidden = false;
        }
        break;
      default:
        break;
    }
    scheduleRender();
    requestReceipt("client.received");
  }

  // ---------------------------------------------------------------- the stream
  const FRAME_KINDS = ["progress", "answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
    "run-status", "content", "evidence-summary", "error", "stream-summary", "done", "reset"];

  function connect() {
    if (client.stopped || client.done) return;
    if (client.transport === "eventsource") return openEventSource();
    return connectFetch();
  }

  /** A stream ticket for this run, or null (the failure is reported and the client stops). */
  async function streamTicket() {
    let response;
    try {
      response = await fetch(`/v1/runs/${encodeURIComponent(client.runId)}/stream-tickets`, {
        method: "POST", cache: "no-store", headers: { Authorization: "Bearer " + client.token } });
    } catch (e) {
      return undefined;  // network: try again later
    }
    if (response.status === 401) { fail("unauthorized", "The token was refused."); stop(); return null; }
    if (response.status === 404) { fail("not_found", "No such run for this account."); stop(); return null; }
    if (!response.ok) return undefined;
    return (await response.json()).ticket;
  }

  async function openEventSource() {
    $("connection").dataset.state = "connecting";
    $("connection").textContent = client.lastId ? "resuming after " + client.lastId : "connecting";
    const ticket = await streamTicket();
    if (ticket === null) return;
    if (ticket === undefined) return retry();
    if (client.stopped || client.done) return;
    let url = `/v1/runs/${encodeURIComponent(client.runId)}/events?ticket=${encodeURIComponent(ticket)}`;
    if (client.lastId > 0) url += `&last_event_id=${client.lastId}`;  // a new source sends no Last-Event-ID
    const source = new EventSource(url);
    client.source = source;
    source.onopen = () => {
      client.connections += 1;
      client.retryDelay = 250;
      $("connection").dataset.state = "open";
      $("connection").textContent = "connected";
    };
    const onFrame = (event) => {
      // "error" is both a frame kind (a protocol conflict) and EventSource's own
      // connection-error event: only a MessageEvent is a frame.
      if (client.source !== source || !(event instanceof MessageEvent)) return;
      handleFrame(event.lastEventId === "" ? NaN : Number(event.lastEventId), event.type, event.data);
      if (client.done) {
        source.close();  // nothing comes after done: no reconnect
        client.source = null;
        $("connection").dataset.state = "closed";
        $("connection").textContent = "finished";
      }
    };
    for (const kind of FRAME_KINDS) source.addEventListener(kind, onFrame);
    source.onerror = () => {
      if (client.source !== source || client.done) return;
      if (source.readyState === EventSource.CLOSED) {
        // Refused (an expired ticket, a deleted run): the browser gave up; mint a new
        // ticket and continue after the last frame held.
        client.source = null;
        return retry();
      }
      $("connection").dataset.state = "retrying";  // the browser reconnects by itself
      $("connection").textContent = "reconnecting";
    };
  }

  async function connectFetch() {
    if (client.stopped || client.done) return;
    const controller = new AbortController();
    client.abort = controller;
    const headers = { Accept: "text/event-stream", Authorization: "Bearer " + client.token };
    if (client.lastId > 0) headers["Last-Event-ID"] = String(client.lastId);
    $("connection").dataset.state = "connecting";
    $("connection").textContent = client.lastId ? "resuming after " + client.lastId : "connecting";
    let response;
    try {
      response = await fetch(`/v1/runs/${encodeURIComponent(client.runId)}/events`, { headers, cache: "no-store", signal: controller.signal });
    } catch (e) {
      return retry();
    }
    if (response.status === 401) { fail("unauthorized", "The token was refused."); return stop(); }
    if (response.status === 404) { fail("not_found", "No such run for this account."); return stop(); }
    if (!response.ok || !response.body) return retry();
    client.connections += 1;
    client.retryDelay = 250;
    $("connection").dataset.state = "open";
    $("connection").textContent = "connected";
    try {
      await readEvents(response, (id, event, data) => { handleFrame(id, event, data); return true; });
    } catch (e) {
      // connection killed: resume below
    }
    if (client.done) {
      $("connection").dataset.state = "closed";
      $("connection").textContent = "finished";
      return;
    }
    return retry();
  }

  /** A streaming SSE parser: `onEvent(id, event, data)` per event (an event of any kind: the
   *  caller decides what it knows, R8) until the body ends or `onEvent` returns false. */
  async function readEvents(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let frame = { id: null, event: "", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (frame.data.length || frame.event) {
            const more = onEvent(frame.id === null ? NaN : Number(frame.id), frame.event || "message", frame.data.join("\n"));
            if (more === false) { reader.cancel().catch(() => {}); return; }
          }
          frame = { id: null, event: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;  // keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value2 = colon < 0 ? "" : line.slice(colon + 1);
        if (value2.startsWith(" ")) value2 = value2.slice(1);
        if (field === "id") frame.id = value2;
        else if (field === "event") frame.event = value2;
        else if (field === "data") frame.data.push(value2);
      }
    }
  }

  function retry() {
    if (client.stopped || client.done) return;
    $("connection").dataset.state = "retrying";
    $("connection").textContent = "reconnecting";
    const delay = client.retryDelay;
    client.retryDelay = Math.min(5000, client.retryDelay * 2);
    setTimeout(connect, delay);
  }

  // ---------------------------------------------------------------- notices (D7)
  /** A notice of the run's conversation, as its conversation stream carries it (D9): after
   *  `done` a withdrawal reaches an open page only there. Notices about other runs, or blocks
   *  this page does not show, change nothing and are not acknowledged (this page never showed
   *  them). `id` is the notice's own id in the conversation. */
  function handleNotice(id, raw) {
    const n = client.notices;
    if (!Number.isInteger(id) || id <= n.last) { n.duplicates += 1; return; }
    n.last = id;
    let notice;
    try { notice = JSON.parse(raw); } catch (e) { return; }
    if (!notice || notice.kind !== "withdrawn" || notice.run_id !== client.runId) return;
    const entry = client.blocks.get(notice.block_id);
    if (!entry || entry.status === "withdrawn") return;
    client.blocks.set(notice.block_id, { ...entry, status: "withdrawn", content: null, citations: [], numbers: [],
                                         withdrawn: { cause: notice.cause, notice_id: id } });
    scheduleRender();
    if (!n.acked.has(id)) {
      n.acked.add(id);
      post(`/v1/runs/${encodeURIComponent(notice.run_id)}/receipts`, {
        type: "client.received", client_id: client.clientId, notice_ids: [id],
      });
    }
  }

  // ---------------------------------------------------------------- the conversation (D9)
  /** The conversation stream, from the last entry held: its questions in order with their
   *  states and the queue (the newest fact's), what every tab of the conversation shows. */
  async function followConversation() {
    const c = client.conversation;
    if (client.stopped || c.source) return;
    if (!c.id) {
      const run = client.runId ? await get(`/v1/runs/${encodeURIComponent(client.runId)}`) : undefined;
      if (!run || !run.conversation_id) return retryConversation();  // Delivery may not know the run yet
      c.id = run.conversation_id;
    }
    const path = `/v1/conversations/${encodeURIComponent(c.id)}`;
    let ticket;
    try {
      const response = await fetch(`${path}/stream-tickets`, {
        method: "POST", cache: "no-store", headers: { Authorization: "Bearer " + client.token } });
      if (response.status === 401) return;
      if (!response.ok) return retryConversation();  // 404: no question of it is known yet
      ticket = (await response.json()).ticket;
    } catch (e) {
      return retryConversation();
    }
    if (client.stopped) return;
    let url = `${path}/events?ticket=${encodeURIComponent(ticket)}`;
    if (c.last > 0) url += `&last_event_id=${c.last}`;
    const source = new EventSource(url);
    c.source = source;
    source.onopen = () => { c.connections += 1; c.retryDelay = 500; };
    const onEntry = (event) => {
      if (c.source !== source || !(event instanceof MessageEvent)) return;
      handleEntry(Number(event.lastEventId), event.type, event.data);
    };
    for (const kind of ["turn", "notice", "reset"]) source.addEventListener(kind, onEntry);
    source.onerror = () => {
      if (c.source !== source || source.readyState !== EventSource.CLOSED) return;  // the browser reconnects
      c.source = null;
      retryConversation();
    };
  }

  function retryConversation() {
    const c = client.conversation;
    if (client.stopped) return;
    const delay = c.retryDelay;
    c.retryDelay = Math.min(5000, c.retryDelay * 2);
    setTimeout(followConversation, delay);
  }

  const ENDED_KINDS = new Set(["ended", "refused", "cancelled", "merged", "steered"]);
  const ENDED_STATES = new Set(["completed", "stopped", "failed", "throttled", "rejected"]);

  function questionEnded(q) { return ENDED_KINDS.has(q.kind) || ENDED_STATES.has(q.state); }

  /** One entry, folded as imprint.delivery.conversation.fold folds it. */
  function handleEntry(id, event, raw) {
    const c = client.conversation;
    if (event === "reset") {  // D8: every entry again from 1
      c.last = 0; c.questions.clear(); c.queue = []; c.running = [];
      return;
    }
    if (!Number.isInteger(id) || id <= c.last) { c.duplicates += 1; return; }
    c.last = id;
    let d;
    try { d = JSON.parse(raw); } catch (e) { return; }
    if (!d) return;
    if (event === "notice") { handleNotice(Number(d.notice_id), raw); return; }
    if (event !== "turn") return;
    let q = c.questions.get(d.run_id);
    if (!q) { q = { run_id: d.run_id, kind: null, state: null }; c.questions.set(d.run_id, q); }
    if (d.kind === "transition") {
      q.state = d.state;
    } else {
      q.kind = d.kind;
      for (const name of ["message_id", "policy", "reason", "by", "end"]) if (d[name] != null) q[name] = d[name];
      if (d.kind === "ended" && d.state) q.state = d.state;
      if (Array.isArray(d.queued)) { c.queue = d.queued.slice(); c.running = (d.running || []).slice(); }
    }
    renderConversation();
    followNext();
  }

  const KIND_LABEL = { queued: "waiting", started: "started", refused: "refused", cancelled: "cancelled",
    sent_now: "sent now", merged: "merged", steered: "handed to the live answer", interrupted: "interrupted",
    ended: "ended" };

  function renderConversation() {
    const c = client.conversation;
    const list = $("questions");
    list.replaceChildren();
    for (const q of c.questions.values()) {
      const li = document.createElement("li");
      li.dataset.runId = q.run_id;
      li.dataset.kind = q.kind || "";
      li.dataset.state = q.state || "";
      if (q.run_id === client.runId) li.dataset.shown = "true";
      const what = q.kind ? KIND_LABEL[q.kind] || q.kind : q.state || "";
      li.dataset.end = q.end || "";
      li.textContent = `${q.run_id}: ${what}${q.end ? " — " + q.end : ""}${q.state && q.kind ? " (" + q.state + ")" : ""}`
        + (q.reason && q.reason !== q.end ? " — " + q.reason : "") + (q.by ? " — by " + q.by : "");
      list.appendChild(li);
    }
    const queue = $("queue");
    queue.replaceChildren();
    for (const runId of c.queue) {
      const li = document.createElement("li");
      li.dataset.runId = runId;
      const label = document.createElement("span");
      label.textContent = runId;
      const cancel = document.createElement("button");
      cancel.type = "button"; cancel.className = "cancel-queued"; cancel.textContent = "Cancel";
      cancel.addEventListener("click", () => queueAction(runId, "cancel", cancel));
      const now = document.createElement("button");
      now.type = "button"; now.className = "send-now"; now.textContent = "Send now";
      now.addEventListener("click", () => queueAction(runId, "send-now", now));
      li.append(label, " ", cancel, " ", now);
      queue.appendChild(li);
    }
    $("conversation").hidden = c.questions.size === 0;
  }

  async function queueAction(runId, action, button) {
    const c = client.conversation;
    button.disabled = true;
    const answer = await postForAnswer(
      `/v1/conversations/${encodeURIComponent(c.id)}/queue/${encodeURIComponent(runId)}/${action}`, {});
    if (answer.status === 409 && answer.body) {
      notice(`The question ${runId} had already started: it can no longer be ${action === "cancel" ? "cancelled" : "sent now"}.`);
    } else if (answer.status !== 202) {
      notice("The request was not accepted.");
      button.disabled = false;
    }
  }

  /** Move on to the conversation's next answer once the one shown has ended (its blocks stay
   *  above); with no run yet (#conversation=…), show its live question. */
  function followNext() {
    const c = client.conversation;
    if (client.stopped) return;
    const shown = client.runId ? c.questions.get(client.runId) : null;
    if (client.runId && !client.done) return;
    if (client.runId && shown === undefined) return;
    const candidates = c.running.filter((r) => r !== client.runId && !c.earlier.includes(r));
    let next = candidates[0];
    if (!next && !client.runId) {
      const all = Array.from(c.questions.values()).filter((q) => !c.queue.includes(q.run_id));
      next = (all.find((q) => !questionEnded(q)) || all[all.length - 1] || {}).run_id;
    }
    if (next) showRun(next);
  }

  function showRun(runId) {
    const c = client.conversation;
    if (client.runId) {
      const kept = $("blocks").cloneNode(true);
      kept.removeAttribute("id");
      kept.className = "earlier-answer";
      kept.dataset.runId = client.runId;
      $("earlier").appendChild(kept);
      c.earlier.push(client.runId);
    }
    if (client.source) { client.source.close(); client.source = null; }
    if (client.abort) { client.abort.abort(); client.abort = null; }
    forget();
    client.done = false;
    client.stop = null;
    client.dropped = [];
    client.retryDelay = 250;
    client.runId = runId;
    $("run-id").value = runId;
    $("cancel").disabled = false;
    $("status").textContent = "—";
    $("status").dataset.state = "";
    render();
    renderConversation();
    connect();
  }

  /** GET with the bearer token: the JSON, null (refused: nothing to do) or undefined (try again). */
  async function get(path) {
    try {
      const response = await fetch(path, { cache: "no-store", headers: { Authorization: "Bearer " + client.token } });
      if (response.status === 401 || response.status === 404) return null;
      return response.ok ? await response.json() : undefined;
    } catch (e) {
      return undefined;
    }
  }

  function stop() {
    client.stopped = true;
    if (client.source) { client.source.close(); client.source = null; }
    if (client.conversation.source) { client.conversation.source.close(); client.conversation.source = null; }
    $("connection").dataset.state = "closed";
    $("connection").textContent = "closed";
  }

  /** For tests and the curious: drop the current connection; the client resumes. */
  client.dropConnection = function () {
    if (client.source) { client.source.close(); client.source = null; connect(); }
    else if (client.abort) client.abort.abort();
  };

  // ---------------------------------------------------------------- start
  function params() {
    const out = new URLSearchParams(location.search);
    const hash = new URLSearchParams(location.hash.replace(/^#/, ""));
    for (const [k, v] of hash) out.set(k, v);
    return out;
  }

  function start(runId, token) {
    const wanted = params().get("transport");
    client.transport = wanted === "fetch" || typeof window.EventSource !== "function" ? "fetch" : "eventsource";
    client.token = token;
    $("token").value = token;
    if (!runId) { followConversation(); return; }  // #conversation=…: its live question comes from its stream
    client.runId = runId;
    $("run-id").value = runId;
    $("cancel").disabled = false;
    connect();
    followConversation();
  }

  $("connect").addEventListener("submit", (e) => {
    e.preventDefault();
    const runId = $("run-id").value.trim();
    const tokenValue = $("token").value.trim();
    if (client.runId) {  // a different run: start from a clean page, token stays in the fragment
      location.hash = new URLSearchParams({ run: runId, token: tokenValue }).toString();
      location.reload();
      return;
    }
    start(runId, tokenValue);
  });
  $("cancel").addEventListener("click", async () => {
    $("cancel").disabled = true;
    const answer = await postForAnswer(`/v1/runs/${encodeURIComponent(client.runId)}/cancel`, {});
    if (answer.status === 202 && answer.body) {
      client.stop = { kept: answer.body.kept };
      const blocks = (answer.body.kept && answer.body.kept.blocks) || [];
      const line = document.createElement("p");
      line.id = "stop";
      line.dataset.kept = JSON.stringify(blocks.map((b) => [b.block_id, b.revision]));
      line.textContent = `Stop requested. ${blocks.length} saved block${blocks.length === 1 ? "" : "s"} `
        + `${blocks.length === 1 ? "is" : "are"} kept`
        + (blocks.length ? ": " + blocks.map((b) => `${b.block_id} (revision ${b.revision})`).join(", ") : "")
        + "; anything still unsaved is dropped when the run stops.";
      $("notices").appendChild(line);
      if (!client.done) { $("status").textContent = "stopping…"; $("status").dataset.state = "stopping"; }
    } else if (answer.status === 409) {
      notice("The run had already finished: nothing to stop.");
    } else {
      notice("The stop request was not accepted.");
      $("cancel").disabled = client.done;
    }
  });

  const p = params();
  const run = p.get("run");
  const token = p.get("token");
  if (p.get("conversation")) client.conversation.id = p.get("conversation");
  if ((run || client.conversation.id) && token) start(run || "", token);
})();
