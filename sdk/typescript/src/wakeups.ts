/**
 * A box's wakeups: its messages scheduled for later (docs/api.md, "Wakeups"). Each slot
 * posts the message through the same durable path as `box.send`, waking the box, and
 * fires once even across daemon restarts. The box's template must have a harness.
 */

import type { WakeupInfo } from "./models.js";
import { boxPath } from "./paths.js";
import type { Transport } from "./transport.js";

/**
 * When a wakeup fires: exactly one of `at` (a time, not in the past), `inS` (seconds from
 * now) or `cron` (5 fields, read in the IANA zone `tz`, default UTC).
 */
export type WakeupSchedule =
  | { at: Date | string; inS?: never; cron?: never; tz?: never }
  | { inS: number; at?: never; cron?: never; tz?: never }
  | { cron: string; tz?: string; at?: never; inS?: never };

export class Wakeups {
  constructor(
    private readonly transport: Transport,
    private readonly box: string,
  ) {}

  /** Schedules `message` to the box's agent; answers the wakeup (`wk_…`). */
  async create(message: string, schedule: WakeupSchedule): Promise<WakeupInfo> {
    const body: Record<string, unknown> = { message };
    // The API checks that exactly one schedule is given, and says which rule broke.
    if (schedule.at !== undefined) body.at = schedule.at instanceof Date ? schedule.at.toISOString() : schedule.at;
    if (schedule.inS !== undefined) body.in_s = schedule.inS;
    if (schedule.cron !== undefined) body.cron = schedule.cron;
    if (schedule.tz !== undefined) body.tz = schedule.tz;
    return this.transport.json<WakeupInfo>({
      method: "POST",
      path: boxPath(this.box, "wakeups"),
      json: body,
      box: this.box,
    });
  }

  /** The box's pending wakeups, soonest first. */
  async list(): Promise<WakeupInfo[]> {
    const answer = await this.transport.json<{ wakeups: WakeupInfo[] }>({
      method: "GET",
      path: boxPath(this.box, "wakeups"),
      box: this.box,
    });
    return answer.wakeups;
  }

  /** Cancels a wakeup: its slots not yet fired never fire. Answers it as it was. */
  async delete(id: string): Promise<WakeupInfo> {
    return this.transport.json<WakeupInfo>({
      method: "DELETE",
      path: boxPath(this.box, "wakeups", id),
      box: this.box,
    });
  }
}
