// A long conversation is not all in the DOM: its newest MAX_ROWS rows are, and the older
// ones wait outside it, shown a page at a time by "Show earlier messages" at the top.
// Rows leave only while the reader is at the end (a reader who scrolled up keeps what
// they read), so the page's size stays bounded however long the history is.
import { h } from "./dom";

export const MAX_ROWS = 200;
export const PAGE_ROWS = 100;

export class LogWindow {
  private readonly earlier: HTMLElement[] = [];
  private readonly more: HTMLButtonElement;

  constructor(private readonly log: HTMLElement) {
    this.more = h("button", { type: "button", class: "earlier", hidden: true, onclick: () => this.showEarlier() }, "Show earlier messages");
    log.prepend(this.more);
  }

  /** After a row was added at the end: the oldest rows past the limit leave the DOM. */
  trim(): void {
    let rows = this.log.childElementCount - 1;
    while (rows > MAX_ROWS) {
      const oldest = this.more.nextElementSibling as HTMLElement | null;
      if (!oldest) break;
      oldest.remove();
      this.earlier.push(oldest);
      rows -= 1;
    }
    this.more.hidden = this.earlier.length === 0;
  }

  /** The page of rows before the first shown, the view kept where the reader is. */
  private showEarlier(): void {
    const page = this.earlier.splice(Math.max(0, this.earlier.length - PAGE_ROWS));
    const height = this.log.scrollHeight;
    this.more.after(...page);
    this.log.scrollTop += this.log.scrollHeight - height;
    this.more.hidden = this.earlier.length === 0;
  }
}
