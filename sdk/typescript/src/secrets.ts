/**
 * The tenant's secrets: the real credentials the egress gateway sets on a box's requests
 * (a template's `[[egress.credentials]]` names one; docs/api.md, "Secrets"). A value goes
 * in and never comes back out: every answer is a name and its dates.
 */

import type { SecretInfo } from "./models.js";
import type { Transport } from "./transport.js";

export class Secrets {
  constructor(private readonly transport: Transport) {}

  /**
   * Sets `name` (`[a-z0-9][a-z0-9_-]{0,62}`) to `value` (visible ASCII, 1 to 8192 bytes),
   * making it or replacing its value (a replacement keeps `created_at`).
   */
  async set(name: string, value: string): Promise<SecretInfo> {
    return this.transport.json<SecretInfo>({ method: "POST", path: "/v1/secrets", json: { name, value } });
  }

  /** The tenant's secrets, sorted by name. */
  async list(): Promise<SecretInfo[]> {
    return (await this.transport.json<{ secrets: SecretInfo[] }>({ method: "GET", path: "/v1/secrets" })).secrets;
  }

  /** Deletes a secret; no such secret is `NotFound`. */
  async delete(name: string): Promise<void> {
    await this.transport.send({ method: "DELETE", path: "/v1/secrets/" + encodeURIComponent(name) });
  }
}
