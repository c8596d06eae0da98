// berth's HTTP API as the test's own client (the admin key, never the browser): what the
// app shows is compared with what the API says.

export function api(base, key) {
  async function call(method, path, body) {
    const res = await fetch(new URL(path, base), {
      method,
      headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    const json = text ? JSON.parse(text) : null;
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return json;
  }
  return {
    call,
    box: (ref) => call('GET', `/v1/boxes/${ref}`),
    boxes: () => call('GET', '/v1/boxes').then((r) => r.boxes),
    patch: (ref, body) => call('PATCH', `/v1/boxes/${ref}`, body),
    remove: (ref) => call('DELETE', `/v1/boxes/${ref}`),
    send: (ref, content) => call('POST', `/v1/boxes/${ref}/messages`, { content }),
    /** Every message of the box, page by page. */
    async messages(ref) {
      const all = [];
      for (let after = 0; ;) {
        const page = (await call('GET', `/v1/boxes/${ref}/messages?after=${after}&limit=1000`)).messages;
        all.push(...page);
        if (page.length < 1000) return all;
        after = page[page.length - 1].seq;
      }
    },
    /** Every stored event of the box, page by page (`wait=false`: the JSON pages). */
    async events(ref) {
      const all = [];
      for (let after = 0; ;) {
        const page = await call('GET', `/v1/boxes/${ref}/events?after=${after}&wait=false`);
        all.push(...page.events);
        if (!page.more) return all;
        after = page.next_after;
      }
    },
  };
}

/** Polls `probe` until it returns something truthy (every 100 ms, up to `ms`). */
export async function until(what, ms, probe) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await probe();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${last?.message ?? JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The text a conversation shows for an event: a user message's, an assistant's text blocks. */
export function eventText(event) {
  const content = event.data?.message?.content;
  if (event.type === 'user') {
    if (typeof content === 'string') return content;
    return (content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('');
  }
  if (event.type === 'assistant') {
    return (content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('');
  }
  return null;
}
