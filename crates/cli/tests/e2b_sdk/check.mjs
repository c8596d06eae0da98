// What every npm suite of this folder checks with: `ok <check>` lines (what the Rust test
// reads), assertions that throw, and waits that poll until a deadline.

// Long enough for a loaded machine; each wait polls, and fails only past it.
export const WAIT_MS = 90_000;

export const ok = (check) => console.log(`ok ${check}`);
export const assert = (cond, what) => {
  if (!cond) throw new Error(`assertion failed: ${what}`);
};
export const show = (value) => JSON.stringify(value);
export const same = (a, b) => show(a) === show(b);

export async function waitFor(what, condition) {
  const deadline = Date.now() + WAIT_MS;
  while (Date.now() < deadline) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// The `errorClass` (the SDK's CommandExitError) `promise` rejects with; anything else, or
// no rejection, fails.
export async function rejectsWith(errorClass, promise) {
  try {
    const result = await promise;
    throw new Error(`no ${errorClass.name}, but ${show(result)}`);
  } catch (e) {
    if (!(e instanceof errorClass)) throw e;
    return e;
  }
}
