// The browser page's stand-in for @vercel/oidc, whose browser build is CommonJS (a page
// cannot import it as a module). The AI SDK imports it only for the Vercel AI Gateway's
// own authentication, which a chat transport never calls: an empty context, no token.
export function getContext() {
  return {};
}

export async function getVercelOidcToken() {
  throw new Error("no Vercel OIDC token in this page");
}
