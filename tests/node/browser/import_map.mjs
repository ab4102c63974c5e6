// Prints the import map under which a browser page served from tests/node/ (URL path
// "/" = this folder's parent) imports the AI SDK lines as they are installed:
//
//   node --conditions=browser --conditions=module browser/import_map.mjs ai5 ai6 ai7
//
// Node loads each line through import_map_hooks.mjs, which resolves as a page would and
// notes what the page needs spelled out. Bare specifiers are scoped to the module that
// imports them (the lines pin different versions of the same packages); relative ones
// a browser could not fetch as written map from the URL it asks for to the file.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { register } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = new URL("../", import.meta.url).href;
const dir = mkdtempSync(join(tmpdir(), "import-map-"));
const out = join(dir, "resolved.jsonl");
register("./import_map_hooks.mjs", import.meta.url, { data: { out } });

const lines = process.argv.slice(2);
for (const line of lines) await import(line);

const path = (url) => {
  if (!url.startsWith(root)) throw new Error(`outside the served folder: ${url}`);
  return "/" + url.slice(root.length);
};
const map = { imports: {}, scopes: {} };
for (const text of readFileSync(out, "utf8").split("\n").filter(Boolean)) {
  const { specifier, parent, url } = JSON.parse(text);
  if (parent === import.meta.url) {
    map.imports[specifier] = path(url);
  } else if (specifier.startsWith(".")) {
    map.imports[path(new URL(specifier, parent).href)] = path(url);
  } else {
    (map.scopes[path(parent)] ??= {})[specifier] = path(url);
  }
}
rmSync(dir, { recursive: true, force: true });
process.stdout.write(JSON.stringify(map) + "\n");
