// The page's module: every AI SDK line as installed (through the page's import map) and
// the same reader the Node tier runs (../ui_message_reader.mjs), for the test to call:
// window.readRun("ai6", {api, chatId, headers, credentials}).
import * as ai5 from "ai5";
import * as ai6 from "ai6";
import * as ai7 from "ai7";

import { readRun } from "../ui_message_reader.mjs";

const lines = { ai5, ai6, ai7 };
window.readRun = (line, options) => readRun(lines[line], options);
window.linesLoaded = Object.keys(lines);
