// The AI SDK's own client following a conversation stream (D9) in Node, the way a front end
// on `ai` would: DefaultChatTransport's resume request, pointed at the conversation's events
// by prepareReconnectToStreamRequest (with the last entry held as Last-Event-ID when given),
// read by readUIMessageStream into the conversation's own message: one `data-turn` part per
// question, replaced in place by the SDK as the question moves (waiting, started, ended…).
//
//   node read_conversation.mjs <ai5|ai6|ai7> <base url> <conversation id> <bearer token> <count> [last id]
//
// Stops after <count> entries; prints one JSON line: {package, status, message, entries: [{type, id}], errors}.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { openConversationFeed, readInto, report } from "./ui_message_reader.mjs";

const [line, base, conversationId, token, count, lastId] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "node_modules", line, "package.json"), "utf8"));
const ai = await import(line);
const headers = { Authorization: `Bearer ${token}` };
const out = { package: line, version, status: "", message: null, entries: [], errors: [] };

try {
  const chunks = await openConversationFeed(ai, { base, conversationId, feed: "events", headers, lastId });
  if (chunks === null) throw new Error("no conversation stream");
  const wanted = Number(count);
  const counted = new TransformStream({
    transform(chunk, controller) {
      controller.enqueue(chunk);
      if (chunk.type.startsWith("data-")) out.entries.push({ type: chunk.type, id: chunk.id });
      if (out.entries.length >= wanted) controller.terminate();
    },
  });
  await readInto(ai, out, { stream: chunks.pipeThrough(counted) });
} catch (error) {
  out.errors.push(String(error && error.stack || error));
  out.status = "error";
}
report(out);
