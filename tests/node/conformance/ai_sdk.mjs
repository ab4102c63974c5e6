// The conformance kit's adapter for the AI SDK mapping: npm `ai`'s own DefaultChatTransport
// (its resume request, its SSE and JSON parsing, its strict part validation) and
// readUIMessageStream read the run's UI message stream (GET /v1/ai-sdk/runs/{id}/stream), the
// way a front end on `ai` does; nothing of imprint's in between. What the adapter adds is a
// transport's own duty the SDK leaves to the application: a stream ticket in the URL (a new
// one when it is refused), reading again from `start` when the connection drops (the SDK's
// protocol has no positions: every request replays the whole message, which replaces the one
// held), and, once the run finished, the conversation's notices (GET
// /v1/ai-sdk/conversations/{id}/notices) applied to the run's message by readUIMessageStream
// itself, as tests/node/read_notices.mjs does. The view reported is the message: its
// `data-block` parts (shown ones, by ordinal), its text, its metadata, its `data-conflict`
// parts. Protocol: services/conformance/client/runner.py.
//
//   imprint conformance client -- node tests/node/conformance/ai_sdk.mjs [ai5|ai6]
import { createInterface } from "node:readline";

const line = process.argv[2] || "ai6";
const { DefaultChatTransport, readUIMessageStream } = await import(line);
const SHOWN = new Set(["committed", "preview", "conflict"]);

let current = null;

/** fetch for this case: aborted when the case closes; remembers the last status. */
function caseFetch(c) {
  return async (url, options = {}) => {
    const response = await fetch(url, { ...options, signal: c.abort.signal });
    c.lastStatus = response.status;
    return response;
  };
}

async function mint(c, path) {
  const response = await c.fetch(`${c.base}${path}`, { method: "POST", headers: { Authorization: `Bearer ${c.token}` } });
  if (!response.ok) throw new Error(`no ticket: ${response.status}`);
  return (await response.json()).ticket;
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

/** Read a stream of chunks (counted as they arrive) into `message` with readUIMessageStream. */
async function read(c, chunks, onChunk, message) {
  const counted = chunks.pipeThrough(new TransformStream({
    transform(chunk, controller) {
      c.events += 1;
      if (onChunk(chunk)) controller.enqueue(chunk);
    },
  }));
  for await (const update of readUIMessageStream({ stream: counted, ...(message ? { message: structuredClone(message) } : {}),
    onError: (error) => { c.errors.push(String(error)); } })) {
    if (!c.closed) c.message = update;
  }
}

async function followRun(c) {
  let ticket = c.ticket;
  while (!c.closed && !c.done) {
    const transport = new DefaultChatTransport({
      api: `${c.base}/v1/ai-sdk/runs`, fetch: c.fetch,
      prepareReconnectToStreamRequest: ({ id }) => ({
        api: `${c.base}/v1/ai-sdk/runs/${encodeURIComponent(id)}/stream?ticket=${encodeURIComponent(ticket)}`,
        headers: {},
      }),
    });
    try {
      const chunks = await transport.reconnectToStream({ chatId: c.runId });
      if (chunks === null) { c.done = true; break; }
      c.finished = false;
      await read(c, chunks, (chunk) => { if (chunk.type === "finish") c.finished = true; return true; });
      if (c.finished) c.done = true;  // else the connection dropped: read the whole message again
    } catch (error) {
      if (c.closed) return;
      if (c.lastStatus === 401) { ticket = await mint(c, `/v1/runs/${encodeURIComponent(c.runId)}/stream-tickets`); continue; }
      await turn();
    }
  }
  if (c.done && !c.closed) await followNotices(c);
}

async function followNotices(c) {
  let last = 0;
  while (!c.closed) {
    try {
      const ticket = await mint(c, `/v1/conversations/${encodeURIComponent(c.conversationId)}/stream-tickets`);
      const transport = new DefaultChatTransport({
        api: `${c.base}/v1/ai-sdk/conversations`, fetch: c.fetch,
        prepareReconnectToStreamRequest: ({ id }) => ({
          api: `${c.base}/v1/ai-sdk/conversations/${encodeURIComponent(id)}/notices?ticket=${encodeURIComponent(ticket)}`,
          headers: last ? { "Last-Event-ID": String(last) } : {},
        }),
      });
      const chunks = await transport.reconnectToStream({ chatId: c.conversationId });
      if (chunks === null) return;
      const runMessage = c.message;
      await read(c, chunks, (chunk) => {
        const data = chunk.data || {};
        if (Number.isInteger(data.notice_id)) last = Math.max(last, data.notice_id);
        return chunk.type === "data-block" && data.message_id === runMessage.id;  // the notices of this message
      }, runMessage);
    } catch (error) {
      if (c.closed) return;
      await turn();
    }
  }
}

async function view() {
  for (let i = 0; i < 3; i++) await turn();  // let readUIMessageStream apply what it was handed
  const c = current;
  const parts = (c.message && c.message.parts) || [];
  const shown = parts.filter((p) => p.type === "data-block" && SHOWN.has(p.data.state)).map((p) => p.data)
    .sort((a, b) => (a.ordinal ?? 0) - (b.ordinal ?? 0) || (a.block_id < b.block_id ? -1 : 1));
  return {
    events: c.events,
    view: {
      blocks: shown.map((d) => [d.block_id, d.revision, d.status]),
      bodies: Object.fromEntries(shown.filter((d) => d.status !== "conflict").map((d) => [d.block_id, d.markdown])),
      text: parts.filter((p) => p.type === "text").map((p) => p.text).join(""),
      done: c.finished,  // the message's `finish` part was handled (the stream may not have closed yet)
      state: (c.message && c.message.metadata && c.message.metadata.run && c.message.metadata.run.state) ?? null,
      conflict: parts.some((p) => p.type === "data-conflict"),
    },
  };
}

function openCase(m) {
  const c = { base: m.base, runId: m.run_id, conversationId: m.conversation_id, token: m.token, ticket: m.ticket,
              abort: new AbortController(), events: 0, message: null, done: false, finished: false, closed: false, errors: [],
              lastStatus: 0 };
  c.fetch = caseFetch(c);
  current = c;
  followRun(c).catch((error) => c.errors.push(String(error)));
}

function closeCase() {
  if (!current) return;
  current.closed = true;
  current.abort.abort();
  current = null;
}

const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");
for await (const input of createInterface({ input: process.stdin })) {
  if (!input.trim()) continue;
  try {
    const message = JSON.parse(input);
    if (message.op === "open") { closeCase(); openCase(message); say({ ok: true }); }
    else if (message.op === "view") say(await view());
    else if (message.op === "close") { closeCase(); say({ ok: true }); }
    else say({ error: `unknown op ${message.op}` });
  } catch (error) {
    say({ error: String(error && error.stack || error) });
  }
}
closeCase();
process.exit(0);
