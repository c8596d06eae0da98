/**
 * Tenants, their quotas and API keys (docs/api.md, "Tenants"). Making, listing and
 * changing tenants takes the admin key; a tenant's own key reads itself and manages its own
 * keys. There is no tenant delete in the API, so there is none here.
 */

import type { KeyInfo, Quota, TenantInfo } from "./models.js";
import type { Transport } from "./transport.js";

function tenantPath(ref: string, ...rest: string[]): string {
  return "/v1/tenants/" + [ref, ...rest].map((part) => encodeURIComponent(part)).join("/");
}

/** Every tenant of the daemon (admin calls but `get`). */
export class Tenants {
  constructor(private readonly transport: Transport) {}

  /**
   * Makes a tenant with the limits of `quota` (absent: no limit). Its first API key is in
   * the answer's `apiKey`, shown only this once.
   */
  async create(name: string, quota: Quota = {}): Promise<Tenant> {
    const answer = await this.transport.json<{ tenant: TenantInfo; api_key: string }>({
      method: "POST",
      path: "/v1/tenants",
      json: { ...quota, name },
    });
    return new Tenant(this.transport, answer.tenant, answer.api_key);
  }

  async list(): Promise<Tenant[]> {
    const answer = await this.transport.json<{ tenants: TenantInfo[] }>({ method: "GET", path: "/v1/tenants" });
    return answer.tenants.map((info) => new Tenant(this.transport, info));
  }

  /** A tenant by its id (`tn_…`) or name; another tenant's is `NotFound` to a tenant key. */
  async get(ref: string): Promise<Tenant> {
    return new Tenant(this.transport, await this.transport.json<TenantInfo>({ method: "GET", path: tenantPath(ref) }));
  }
}

export class Tenant {
  /** The tenant's API keys. */
  readonly keys: TenantKeys;

  constructor(
    private readonly transport: Transport,
    /** The tenant as last seen: `quota` and `usage` as the API names them. */
    public info: TenantInfo,
    /** The first key, only on the tenant `tenants.create` answers (else `null`). */
    readonly apiKey: string | null = null,
  ) {
    this.keys = new TenantKeys(transport, info.id);
  }

  get id(): string {
    return this.info.id;
  }

  get name(): string {
    return this.info.name;
  }

  async refresh(): Promise<this> {
    this.info = await this.transport.json<TenantInfo>({ method: "GET", path: tenantPath(this.id) });
    return this;
  }

  /**
   * Changes the limits named in `quota` (`null` clears one); the others stay. A limit
   * lowered below the usage stops or deletes nothing: it refuses only what would take more.
   */
  async update(quota: Quota): Promise<this> {
    this.info = await this.transport.json<TenantInfo>({ method: "PATCH", path: tenantPath(this.id), json: quota });
    return this;
  }
}

/** A new API key: `apiKey` is the key itself, shown only in this answer. */
export interface NewKey {
  key: KeyInfo;
  apiKey: string;
}

/** A tenant's API keys (stored hashed: a key is shown only when made). */
export class TenantKeys {
  constructor(
    private readonly transport: Transport,
    private readonly tenant: string,
  ) {}

  async list(): Promise<KeyInfo[]> {
    const answer = await this.transport.json<{ keys: KeyInfo[] }>({ method: "GET", path: tenantPath(this.tenant, "keys") });
    return answer.keys;
  }

  /** A new key of the tenant; `admin` (an admin caller only) makes an admin key. */
  async create(options: { admin?: boolean } = {}): Promise<NewKey> {
    const answer = await this.transport.json<{ key: KeyInfo; api_key: string }>({
      method: "POST",
      path: tenantPath(this.tenant, "keys"),
      json: options.admin === undefined ? {} : { admin: options.admin },
    });
    return { key: answer.key, apiKey: answer.api_key };
  }

  /**
   * Revokes a key (`key_…`): its next request is refused, and so is every browser signed
   * in with it. Answers how many web sessions that ended. The last admin key is `Conflict`.
   */
  async revoke(keyId: string): Promise<number> {
    const answer = await this.transport.send({ method: "DELETE", path: tenantPath(this.tenant, "keys", keyId) });
    return Number(answer.headers.get("Berth-Web-Sessions-Ended") ?? 0);
  }
}
