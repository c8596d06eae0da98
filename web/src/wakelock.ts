// Keeps the screen on while an answer streams, where the browser allows it.
let sentinel: WakeLockSentinel | null = null;
let wanted = false;

async function acquire(): Promise<void> {
  if (!wanted || sentinel || !("wakeLock" in navigator) || document.visibilityState !== "visible") return;
  try {
    sentinel = await navigator.wakeLock.request("screen");
    sentinel.addEventListener("release", () => {
      sentinel = null;
    });
  } catch {
    // Refused (battery saver, no user gesture): the answer still streams.
  }
}

export function holdAwake(): void {
  wanted = true;
  void acquire();
}

export function letSleep(): void {
  wanted = false;
  void sentinel?.release().catch(() => {});
  sentinel = null;
}

// The browser drops the lock when the page is hidden; take it again on return.
document.addEventListener("visibilitychange", () => void acquire());
