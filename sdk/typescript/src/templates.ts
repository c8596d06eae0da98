/** The daemon's templates, what boxes are made from (docs/api.md, "Templates"). */

import type { TemplateError, TemplateInfo } from "./models.js";
import type { Transport } from "./transport.js";

/** What a reload loaded, and the files it skipped with why. */
export interface Reloaded {
  templates: TemplateInfo[];
  errors: TemplateError[];
}

export class Templates {
  constructor(private readonly transport: Transport) {}

  /** Every template (a tenant's key sees no host paths in them). */
  async list(): Promise<TemplateInfo[]> {
    return (await this.transport.json<{ templates: TemplateInfo[] }>({ method: "GET", path: "/v1/templates" })).templates;
  }

  /**
   * Re-reads `<data-dir>/templates/*.toml` (admin): a bad file is reported in `errors`
   * and skipped, the others load.
   */
  async reload(): Promise<Reloaded> {
    return this.transport.json<Reloaded>({ method: "POST", path: "/v1/templates/reload" });
  }
}
