// The app's hash routes (the server never sees them): #/boxes, #/boxes/<name>/<tab>,
// #/pair/<code>, #/signin.

export interface Route {
  screen: "signin" | "pair" | "boxes" | "box";
  code?: string;
  box?: string;
  tab?: "chat" | "files" | "memory" | "terminal" | "desktop";
  query: URLSearchParams;
}

export function parseRoute(hash: string): Route {
  const [pathPart, queryPart = ""] = hash.replace(/^#/, "").split("?", 2) as [string, string?];
  const query = new URLSearchParams(queryPart);
  const parts = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "pair" && parts[1]) return { screen: "pair", code: parts[1], query };
  if (parts[0] === "signin") return { screen: "signin", query };
  if (parts[0] === "boxes" && parts[1]) {
    const tab = parts[2] === "files" || parts[2] === "memory" || parts[2] === "terminal" || parts[2] === "desktop" ? parts[2] : "chat";
    return { screen: "box", box: parts[1], tab, query };
  }
  return { screen: "boxes", query };
}
