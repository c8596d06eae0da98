// What a box's panels (chat, files, terminal) share with the screen around them.
import type { BoxView } from "./api";

export interface BoxContext {
  name: string;
  /** The box as last seen; panels update it from the events they see. */
  box: BoxView | null;
  setState(state: BoxView["state"], reason: string | null): void;
}
