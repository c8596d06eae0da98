/**
 * An upload in Node that reads the daemon's answer as soon as it comes, even before the
 * body is all sent (`Transport.upload`): `node:http`/`node:https`, imported when first
 * needed so a browser bundle never loads them. The body is sent a chunk at a time, each
 * waiting for the socket (backpressure), and no more once the answer has come.
 */

/** What an upload's body is to send: its length when known, and its chunks. */
export interface UploadSource {
  length?: number;
  chunks: AsyncIterable<Uint8Array>;
}

/**
 * The connection failed before an answer came (`cause`: why); `bodySent` when the whole
 * body had gone out (so the daemon may have acted on it).
 */
export class UploadFailed extends Error {
  constructor(
    readonly cause: unknown,
    readonly bodySent: boolean,
  ) {
    super("the upload failed");
  }
}

export interface UploadAnswer {
  status: number;
  headers: Headers;
  body: Uint8Array;
}

/**
 * Sends `source` to `url` and answers the whole answer, whatever its status. The source's
 * own error is thrown as it is; a connection that fails before the answer is
 * {@link UploadFailed}; past `timeoutMs` (when given) the error `timedOut` makes.
 */
export async function nodeUpload(
  url: URL,
  method: string,
  headers: Record<string, string>,
  source: UploadSource,
  options: { timeoutMs?: number; timedOut: () => Error },
): Promise<UploadAnswer> {
  const http = url.protocol === "https:" ? await import("node:https") : await import("node:http");
  const sent: Record<string, string> = { ...headers };
  if (source.length !== undefined) sent["Content-Length"] = String(source.length);
  const request = http.request(url, { method, headers: sent });
  let answered = false;
  let sourceFailed: { error: unknown } | undefined;
  let timedOut: Error | undefined;
  const answer = new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
    request.on("response", (response) => {
      answered = true;
      resolve(response);
    });
    // Also after the answer (a write that fails once the daemon closed): nothing to do then.
    request.on("error", (error) => reject(new UploadFailed(error, request.writableFinished)));
  });
  answer.catch(() => {}); // awaited below; a failure while sending is read there
  const timer =
    options.timeoutMs === undefined
      ? undefined
      : setTimeout(() => request.destroy((timedOut = options.timedOut())), options.timeoutMs);
  // Not awaited: once the answer has come, it ends at its next chunk (closing the source)
  // however long that takes; a failure of the source is recorded before it ends the call.
  void (async () => {
    try {
      for await (const chunk of source.chunks) {
        // Each write waits for the event loop to have read what came: Node writes at once,
        // and a write that fails (the daemon answered and closed) destroys the socket with
        // the answer in it unread.
        await new Promise((resolve) => setImmediate(resolve));
        if (answered || request.destroyed) return; // leaving the loop closes the source
        if (!request.write(chunk)) {
          await Promise.race([new Promise((resolve) => request.once("drain", resolve)), answer.catch(() => {})]);
        }
      }
      if (!answered && !request.destroyed) request.end();
    } catch (error) {
      sourceFailed = { error };
      request.destroy(error instanceof Error ? error : new Error(String(error)));
    }
  })();
  try {
    let response: import("node:http").IncomingMessage;
    try {
      response = await answer;
    } catch (error) {
      throw sourceFailed ? sourceFailed.error : (timedOut ?? error);
    }
    const parts: Uint8Array[] = [];
    try {
      for await (const part of response) parts.push(part as Uint8Array);
    } catch (error) {
      throw timedOut ?? new UploadFailed(error, true);
    }
    const answerHeaders = new Headers();
    for (const [name, value] of Object.entries(response.headers)) {
      for (const one of Array.isArray(value) ? value : [value ?? ""]) answerHeaders.append(name, one);
    }
    return { status: response.statusCode ?? 0, headers: answerHeaders, body: Buffer.concat(parts) };
  } finally {
    clearTimeout(timer);
    // An answer before the body was all sent leaves the connection unusable for another call.
    if (!request.writableFinished) request.destroy();
  }
}
