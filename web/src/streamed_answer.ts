// An answer as it is streamed, piece by piece. Re-rendering the whole answer on every
// piece costs its length each time (quadratic over the answer): instead, the part that
// can no longer change (the blocks ended by a blank line outside a code fence) is
// rendered once and kept; only the block still being written is rendered again. The
// complete answer (the `assistant` event) replaces the whole of it.
import { h } from "./dom";
import { renderMarkdown } from "./markdown";

const FENCE = /^ {0,3}(```|~~~)/;

/** Where the settled head of `text` ends: just after its last blank line outside a code
 * fence, among its complete lines (0: nothing is settled yet). */
export function settledEnd(text: string): number {
  let fenced = false;
  let end = 0;
  let at = 0;
  for (;;) {
    const newline = text.indexOf("\n", at);
    if (newline < 0) return end;
    const line = text.slice(at, newline);
    if (FENCE.test(line)) fenced = !fenced;
    else if (!fenced && line.trim() === "") end = newline + 1;
    at = newline + 1;
  }
}

export class StreamedAnswer {
  readonly el: HTMLElement;
  private tail = "";
  private tailEl: HTMLElement;

  constructor(private readonly links: (md: string) => string) {
    this.tailEl = h("div", { class: "md" });
    this.el = h("article", { class: "msg assistant streaming", "aria-label": "Agent" }, this.tailEl);
  }

  append(piece: string): void {
    this.tail += piece;
    const cut = settledEnd(this.tail);
    if (cut > 0) {
      this.el.insertBefore(renderMarkdown(this.tail.slice(0, cut), this.links), this.tailEl);
      this.tail = this.tail.slice(cut);
    }
    const fresh = renderMarkdown(this.tail, this.links);
    this.tailEl.replaceWith(fresh);
    this.tailEl = fresh;
  }
}
