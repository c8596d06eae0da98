// Keeps the app as tall as the visible viewport, so the on-screen keyboard (which shrinks
// the visual viewport on iOS without resizing the layout) never covers the message field.
export function trackViewport(): void {
  const vv = window.visualViewport;
  if (!vv) return;
  const update = (): void => {
    document.documentElement.style.setProperty("--app-height", `${Math.round(vv.height)}px`);
  };
  vv.addEventListener("resize", update);
  update();
}
