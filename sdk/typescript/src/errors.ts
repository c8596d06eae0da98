/**
 * berth's errors as classes.
 *
 * Every error answer of the API is `{"error":{"code","message"}}` (docs/api.md,
 * "Conventions"); {@link errorFrom} turns one into the class of its code, so a caller
 * checks `instanceof NotFound` rather than comparing strings. A code this SDK does not know
 * (a newer daemon's) is a plain {@link BerthError} with the code kept. The mapping is the
 * Python SDK's (`sdk/python/berth/errors.py`), code for code.
 */

/** An error answer of the API: its HTTP `status`, `code`, `message` and `details`. */
export class BerthError extends Error {
  readonly code: string;
  readonly status: number | undefined;
  readonly details: Record<string, unknown>;

  constructor(
    message: string,
    options: { code?: string; status?: number; details?: Record<string, unknown> } = {},
  ) {
    super(message);
    this.name = new.target.name;
    this.code = options.code ?? "unknown";
    this.status = options.status;
    this.details = options.details ?? {};
  }
}

/** `400`: a malformed call, or a file call on the wrong kind of path. */
export class InvalidRequest extends BerthError {}
/** `401 unauthorized`: a missing or wrong API key. */
export class AuthenticationError extends BerthError {}
/** `403 permission_denied`: the box user may not touch that path, or an admin call. */
export class PermissionDenied extends BerthError {}
/** `403 quota_exceeded`: `details` names the `limit`, its `max`, `usage` and `requested`. */
export class QuotaExceeded extends BerthError {}
/** `404 not_found`: no such box, file, process or link. */
export class NotFound extends BerthError {}
/**
 * `409`: the name exists (`already_exists`), a directory is not empty (`not_empty`), or
 * the box is in the wrong state for the call (`conflict`).
 */
export class Conflict extends BerthError {}
/** `413 payload_too_large`. */
export class PayloadTooLarge extends BerthError {}
/** `429 too_many_requests`: a limit of calls at once; retry after a second. */
export class TooManyRequests extends BerthError {}
/** `501 unsupported`: the box's runtime cannot do this. */
export class Unsupported extends BerthError {}
/** `502`/`503 unavailable`: the daemon or the box's agent could not serve the call. */
export class Unavailable extends BerthError {}
/** `504 timeout`: the box's agent (or the app on a port) did not answer in time. */
export class Timeout extends BerthError {}
/** `507 insufficient_storage`: the data dir's disk is below its free-space threshold. */
export class InsufficientStorage extends BerthError {}
/** `500 internal`: a bug or a host failure (the cause is in the daemon's log). */
export class InternalError extends BerthError {}

/** A failed transition as a box records it (docs/api.md, "Failed transitions"). */
export interface Failure {
  transition: string;
  step: string;
  cause: string;
  hint?: string | null;
}

/**
 * The box could not be started and is now `failed`: `reason` is its `state_reason`,
 * `failure` the failed transition's record (`transition`, `step`, `cause`, `hint`).
 */
export class BoxFailed extends Unavailable {
  readonly reason: string | null;
  readonly failure: Failure | null;

  constructor(message: string, reason: string | null, failure: Failure | null, status?: number) {
    super(message, { code: "unavailable", status });
    this.reason = reason;
    this.failure = failure;
  }
}

type ErrorClass = new (
  message: string,
  options: { code?: string; status?: number; details?: Record<string, unknown> },
) => BerthError;

const BY_CODE: Record<string, ErrorClass> = {
  invalid_request: InvalidRequest,
  is_a_directory: InvalidRequest,
  not_a_directory: InvalidRequest,
  not_a_regular_file: InvalidRequest,
  duplicate_session_cookie: InvalidRequest,
  unauthorized: AuthenticationError,
  permission_denied: PermissionDenied,
  bad_origin: PermissionDenied,
  quota_exceeded: QuotaExceeded,
  not_found: NotFound,
  already_exists: Conflict,
  not_empty: Conflict,
  conflict: Conflict,
  payload_too_large: PayloadTooLarge,
  too_many_requests: TooManyRequests,
  unsupported: Unsupported,
  unavailable: Unavailable,
  timeout: Timeout,
  insufficient_storage: InsufficientStorage,
  internal: InternalError,
};

/** The error of a `code` (also used for an error frame inside a stream). */
export function errorFor(
  code: string,
  message: string,
  status?: number,
  details?: Record<string, unknown>,
): BerthError {
  const cls = Object.prototype.hasOwnProperty.call(BY_CODE, code) ? BY_CODE[code] : BerthError;
  return new cls(message, { code, status, details });
}

/**
 * The error of an answer: its JSON body's code, or, for a body that is not berth's error
 * shape (a proxy in between), the status with the body's text.
 */
export function errorFrom(status: number, body: string): BerthError {
  try {
    const detail = JSON.parse(body).error;
    if (detail && typeof detail.code === "string" && typeof detail.message === "string") {
      const details = typeof detail.details === "object" && detail.details ? detail.details : undefined;
      return errorFor(detail.code, detail.message, status, details);
    }
  } catch {
    // not JSON: the text below
  }
  const text = body.trim().slice(0, 500);
  return errorFor("unknown", text || `HTTP ${status}`, status);
}

/**
 * A stream that ended before its last frame: the daemon or the box went away. The readers
 * of resumable streams (a process's output, the event log) catch it and resume.
 */
export class StreamCut extends Unavailable {}

export function cut(what: string): StreamCut {
  return new StreamCut(`${what} ended before its end: the connection was cut`, { code: "unavailable" });
}
