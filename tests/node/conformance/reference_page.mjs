// The conformance kit's adapter for the reference page's client (services/delivery/static/app.js):
// the page's own script, unchanged, run under Node 20 in a fresh VM context per case, with the
// browser APIs it uses — EventSource (undici's WHATWG implementation, the one Node 22 ships as
// its global), fetch, a small DOM the page renders into, requestAnimationFrame, timers.
// The view reported is what the page rendered: the blocks in #blocks (in DOM order, their
// data-* attributes and body text), #content, and the page's client state for done, run
// state, protocol conflicts and its own stream-summary check (verified). Events are counted as
// the EventSource dispatches them (any kind, listened to or not) and as the page's fetch
// reads SSE. Protocol: services/conformance/client/runner.py.
//
//   imprint conformance client -- node tests/node/conformance/reference_page.mjs
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

import { EventSource, MessageEvent } from "undici";

const here = dirname(fileURLToPath(import.meta.url));
const APP = join(here, "..", "..", "..", "services", "delivery", "static", "app.js");
const source = readFileSync(APP, "utf8");
const script = new vm.Script(source, { filename: APP });
// --fetch: the page's #transport=fetch path (its own SSE parser over fetch, resumed with
// Last-Event-ID); --ignore-withdrawals, --no-reread (the page cannot read again the frames of
// kinds it does not know, so it cannot count them in the summary): broken clients, for the
// kit's own tests.
const quirks = new Set(process.argv.slice(2));

// ------------------------------------------------------------------ a small DOM
class Node_ {
  constructor() { this.parentNode = null; this.children = []; }
  get nextSibling() {
    if (!this.parentNode) return null;
    const siblings = this.parentNode.children;
    return siblings[siblings.indexOf(this) + 1] || null;
  }
  remove() { if (this.parentNode) this.parentNode.removeChild(this); }
}

class Text_ extends Node_ {
  constructor(text) { super(); this.text = String(text); }
  get textContent() { return this.text; }
}

class Element_ extends Node_ {
  constructor(tag, id = "") {
    super();
    this.tagName = tag.toUpperCase();
    this.id = id;
    this.dataset = {};
    this.className = "";
    this.hidden = false;
    this.disabled = false;
    this.value = "";
    this.title = "";
    this.listeners = {};
    this.classList = { add: (c) => { this.className = (this.className + " " + c).trim(); } };
  }
  get firstChild() { return this.children[0] || null; }
  appendChild(child) { return this.insertBefore(child, null); }
  insertBefore(child, before) {
    if (child.parentNode) child.parentNode.removeChild(child);
    child.parentNode = this;
    const at = before ? this.children.indexOf(before) : -1;
    if (at < 0) this.children.push(child); else this.children.splice(at, 0, child);
    return child;
  }
  removeChild(child) {
    const at = this.children.indexOf(child);
    if (at >= 0) this.children.splice(at, 1);
    child.parentNode = null;
    return child;
  }
  replaceChildren(...nodes) {
    for (const child of [...this.children]) this.removeChild(child);
    for (const node of nodes) this.appendChild(node);
  }
  get textContent() { return this.children.map((c) => c.textContent).join(""); }
  set textContent(text) { this.replaceChildren(); if (text !== "") this.appendChild(new Text_(text)); }
  addEventListener(type, listener) { (this.listeners[type] ||= []).push(listener); }
}

const IDS = ["connect", "run-id", "token", "cancel", "meta", "connection", "status", "progress", "errors",
  "notices", "blocks", "closed", "content", "evidence", "integrity"];

// ------------------------------------------------------------------ one page per case
let page = null;

function openPage({ base, run_id: runId, token }) {
  const elements = Object.fromEntries(IDS.map((id) => [id, new Element_("div", id)]));
  const document = {
    getElementById: (id) => elements[id] || null,
    createElement: (tag) => new Element_(tag),
    createTextNode: (text) => new Text_(text),
  };
  const state = { events: 0, frames: [], timers: new Set(), sources: new Set() };
  class PageEventSource extends EventSource {
    constructor(url, init) {
      super(new URL(url, base).href, init);
      state.sources.add(this);
    }
    // Every SSE event the source dispatches (not a connection error), whether the page listens
    // to its kind or not: an event of a kind the page does not know is handled by skipping it (R8).
    dispatchEvent(event) {
      if (event instanceof MessageEvent) state.events += 1;
      return super.dispatchEvent(event);
    }
  }
  const timers = {
    setTimeout: (fn, ms, ...args) => {
      const handle = setTimeout(() => { state.timers.delete(handle); fn(...args); }, ms);
      state.timers.add(handle);
      return handle;
    },
    clearTimeout: (handle) => { state.timers.delete(handle); clearTimeout(handle); },
  };
  const pageFetch = async (url, options) => {
    if (quirks.has("--no-reread") && options && options.headers && options.headers["Last-Event-ID"]
        && !quirks.has("--fetch")) throw new TypeError("fetch failed");  // the kit's own test: R8's re-read lost
    return countEvents(await fetch(new URL(String(url), base), options), state);
  };
  const hash = new URLSearchParams({ run: runId, token, ...(quirks.has("--fetch") ? { transport: "fetch" } : {}) }).toString();
  const context = {
    document, location: { search: "", hash: "#" + hash, reload() {} },
    EventSource: PageEventSource, MessageEvent, fetch: pageFetch, URLSearchParams, URL, TextEncoder, TextDecoder,
    AbortController, crypto: globalThis.crypto, console,
    requestAnimationFrame: (fn) => { state.frames.push(fn); return state.frames.length; },
    ...timers,
  };
  context.window = context;
  vm.createContext(context);
  if (quirks.has("--ignore-withdrawals")) breakWithdrawals(context);
  script.runInContext(context);
  page = { context, state, elements };
}

/** An SSE response the page reads with fetch (its fetch transport, the frames it reads again,
 *  R8): its events counted as the page's reader takes them, as the kit's server counts them. */
function countEvents(response, state) {
  if (!response.body || !(response.headers.get("content-type") || "").startsWith("text/event-stream")) return response;
  const decoder = new TextDecoder();
  let buffer = "";
  const counter = new TransformStream({
    transform(chunk, controller) {
      buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        if (/(^|\n)data:/.test(buffer.slice(0, end))) state.events += 1;
        buffer = buffer.slice(end + 2);
      }
      controller.enqueue(chunk);
    },
  });
  return new Response(response.body.pipeThrough(counter), {
    status: response.status, statusText: response.statusText, headers: response.headers });
}

/** For the kit's own test: a client that drops every withdrawal (frames and notices) on the floor. */
function breakWithdrawals(context) {
  const Wrapped = context.EventSource;
  context.EventSource = class extends Wrapped {
    addEventListener(type, listener, options) {
      return super.addEventListener(type, (event) => {
        if (type === "answer-withdrawn" || type === "notice") return;
        if (typeof event.data === "string" && event.data.includes('"withdrawn":true')) return;
        listener(event);
      }, options);
    }
  };
}

function view() {
  const { context, state, elements } = page;
  while (state.frames.length) state.frames.shift()();  // the page's pending renders
  const client = context.window.imprintClient;
  const blocks = [];
  const bodies = {};
  for (const el of elements.blocks.children) {
    const status = el.dataset.status;
    if (status === "withdrawn") continue;  // kept in place, struck out: not shown (D7)
    blocks.push([el.dataset.blockId, Number(el.dataset.revision), status]);
    const body = el.children.find((c) => c.className === "body");
    if (status !== "conflict") bodies[el.dataset.blockId] = body ? body.textContent : null;
  }
  return {
    events: state.events,
    view: {
      blocks, bodies, text: elements.content.textContent, done: Boolean(client.done),
      state: client.status ? client.status.state ?? null : null,
      conflict: client.errors.includes("protocol_conflict"),
      verified: client.validated,  // the page's own D3 check at done (null before)
      errors: [...client.errors],  // not compared: what the page itself flagged, for the reader of a failure
    },
  };
}

function closePage() {
  if (!page) return;
  const { context, state } = page;
  context.window.imprintClient.stopped = true;
  for (const s of state.sources) s.close();
  for (const handle of state.timers) clearTimeout(handle);
  page = null;
}

// ------------------------------------------------------------------ JSON lines
const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  let message;
  try {
    message = JSON.parse(line);
    if (message.op === "open") { closePage(); openPage(message); say({ ok: true }); }
    else if (message.op === "view") say(view());
    else if (message.op === "close") { closePage(); say({ ok: true }); }
    else say({ error: `unknown op ${message.op}` });
  } catch (error) {
    say({ error: String(error && error.stack || error) });
  }
}
closePage();
process.exit(0);
