// Messages waiting to be sent, kept in IndexedDB so that one typed offline survives a
// reload and is sent once when the network is back. Each carries its idempotency key, so a
// retry after a lost answer is the same message to berth, never a second one.

export interface Outgoing {
  id: string;
  box: string;
  content: string;
  created_at: string;
}

const DB = "berth";
const STORE = "outbox";
let opening: Promise<IDBDatabase | null> | null = null;

function request<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error ?? new Error("IndexedDB request failed"));
  });
}

/** The database, or null where IndexedDB is unavailable (then messages are only in memory). */
function db(): Promise<IDBDatabase | null> {
  opening ??= new Promise((resolve) => {
    if (!("indexedDB" in window)) return resolve(null);
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => {
      const store = req.result.createObjectStore(STORE, { keyPath: "id" });
      store.createIndex("box", "box");
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => resolve(null);
    req.onblocked = () => resolve(null);
  });
  return opening;
}

const memory = new Map<string, Outgoing>();

export async function put(item: Outgoing): Promise<void> {
  memory.set(item.id, item);
  const d = await db();
  if (d) await request(d.transaction(STORE, "readwrite").objectStore(STORE).put(item));
}

export async function remove(id: string): Promise<void> {
  memory.delete(id);
  const d = await db();
  if (d) await request(d.transaction(STORE, "readwrite").objectStore(STORE).delete(id));
}

/** The box's waiting messages, oldest first. */
export async function waiting(box: string): Promise<Outgoing[]> {
  return (await all()).filter((m) => m.box === box);
}

/** Every waiting message, of every box, oldest first: those this page put (whether or not
 * IndexedDB took them) and those earlier pages left in IndexedDB. */
export async function all(): Promise<Outgoing[]> {
  const d = await db();
  const stored = d ? await request(d.transaction(STORE, "readonly").objectStore(STORE).getAll() as IDBRequest<Outgoing[]>) : [];
  const items = new Map(stored.map((m) => [m.id, m]));
  for (const m of memory.values()) items.set(m.id, m);
  return [...items.values()].sort((a, b) => a.created_at.localeCompare(b.created_at));
}
