/** The API's paths and small encodings shared by every resource's module. */

import { errorFor } from "./errors.js";

/** `/v1/boxes/{ref}/…`, each part escaped. */
export function boxPath(ref: string, ...rest: string[]): string {
  return "/v1/boxes/" + [ref, ...rest].map((part) => encodeURIComponent(part)).join("/");
}

/**
 * `/v1/boxes/{ref}/memory/{path}`: the file's path below `/memory`, each segment escaped
 * and its `/`s kept. A leading `/memory/` (or `/`) is dropped, as the API drops it. What a
 * URL cannot carry (a `.` or `..` segment, which URLs resolve away; no path at all, which is
 * `/memory` itself) is refused before any call, with the error the API gives for it.
 */
export function memoryPath(ref: string, path: string): string {
  const rel = path
    .replace(/^\/memory(?=\/|$)/, "")
    .replace(/^\/+/, "")
    .replace(/\/+$/, "");
  if (rel === "") throw errorFor("is_a_directory", "/memory is a directory", 400);
  const segments = rel.split("/");
  if (segments.some((segment) => segment === "." || segment === "..")) {
    throw errorFor("invalid_request", `the memory path ${JSON.stringify(path)} has a \`.\` or \`..\` component`, 400);
  }
  return boxPath(ref, "memory") + "/" + segments.map((segment) => encodeURIComponent(segment)).join("/");
}

/** A command line: a string runs through `sh -c`, an array as it is. */
export type Command = string | readonly string[];

export function argv(cmd: Command): string[] {
  if (typeof cmd === "string") return ["sh", "-c", cmd];
  if (!Array.isArray(cmd) || cmd.length === 0 || cmd.some((part) => typeof part !== "string")) {
    throw new TypeError("a command is a string (run by sh -c) or a non-empty array of strings");
  }
  return [...cmd];
}

/** `user` (uid 1001, the default) or `root` (the box's root, never the host's). */
export type BoxUser = "user" | "root";

/** The query of a file call: its path, the user, and more. */
export function fileParams(
  path: string,
  user: BoxUser | undefined,
  ...extra: Array<[string, string]>
): Array<[string, string]> {
  const params: Array<[string, string]> = [["path", path], ...extra];
  if (user !== undefined) params.push(["user", user]);
  return params;
}

/** Bytes from base64 (the API's frames carry output so), without Node's `Buffer`. */
export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** A signal's name as the API takes it: `TERM`, not `SIGTERM` or `term`. */
export function signalName(signal: string): string {
  const name = signal.toUpperCase();
  return name.startsWith("SIG") ? name.slice(3) : name;
}
