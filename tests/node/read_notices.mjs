// The AI SDK's own client following a conversation's notices (D7) in Node, the way a front
// end on `ai` would: the run's message is read with ui_message_reader.mjs; then the same
// DefaultChatTransport opens the conversation's notices (its resume request, pointed at
// the notices route by prepareReconnectToStreamRequest, with the last notice id held as
// Last-Event-ID), and readUIMessageStream — given the run's message — applies the notices
// about that message: the SDK itself replaces the block's data part in place.
//
//   node read_notices.mjs <ai5|ai6|ai7> <base url> <run id> <conversation id> <bearer token> <count> [last id]
//
// Stops after <count> notices; prints one JSON line:
// {package, status, before, message, notices: [{id, type, data}], errors}.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { openConversationFeed, readInto, readRun, report } from "./ui_message_reader.mjs";

const [line, base, runId, conversationId, token, count, lastId] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "node_modules", line, "package.json"), "utf8"));
const ai = await import(line);
const headers = { Authorization: `Bearer ${token}` };
const out = { package: line, version, status: "", before: null, message: null, notices: [], errors: [] };

try {
  const run = await readRun(ai, { api: `${base}/v1/ai-sdk/runs`, chatId: runId, headers });
  if (run.status !== "finished") throw new Error(`the run was not read: ${JSON.stringify(run)}`);
  out.before = run.message;
  const chunks = await openConversationFeed(ai, { base, conversationId, feed: "notices", headers, lastId });
  if (chunks === null) throw new Error("no notices stream");
  const wanted = Number(count);
  const ofThisMessage = new TransformStream({
    transform(chunk, controller) {
      out.notices.push({ id: chunk.id, type: chunk.type, data: chunk.data });
      if (chunk.type === "data-block" && chunk.data && chunk.data.message_id === run.message.id) controller.enqueue(chunk);
      if (out.notices.length >= wanted) controller.terminate();
    },
  });
  out.message = run.message;
  await readInto(ai, out, { message: run.message, stream: chunks.pipeThrough(ofThisMessage) });
} catch (error) {
  out.errors.push(String(error && error.stack || error));
  out.status = "error";
}
report(out);
