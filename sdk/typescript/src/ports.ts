/**
 * A box's ports through berth (docs/api.md, "Ports"): where a port is reached, a request
 * to its app, and share links for someone without a key. `Box` delegates here, so that
 * box.ts keeps to the box's own verbs.
 */

import { PortUrls, ShareLink, shareLink } from "./models.js";
import { boxPath } from "./paths.js";
import type { Body, Transport } from "./transport.js";

/** A request to a box's app: like `fetch`'s options, the body any `Body`. */
export interface PortRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: Body;
  signal?: AbortSignal;
}

export async function portUrl(transport: Transport, box: string, port: number): Promise<PortUrls> {
  const answer = await transport.json<any>({
    method: "GET",
    path: boxPath(box, "ports"),
    params: [["port", String(port)]],
    box,
  });
  return { port: answer.port, url: answer.url, hostUrl: answer.host_url ?? null };
}

/**
 * The app's answer to one request at `path` (with its query, as the caller encoded it)
 * under the port, whatever its status: a `404` is the app's to give. berth's own refusals
 * come the same way (`503` while nothing listens yet, after the daemon's wait). The
 * request wakes the box; the body is read by the caller, for as long as it flows.
 */
export async function portFetch(
  transport: Transport,
  box: string,
  port: number,
  path: string,
  request: PortRequest,
): Promise<Response> {
  // `…/ports/{port}` without the slash is a redirect: the root is always `…/{port}/`.
  const appPath = path.replace(/^\/+/, "");
  return transport.passThrough(
    {
      method: request.method ?? "GET",
      path: boxPath(box, "ports", String(port)) + "/" + appPath,
      headers: request.headers,
      body: request.body,
      box,
      unbounded: true,
    },
    request.signal ?? new AbortController().signal,
  );
}

export async function share(transport: Transport, box: string, port: number, ttlS: number): Promise<ShareLink> {
  const answer = await transport.json({
    method: "POST",
    path: boxPath(box, "ports", String(port), "links"),
    json: { ttl_s: ttlS },
    box,
  });
  return shareLink(answer);
}

export async function links(transport: Transport, box: string, port?: number): Promise<ShareLink[]> {
  const path = port === undefined ? boxPath(box, "links") : boxPath(box, "ports", String(port), "links");
  const answer = await transport.json<{ links: unknown[] }>({ method: "GET", path, box });
  return answer.links.map(shareLink);
}

/** Revokes a link; with `port`, only a link of that port (another's is `NotFound`). */
export async function revoke(transport: Transport, box: string, linkId: string, port?: number): Promise<ShareLink> {
  const path =
    port === undefined ? boxPath(box, "links", linkId) : boxPath(box, "ports", String(port), "links", linkId);
  return shareLink(await transport.json({ method: "DELETE", path, box }));
}
