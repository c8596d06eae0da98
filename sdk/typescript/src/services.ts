/**
 * A box's services, the daemons its template declares, supervised in the box (docs/api.md,
 * "Services"): their list, one's log, a restart. `Box` delegates here, so that box.ts keeps
 * to the box's own verbs.
 */

import { OutputChunk, ServiceInfo } from "./models.js";
import { boxPath, fromBase64 } from "./paths.js";
import { Reconnects, isCut, readFrames } from "./streams.js";
import type { Transport } from "./transport.js";

/** Where a service's log is read from, and whether to stay for what comes next. */
export interface ServiceLogOptions {
  /** The log offset to start at (bytes of stdout and stderr already read); default 0. */
  offset?: number;
  /** Keep reading what the service writes next, until the box stops; default false. */
  follow?: boolean;
}

export async function services(transport: Transport, box: string): Promise<ServiceInfo[]> {
  const answer = await transport.json<{ services: ServiceInfo[] }>({
    method: "GET",
    path: boxPath(box, "services"),
    box,
  });
  return answer.services;
}

/**
 * The service's log from `offset` as it comes: to the log's end, or with `follow` on until
 * the box stops. A cut connection is resumed from the last offset read.
 */
export async function* serviceLogs(
  transport: Transport,
  box: string,
  name: string,
  options: ServiceLogOptions,
): AsyncGenerator<OutputChunk> {
  let at = options.offset ?? 0;
  const follow = options.follow ?? false;
  const reconnects = new Reconnects("the service's log stream");
  for (;;) {
    const controller = new AbortController();
    try {
      const body = await transport.stream(
        {
          method: "GET",
          path: boxPath(box, "services", name, "logs"),
          params: [
            ["offset", String(at)],
            ["follow", String(follow)],
          ],
          box,
          unbounded: true,
        },
        controller.signal,
      );
      for await (const frame of readFrames(body)) {
        if (frame.type !== "output") continue;
        // A chunk past the asked offset means older log is no longer kept.
        const chunk = new OutputChunk(frame.stream, frame.offset, fromBase64(frame.data));
        at = chunk.end;
        reconnects.progress();
        yield chunk;
      }
      return;
    } catch (error) {
      if (!isCut(error)) throw error;
    } finally {
      controller.abort();
    }
    reconnects.cut();
  }
}

export async function restartService(transport: Transport, box: string, name: string): Promise<ServiceInfo> {
  // The restart wakes the box first: it may take as long as a cold boot.
  return transport.json<ServiceInfo>({
    method: "POST",
    path: boxPath(box, "services", name, "restart"),
    box,
    unbounded: true,
  });
}
