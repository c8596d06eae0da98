/**
 * The tenant's webhooks: endpoints the daemon POSTs its boxes' events to, signed
 * (docs/webhooks.md; docs/api.md, "Webhooks"). The signing secret exists in one answer
 * only, the one that made the webhook: keep `secret` then.
 */

import type { Delivery, WebhookInfo } from "./models.js";
import type { Transport } from "./transport.js";

function webhookPath(id: string, ...rest: string[]): string {
  return "/v1/webhooks/" + [id, ...rest].map((part) => encodeURIComponent(part)).join("/");
}

export class Webhooks {
  constructor(private readonly transport: Transport) {}

  /**
   * Registers `url` (`https://`, not a private address unless the daemon allows it) for
   * `events` (`box.state_changed`, `box.failed`, `turn.completed`, `wakeup.fired`,
   * `process.exited`). The answer's `secret` (`whsec_…`) signs every delivery.
   */
  async create(url: string, options: { events: string[]; description?: string }): Promise<Webhook> {
    const body: Record<string, unknown> = { url, events: options.events };
    if (options.description !== undefined) body.description = options.description;
    const answer = await this.transport.json<WebhookInfo & { secret: string }>({
      method: "POST",
      path: "/v1/webhooks",
      json: body,
    });
    const { secret, ...info } = answer;
    return new Webhook(this.transport, info, secret);
  }

  async list(): Promise<Webhook[]> {
    const answer = await this.transport.json<{ webhooks: WebhookInfo[] }>({ method: "GET", path: "/v1/webhooks" });
    return answer.webhooks.map((info) => new Webhook(this.transport, info));
  }

  /** A webhook by its id (`wh_…`). */
  async get(id: string): Promise<Webhook> {
    return new Webhook(this.transport, await this.transport.json<WebhookInfo>({ method: "GET", path: webhookPath(id) }));
  }

  /** Deletes a webhook and its deliveries. */
  async delete(id: string): Promise<void> {
    await this.transport.send({ method: "DELETE", path: webhookPath(id) });
  }
}

export class Webhook {
  constructor(
    private readonly transport: Transport,
    /** The webhook as the API shows it (no secret). */
    readonly info: WebhookInfo,
    /** The signing secret, only on the webhook `webhooks.create` answers (else `null`). */
    readonly secret: string | null = null,
  ) {}

  get id(): string {
    return this.info.id;
  }

  get url(): string {
    return this.info.url;
  }

  get events(): string[] {
    return this.info.events;
  }

  /**
   * Sends a `webhook.test` event and answers its delivery after the first attempt: its
   * `state`, and `last_status` or `last_error` when the endpoint did not take it.
   */
  async test(): Promise<Delivery> {
    return this.transport.json<Delivery>({ method: "POST", path: webhookPath(this.id, "test") });
  }

  /** The latest deliveries, newest first (`limit`: default 50, at most 500). */
  async deliveries(options: { limit?: number } = {}): Promise<Delivery[]> {
    const params: Array<[string, string]> = options.limit === undefined ? [] : [["limit", String(options.limit)]];
    const answer = await this.transport.json<{ deliveries: Delivery[] }>({
      method: "GET",
      path: webhookPath(this.id, "deliveries"),
      params,
    });
    return answer.deliveries;
  }

  async delete(): Promise<void> {
    await this.transport.send({ method: "DELETE", path: webhookPath(this.id) });
  }
}
