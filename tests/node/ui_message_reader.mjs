// One run read by the AI SDK's own client, wherever the SDK runs (Node or a browser
// page): DefaultChatTransport's resume request (GET {api}/{chatId}/stream, its own SSE +
// JSON parsing and strict part validation), then readUIMessageStream — no imprint code
// in between. `ai` is the package's module namespace; `headers` go on the request as
// the transport's own; `credentials` is the transport's fetch credentials mode.
//
// Returns {status, message, updates, chunks, errors}; chunks: the type of every chunk
// the transport handed over, transient ones included.
export async function readRun(ai, { api, chatId, headers = {}, credentials }) {
  const { DefaultChatTransport, readUIMessageStream } = ai;
  const errors = [];
  const chunks = [];
  const out = { status: "", message: null, updates: 0, chunks, errors };
  try {
    const transport = new DefaultChatTransport({ api, headers, ...(credentials ? { credentials } : {}) });
    const stream = await transport.reconnectToStream({ chatId });
    if (stream === null) {
      out.status = "no-active-stream";
      return out;
    }
    const [forReader, forLog] = stream.tee();
    const logged = (async () => { for await (const chunk of forLog) chunks.push(chunk.type); })();
    for await (const message of readUIMessageStream({
      stream: forReader, terminateOnError: true, onError: (error) => errors.push(String(error && error.stack || error)),
    })) {
      out.updates += 1;
      out.message = message;
    }
    await logged;
    out.status = errors.length ? "error" : "finished";
  } catch (error) {
    errors.push(String(error && error.stack || error));
    out.status = "error";
  }
  return out;
}

// One of a conversation's endless streams (`feed`: "notices", D7, or "events", D9) opened by the
// AI SDK's own DefaultChatTransport: its resume request, pointed at the feed by
// prepareReconnectToStreamRequest, with the last id held as Last-Event-ID when given.
// Returns the transport's chunk stream (null: nothing to resume).
export async function openConversationFeed(ai, { base, conversationId, feed, headers, lastId }) {
  const transport = new ai.DefaultChatTransport({
    api: `${base}/v1/ai-sdk/conversations`,
    headers,
    prepareReconnectToStreamRequest: ({ id, headers: given }) => ({
      api: `${base}/v1/ai-sdk/conversations/${encodeURIComponent(id)}/${feed}`,
      headers: { ...given, ...(lastId ? { "Last-Event-ID": lastId } : {}) },
    }),
  });
  return transport.reconnectToStream({ chatId: conversationId });
}

// readUIMessageStream over `stream` (from `message` when given) into `out.message`; then
// `out.status` ("finished", or "error" with `out.errors`). Whatever happens, `report(out)`
// prints the one JSON line a test reads.
export async function readInto(ai, out, { message, stream }) {
  try {
    for await (const built of ai.readUIMessageStream({
      ...(message ? { message: structuredClone(message) } : {}), stream, terminateOnError: true,
      onError: (error) => out.errors.push(String(error && error.stack || error)),
    })) {
      out.message = built;
    }
    out.status = out.errors.length ? "error" : "finished";
  } catch (error) {
    out.errors.push(String(error && error.stack || error));
    out.status = "error";
  }
}

export function report(out) {
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exitCode = out.status === "error" ? 1 : 0;
}
