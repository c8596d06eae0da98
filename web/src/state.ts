// How a box's state reads to a person.
import type { BoxView } from "./api";

export function stateLabel(box: Pick<BoxView, "state" | "state_reason">): string {
  switch (box.state) {
    case "stopped":
      return "sleeping";
    case "starting":
      return "waking";
    case "running":
      return "running";
    case "stopping":
      return "going to sleep";
    case "paused":
      return "paused";
    case "snapshotted":
      return "saved to disk";
    case "failed":
      return box.state_reason ? `failed: ${box.state_reason}` : "failed";
  }
}
