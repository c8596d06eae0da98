/**
 * A box's desktop as RFB (VNC) over a WebSocket (`box.desktop.vnc()`; `GET
 * /v1/boxes/{ref}/desktop/vnc`, docs/desktop.md): each binary message is some of RFB's
 * bytes, from the desktop's VNC server or to it, with no framing of berth's own. A program
 * hands them on to a VNC client (a local TCP port a viewer connects to, or noVNC in a page)
 * and back; berth never reads the RFB itself. Opening it wakes the box; watching does not
 * keep it awake, a person's input through it does. When the VNC server ends (the box
 * stopped), the daemon closes the connection: open a new one to go on.
 */

import { boxPath } from "./paths.js";
import { Socket, socketUrl } from "./socket.js";
import type { Target } from "./transport.js";

/**
 * RFB's bytes to and from the box's VNC server: `send` what the VNC client says, `recv()`
 * (or `for await`) what the server says, until the connection ends.
 */
export class VncConnection {
  private constructor(private readonly socket: Socket) {}

  /** Connects, waking the box; a refusal before the upgrade throws the API's error. */
  static async open(target: Target, ref: string): Promise<VncConnection> {
    const url = socketUrl(target, boxPath(ref, "desktop", "vnc"));
    return new VncConnection(await Socket.open(url.toString(), target.apiKey));
  }

  send(data: Uint8Array): void {
    this.socket.send(data);
  }

  /** The next message from the VNC server, or `null` once the connection ended. */
  async recv(): Promise<Uint8Array | null> {
    for (;;) {
      const frame = await this.socket.next();
      if (frame === null) return null;
      // The daemon sends only binary messages; a text one would be no RFB.
      if ("bytes" in frame) return frame.bytes;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    for (let data = await this.recv(); data !== null; data = await this.recv()) yield data;
  }

  close(): void {
    this.socket.close();
  }
}
