// Module hooks for import_map.mjs: Node resolves and loads the `ai` lines as a browser
// page would — browser export conditions, every file a module, @vercel/oidc replaced by
// its stand-in — and every resolution that an import map must spell out is appended to a
// file: bare specifiers, and relative ones a browser could not fetch as written
// (@opentelemetry/api's ESM build imports "./baggage/utils" and "../platform").
import { appendFileSync } from "node:fs";

let out = "";

export async function initialize(data) {
  out = data.out;
}

function note(specifier, parentURL, url) {
  appendFileSync(out, JSON.stringify({ specifier, parent: parentURL, url }) + "\n");
}

export async function resolve(specifier, context, next) {
  if (specifier === "@vercel/oidc") {
    const url = new URL("./vercel-oidc.mjs", import.meta.url).href;
    note(specifier, context.parentURL, url);
    return { url, shortCircuit: true };
  }
  const relative = specifier.startsWith("./") || specifier.startsWith("../");
  try {
    const resolved = await next(specifier, context);
    if (!relative && !specifier.startsWith("node:") && context.parentURL) note(specifier, context.parentURL, resolved.url);
    return resolved;
  } catch (error) {
    if (!relative) throw error;
    for (const suffix of [".js", "/index.js"]) {
      try {
        const resolved = await next(specifier.replace(/\/$/, "") + suffix, context);
        note(specifier, context.parentURL, resolved.url);
        return resolved;
      } catch {
        // the next way a browser-side server could have meant it
      }
    }
    throw error;
  }
}

export async function load(url, context, next) {
  if (url.startsWith("node:")) return next(url, context);
  return next(url, { ...context, format: "module" });  // a page has no CommonJS
}
