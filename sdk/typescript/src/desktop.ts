/**
 * Computer use on a box whose template has a desktop (`box.desktop`; docs/desktop.md): its
 * status, a screenshot, pointer and keyboard actions, the pointer's place, and its screen
 * over VNC (`vnc()`). Each call wakes the box and waits (up to 300 s) for its desktop's
 * services; a box without a desktop is `Conflict`, before anything wakes it.
 */

import type { CursorPosition, DesktopAction, DesktopStatus } from "./models.js";
import { boxPath } from "./paths.js";
import type { Call, Transport } from "./transport.js";
import { VncConnection } from "./vnc.js";

export class Desktop {
  constructor(
    private readonly transport: Transport,
    private readonly box: string,
  ) {}

  /**
   * The box's X `display` (`:0`) and screen size; `ready` when every desktop service it has
   * (`xvfb`, `xfce`, `vnc`) runs; `ready_after_ms` from its boot's start to the last of them
   * ready (`null` when unknown, e.g. a boot restored from a snapshot).
   */
  async status(): Promise<DesktopStatus> {
    return this.transport.json<DesktopStatus>(this.call("GET"));
  }

  /** A PNG of the whole screen (with the pointer drawn in when `cursor`). */
  async screenshot(options: { cursor?: boolean } = {}): Promise<Uint8Array> {
    const params: Array<[string, string]> = [["cursor", String(options.cursor ?? false)]];
    const answer = await this.transport.send(this.call("GET", "screenshot", { params }));
    return new Uint8Array(await answer.arrayBuffer());
  }

  /**
   * Runs the actions in order (at most 100; each by its `type`: `move`, `click`,
   * `double_click`, `triple_click`, `mouse_down`, `mouse_up`, `drag`, `scroll`, `type`,
   * `key`, `hold_key`, `wait`); answers where the pointer is after the last. A refused
   * action is `InvalidRequest` before anything runs; a failed one `Conflict`, with its
   * `index` and the program's `stderr` in `details`.
   */
  async actions(actions: DesktopAction[]): Promise<CursorPosition> {
    const call = this.call("POST", "actions", { json: { actions } });
    return (await this.transport.json<{ cursor: CursorPosition }>(call)).cursor;
  }

  /** Where the mouse pointer is. */
  async cursor(): Promise<CursorPosition> {
    return this.transport.json<CursorPosition>(this.call("GET", "cursor"));
  }

  /**
   * The screen as RFB over a WebSocket, to forward to a VNC client or noVNC (a person
   * watching or taking over); wakes the box.
   */
  async vnc(): Promise<VncConnection> {
    return VncConnection.open(this.transport.target, this.box);
  }

  // Every call wakes the box and waits for its desktop: as long as a cold boot, or as the
  // actions take (waits, typing).
  private call(method: string, verb?: string, more: Partial<Call> = {}): Call {
    const path = boxPath(this.box, "desktop", ...(verb ? [verb] : []));
    return { method, path, box: this.box, unbounded: true, ...more };
  }
}
