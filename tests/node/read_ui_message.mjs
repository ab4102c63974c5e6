// The AI SDK's own client reading one imprint run in Node (ui_message_reader.mjs).
//
//   node read_ui_message.mjs <ai5|ai6|ai7> <api> <chatId> <bearer token> [Last-Event-ID]
//
// Prints one JSON line: {package, version, node, status, message, updates, chunks, errors}.
// With a Last-Event-ID the transport sends it as a header of its own (the SDK has none).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { readRun } from "./ui_message_reader.mjs";

const [line, api, chatId, token, lastEventId] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "node_modules", line, "package.json"), "utf8"));

const headers = { Authorization: `Bearer ${token}` };
if (lastEventId) headers["Last-Event-ID"] = lastEventId;
const result = await readRun(await import(line), { api, chatId, headers });
const out = { package: line, version, node: process.version, ...result };
process.stdout.write(JSON.stringify(out) + "\n");
process.exitCode = out.status === "error" ? 1 : 0;
