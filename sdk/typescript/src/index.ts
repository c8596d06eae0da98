/**
 * berth's TypeScript SDK: boxes (persistent sandboxes for AI agents) on a berth daemon.
 *
 * ```ts
 * import { Berth } from "@berth/sdk";
 *
 * const client = new Berth(); // BERTH_URL / BERTH_API_KEY in Node
 * const box = await client.boxes.create("alice");
 * console.log((await box.exec("echo hi")).stdout);
 * ```
 *
 * docs/sdk-typescript.md in berth's repository describes every call.
 */

export { Berth, Boxes, API_KEY_ENV, URL_ENV } from "./client.js";
export type { BerthOptions, RestoreOptions, RestoredBackup } from "./client.js";
export { Box } from "./box.js";
export { Desktop } from "./desktop.js";
export { Files } from "./files.js";
export type { RecursiveOption, UserOption } from "./files.js";
export { Memory } from "./memory.js";
export type { SnapshotRef } from "./memory.js";
export { Process } from "./process.js";
export { Terminal } from "./terminal.js";
export type { TerminalOptions } from "./terminal.js";
export { Turn } from "./messages.js";
export { VncConnection } from "./vnc.js";
export type { PortRequest } from "./ports.js";
export { Secrets } from "./secrets.js";
export type { ServiceLogOptions } from "./services.js";
export { Templates } from "./templates.js";
export type { Reloaded } from "./templates.js";
export { Tenant, TenantKeys, Tenants } from "./tenants.js";
export type { NewKey } from "./tenants.js";
export { Wakeups } from "./wakeups.js";
export type { WakeupSchedule } from "./wakeups.js";
export { Web } from "./web.js";
export { Webhook, Webhooks } from "./webhooks.js";
export type { ExecOptions, SpawnOptions, StreamedExecOptions } from "./exec.js";
export type { BoxUser, Command } from "./paths.js";
export type { Body } from "./transport.js";
export { OutputChunk } from "./models.js";
export type {
  ArchiveWritten,
  BackupFile,
  BackupOrigin,
  BoxInfo,
  BoxState,
  CreateBoxOptions,
  CursorPosition,
  Delivery,
  DesktopAction,
  DesktopStatus,
  EgressPage,
  Event,
  EventPage,
  ExecResult,
  FileEntry,
  Health,
  KeyInfo,
  MemoryChange,
  MemoryDiff,
  MemoryEntry,
  MemoryGraph,
  MemoryHit,
  MemoryLink,
  MemoryLinks,
  MemoryRestored,
  MemorySearchResults,
  MemorySnapshot,
  MemorySnapshotTree,
  MemorySource,
  MemoryTree,
  MessageInfo,
  Pairing,
  PortUrls,
  ProcessExit,
  ProcessInfo,
  Quota,
  RuntimeInfo,
  SecretInfo,
  ServiceInfo,
  ServiceState,
  ShareLink,
  TemplateError,
  TemplateInfo,
  TenantInfo,
  UpdateBoxFields,
  WakeupInfo,
  WatchEvent,
  WebSession,
  WebhookInfo,
} from "./models.js";
export {
  AuthenticationError,
  BerthError,
  BoxFailed,
  Conflict,
  InsufficientStorage,
  InternalError,
  InvalidRequest,
  NotFound,
  PayloadTooLarge,
  PermissionDenied,
  QuotaExceeded,
  Timeout,
  TooManyRequests,
  Unavailable,
  Unsupported,
  errorFor,
  errorFrom,
} from "./errors.js";
export type { Failure } from "./errors.js";
export type { components as ApiSchemas } from "./generated/api_types.js";
