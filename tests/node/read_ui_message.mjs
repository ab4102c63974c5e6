// The AI SDK's own client reading one imprint run: DefaultChatTransport's resume
// request (GET {api}/{chatId}/stream, its own SSE + JSON parsing and strict part
// validation), then readUIMessageStream — no imprint code in between.
//
//   node read_ui_message.mjs <ai5|ai6|ai7> <api> <chatId> <bearer token>
//
// Prints one JSON line: {package, version, status, message, updates, errors}.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const [line, api, chatId, token] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "node_modules", line, "package.json"), "utf8"));
const { DefaultChatTransport, readUIMessageStream } = await import(line);

const errors = [];
const out = { package: line, version, node: process.version, status: "", message: null, updates: 0, errors };
try {
  const transport = new DefaultChatTransport({ api, headers: { Authorization: `Bearer ${token}` } });
  const stream = await transport.reconnectToStream({ chatId });
  if (stream === null) {
    out.status = "no-active-stream";
  } else {
    for await (const message of readUIMessageStream({
      stream, terminateOnError: true, onError: (error) => errors.push(String(error && error.stack || error)),
    })) {
      out.updates += 1;
      out.message = message;
    }
    out.status = errors.length ? "error" : "finished";
  }
} catch (error) {
  errors.push(String(error && error.stack || error));
  out.status = "error";
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exitCode = out.status === "error" ? 1 : 0;
