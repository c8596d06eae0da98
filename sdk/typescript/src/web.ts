/**
 * Signing browsers in to the web app, and ending their sessions (docs/api.md, "Web
 * sessions and pairing"). The browser's own calls (trading a code for its cookie, signing
 * out, push subscriptions) belong to the web app and are not here.
 */

import type { Pairing, WebSession } from "./models.js";
import type { Transport } from "./transport.js";

export class Web {
  constructor(private readonly transport: Transport) {}

  /**
   * A one-time pairing code and the web app's link holding it, live for `ttlS` seconds
   * (10 to 3600, default 600). Only the admin names another `tenant` (name or id).
   */
  async pair(options: { tenant?: string; ttlS?: number } = {}): Promise<Pairing> {
    const body: Record<string, unknown> = {};
    if (options.tenant !== undefined) body.tenant = options.tenant;
    if (options.ttlS !== undefined) body.ttl_s = options.ttlS;
    return this.transport.json<Pairing>({ method: "POST", path: "/v1/web/pairings", json: body });
  }

  /** The tenant's signed-in browsers, most recently used first. */
  async sessions(): Promise<WebSession[]> {
    return (await this.transport.json<{ sessions: WebSession[] }>({ method: "GET", path: "/v1/web/sessions" })).sessions;
  }

  /** Ends a browser's session (`ws_…`): its cookie is refused from its next request on. */
  async revokeSession(id: string): Promise<void> {
    await this.transport.send({ method: "DELETE", path: "/v1/web/sessions/" + encodeURIComponent(id) });
  }
}
