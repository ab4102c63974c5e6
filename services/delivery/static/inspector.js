// The run inspector (operators only): one run's timeline per block revision, from
// GET /v1/operator/runs/{run}/timeline, and who saw each withdrawn block revision (D7).
// Everything is written with textContent: no value from the server is ever parsed as HTML.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const STAGES = ["proposed", "previewed", "committed", "withdrawn", "sent", "received", "rendered"];
  const MARKS = {
    committed_not_journaled: "committed, not journaled",
    journaled_not_committed: "journaled, not committed",
    journal_hash_differs: "journal saw another body",
    sent_not_committed: "sent, not committed",
    withheld: "withheld (integrity)",
    received_not_sent: "received, not sent",
    rendered_not_received: "rendered, not received",
  };
  const state = { runId: "", token: "", loads: 0, document: null };
  window.imprintInspector = state;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }
  function clock(at) {
    if (!at) return "—";
    const t = String(at).split("T")[1] || String(at);
    return t.slice(0, 12);
  }
  function ms(at) { const v = Date.parse(at); return Number.isNaN(v) ? null : v; }
  function short(v, n) { const s = v == null ? "" : String(v); return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  function problem(text) { $("problem").textContent = text; }

  function stageCell(kind, fact, detail, extraClass) {
    const td = el("td", { class: `stage ${kind} ${fact ? "present" : "absent"} ${extraClass || ""}`, "data-stage": kind });
    if (!fact) { td.append(detail || "—"); return td; }
    td.append(el("time", { datetime: fact.at || "" }, fact.at ? clock(fact.at) : "not yet"));
    if (detail) td.append(el("small", {}, detail));
    return td;
  }

  function render(doc) {
    state.document = doc;
    $("summary").hidden = false; $("legend").hidden = false; $("timeline").hidden = false;
    $("s-run").textContent = doc.run_id;
    $("s-account").textContent = doc.account_id || "—";
    $("s-version").textContent = doc.log_version == null ? "—" : String(doc.log_version);
    const n = doc.disagreements.length;
    const verdict = $("s-verdict");
    verdict.textContent = n ? `${n} disagreement${n > 1 ? "s" : ""}` : "log, journal and delivery agree";
    verdict.className = "pill " + (n ? "bad" : "ok");
    const life = doc.lifecycle;
    const list = $("s-lifecycle"); list.replaceChildren();
    for (const t of life.transitions) list.append(el("li", {}, t.state, el("time", {}, clock(t.at))));
    if (life.outcome) list.append(el("li", {}, "outcome " + life.outcome));
    if (life.lapsed) list.append(el("li", {}, "closed when its lease lapsed: " + life.lapsed));
    for (const r of life.refusals || []) list.append(el("li", {}, `refused ${r.message_type}: ${r.code}`, el("time", {}, clock(r.at))));
    $("s-journal").textContent = !life.available ? "journal not consulted: " + life.note
      : (life.found ? "" : "the journal has no record of this run");
    const src = doc.sources;
    $("s-sources").textContent = [src.frames ? "" : "Delivery frames unknown.",
      src.observations ? "" : "Kafka observations not read: " + src.observations_note].filter(Boolean).join(" ");

    const times = [];
    for (const b of doc.blocks) for (const r of b.revisions) {
      for (const s of STAGES) if (r[s] && r[s].at) times.push(ms(r[s].at));
      for (const j of r.journaled || []) times.push(ms(j.at));
    }
    const known = times.filter((t) => t != null);
    const lo = Math.min(...known), hi = Math.max(...known), span = Math.max(hi - lo, 1);

    const rows = $("rows"); rows.replaceChildren();
    for (const b of doc.blocks) {
      for (const r of b.revisions) {
        const tr = el("tr", { "data-block-id": b.block_id, "data-revision": String(r.revision),
          "data-status": b.status, class: r.marks.length ? "disagrees" : "" });
        tr.append(el("td", {}, String(b.delivery_ordinal)), el("td", {}, el("code", { title: b.block_id }, short(b.block_id, 14))),
          el("td", {}, String(r.revision) + (r.current ? "" : " (old)")));
        tr.append(stageCell("proposed", r.proposed.at ? r.proposed : null, short(r.proposed.candidate_id, 22)));
        tr.append(stageCell("previewed", r.previewed, r.previewed && r.previewed.quota_fact ? "quota used" : ""));
        const c = r.committed;
        tr.append(stageCell("committed", c, `@${c.log_position} · ${short(c.receipt_id, 9)}` +
          (c.integrity === "ok" ? "" : " · " + c.integrity), c.integrity === "ok" ? "" : "defect"));
        tr.append(stageCell("withdrawn", r.withdrawn, r.withdrawn ? r.withdrawn.cause : ""));
        tr.append(stageCell("sent", r.sent, r.sent ? "frames " + r.sent.frame_ids.join(", ") : ""));
        tr.append(stageCell("received", r.received, ""));
        tr.append(stageCell("rendered", r.rendered, ""));
        const j = r.journaled;
        if (j === null) tr.append(el("td", { class: "stage journaled absent" }, "?"));
        else tr.append(stageCell("journaled", j.length ? j[0] : null, j.length ? j[0].kind : "never recorded"));
        const track = el("div", { class: "track-bar" });
        const dots = STAGES.filter((s) => r[s] && r[s].at).map((s) => [s, r[s].at]);
        for (const x of j || []) dots.push(["journaled", x.at]);
        for (const [kind, at] of dots) {
          const dot = el("span", { class: `dot ${kind}`, title: `${kind} ${clock(at)}` });
          dot.style.left = (((ms(at) - lo) / span) * 100).toFixed(2) + "%";
          track.append(dot);
        }
        tr.append(el("td", { class: "track" }, track));
        const marks = el("td", { class: "marks" });
        if (r.marks.length) for (const m of r.marks) marks.append(el("span", { class: "mark", "data-mark": m }, MARKS[m] || m));
        else marks.append(el("span", { class: "agree" }, "agree"));
        tr.append(marks);
        rows.append(tr);
      }
    }
    renderSeen(doc.seen);
    const others = $("uncommitted"); others.replaceChildren();
    for (const o of doc.not_committed) {
      others.append(el("li", {}, `${o.candidate_id || "—"}: ${o.outcome}` + (o.reason ? ` (${o.reason})` : "")));
    }
    $("others").hidden = !doc.not_committed.length;
    const dis = $("disagreement-list"); dis.replaceChildren();
    for (const d of doc.disagreements) {
      dis.append(el("li", { "data-kind": d.kind }, `${MARKS[d.kind] || d.kind}: ${d.block_id || "—"} r${d.revision ?? "—"} — ${d.detail}`));
    }
    $("disagreements").hidden = !n;
  }

  /** D7: one row per client that rendered a withdrawn block revision (one for a withdrawal nobody saw). */
  function renderSeen(seen) {
    const rows = $("seen-rows"); rows.replaceChildren();
    $("seen").hidden = !seen || !seen.withdrawals.length;
    if (!seen) return;
    for (const w of seen.withdrawals) {
      const told = w.told.via === "notice" ? `notice ${w.told.notice_id}` : `frame ${w.told.frame_id}`;
      const head = () => [el("td", {}, el("code", { title: w.block_id }, short(w.block_id, 14))),
        el("td", {}, w.revision == null ? "?" : String(w.revision)), el("td", {}, w.cause),
        el("td", {}, el("time", { datetime: w.withdrawn_at }, clock(w.withdrawn_at))), el("td", {}, told)];
      if (!w.seen_by.length) {
        rows.append(el("tr", { "data-block-id": w.block_id }, ...head(), el("td", { colspan: "3", class: "note" },
          "no client reported it rendered")));
      }
      for (const s of w.seen_by) {
        const received = s.received_withdrawal;
        const state = received === null ? "unknown" : received ? "received" : "outstanding";
        rows.append(el("tr", { "data-block-id": w.block_id, "data-client-id": s.client_id || "", "data-received": state },
          ...head(), el("td", {}, el("code", {}, short(s.client_id || "(unnamed)", 14))),
          el("td", {}, `r${s.revision == null ? "?" : s.revision} `, el("time", { datetime: s.rendered_at }, clock(s.rendered_at))),
          el("td", { class: "received " + state }, received === null ? "unknown (the client never named itself)"
            : received ? el("time", { datetime: s.received_at || "" }, "yes " + clock(s.received_at)) : "not yet")));
      }
    }
    $("seen-summary").textContent = seen.outstanding
      ? `${seen.outstanding} sighting${seen.outstanding > 1 ? "s" : ""} of a withdrawn block not yet told`
      : seen.unknown ? `${seen.unknown} sighting${seen.unknown > 1 ? "s" : ""} by a client that never named itself: `
        + "whether it was told is unknown"
      : "every client that rendered a withdrawn block received its withdrawal";
  }

  async function load() {
    problem("");
    let response;
    try {
      response = await fetch(`/v1/operator/runs/${encodeURIComponent(state.runId)}/timeline`,
        { headers: { Authorization: "Bearer " + state.token, Accept: "application/json" } });
    } catch (e) { problem("Delivery does not answer."); return; }
    state.loads += 1;
    if (response.status === 401) { problem("The token was refused."); return; }
    if (response.status === 404) { problem("No such run, or this token carries no operator claim."); return; }
    if (!response.ok) { problem(`Delivery answered ${response.status}.`); return; }
    render(await response.json());
    $("refresh").disabled = false;
  }

  function start(runId, token) {
    state.runId = runId; state.token = token;
    $("run-id").value = runId; $("token").value = token;
    load();
  }
  $("open").addEventListener("submit", (event) => {
    event.preventDefault();
    const runId = $("run-id").value.trim(), token = $("token").value.trim();
    location.hash = new URLSearchParams({ run: runId, token }).toString();
    start(runId, token);
  });
  $("refresh").addEventListener("click", () => load());
  const p = new URLSearchParams(location.hash.slice(1));
  if (p.get("run") && p.get("token")) start(p.get("run"), p.get("token"));
})();
