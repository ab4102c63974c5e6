// The AI SDK's own client reading one imprint run: DefaultChatTransport's resume
// request (GET {api}/{chatId}/stream, its own SSE + JSON parsing and strict part
// validation), then readUIMessageStream — no imprint code in between.
//
//   node read_ui_message.mjs <ai5|ai6|ai7> <api> <chatId> <bearer token> [Last-Event-ID]
//
// Prints one JSON line: {package, version, status, message, updates, chunks, errors};
// chunks: the type of every chunk the transport handed over, transient ones included.
// With a Last-Event-ID the transport sends it as a header of its own (the SDK has none).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const [line, api, chatId, token, lastEventId] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "node_modules", line, "package.json"), "utf8"));
const { DefaultChatTransport, readUIMessageStream } = await import(line);

const errors = [];
const chunks = [];
const out = { package: line, version, node: process.version, status: "", message: null, updates: 0, chunks, errors };
try {
  const headers = { Authorization: `Bearer ${token}` };
  if (lastEventId) headers["Last-Event-ID"] = lastEventId;
  const transport = new DefaultChatTransport({ api, headers });
  const stream = await transport.reconnectToStream({ chatId });
  if (stream === null) {
    out.status = "no-active-stream";
  } else {
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
  }
} catch (error) {
  errors.push(String(error && error.stack || error));
  out.status = "error";
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exitCode = out.status === "error" ? 1 : 0;
