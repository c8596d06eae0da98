// What the app reads from a box's template (`GET /v1/templates`).
import type { Template } from "./api";

/** Whether boxes of `template` have a desktop to show: its VNC server, the `vnc` service
 * (docs/api.md "Desktop"). */
export function hasDesktop(template: Template | undefined): boolean {
  return !!template?.services.some((service) => service.name === "vnc");
}
