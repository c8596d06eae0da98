// Builds berth's web app into `--out DIR` (docs/webapp.md): type-checks, bundles with
// esbuild (hashed names, the terminal split into its own chunk), writes index.html, the
// service worker with the shell list baked in (not the on-demand chunks), the manifest, icons, a .gz of each file and
// files.json, then prints the app shell's gzipped size and fails past the budget.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync, constants as zlib } from "node:zlib";
import * as esbuild from "esbuild";
import { icon, THEME_COLOR } from "./icons.mjs";

const SHELL_BUDGET_BYTES = 60 * 1024;
const here = path.dirname(fileURLToPath(import.meta.url));

function die(message) {
  console.error(`build.mjs: ${message}`);
  process.exit(1);
}

function parseArgs(argv) {
  let out = null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--out") out = argv[++i];
    else if (argv[i].startsWith("--out=")) out = argv[i].slice(6);
    else die(`unknown argument ${argv[i]} (usage: node build.mjs --out DIR)`);
  }
  if (!out) die("missing --out DIR");
  return path.resolve(out);
}

// Starts from an empty directory so no stale hashed file survives, but never empties a
// directory that is not one of ours.
function cleanOut(out) {
  if (fs.existsSync(out)) {
    const entries = fs.readdirSync(out);
    if (entries.length > 0 && !entries.includes("files.json")) {
      die(`${out} is not empty and holds no files.json: refusing to overwrite it`);
    }
    fs.rmSync(out, { recursive: true, force: true });
  }
  fs.mkdirSync(out, { recursive: true });
}

function typeCheck() {
  const tsc = path.join(here, "node_modules", "typescript", "bin", "tsc");
  for (const project of [here, path.join(here, "src", "sw")]) {
    try {
      execFileSync(process.execPath, [tsc, "--noEmit", "-p", project], { stdio: "inherit" });
    } catch {
      die(`type errors in ${path.relative(here, project) || "."} (above)`);
    }
  }
}

const CONTENT_TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".webmanifest": "application/manifest+json",
  ".png": "image/png",
  ".svg": "image/svg+xml",
  ".json": "application/json",
};

const files = new Map(); // path relative to out → Buffer

async function bundleApp() {
  const result = await esbuild.build({
    absWorkingDir: here,
    entryPoints: { app: "src/main.ts" },
    bundle: true,
    splitting: true,
    format: "esm",
    target: ["es2022", "chrome100", "safari16", "firefox110"],
    minify: true,
    sourcemap: false,
    legalComments: "none",
    entryNames: "assets/[name]-[hash]",
    chunkNames: "assets/[name]-[hash]",
    assetNames: "assets/[name]-[hash]",
    outdir: "out",
    write: false,
    metafile: true,
    logLevel: "warning",
  });
  for (const file of result.outputFiles) {
    files.set(path.relative(path.join(here, "out"), file.path), Buffer.from(file.contents));
  }
  const outputs = result.metafile.outputs;
  const entry = Object.keys(outputs).find((k) => outputs[k].entryPoint === "src/main.ts");
  const rel = (k) => path.relative("out", k);
  // The shell is the entry, what it imports statically, and its CSS; dynamic imports (the
  // terminal) load when used.
  const shell = new Set([rel(entry)]);
  const walk = (k) => {
    for (const imp of outputs[k].imports) {
      if (imp.kind === "import-statement" && !shell.has(rel(imp.path))) {
        shell.add(rel(imp.path));
        walk(imp.path);
      }
    }
  };
  walk(entry);
  const css = outputs[entry].cssBundle ? rel(outputs[entry].cssBundle) : null;
  if (css) shell.add(css);
  return { js: rel(entry), css, shell: [...shell] };
}

function indexHtml({ js, css }) {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1, viewport-fit=cover, interactive-widget=resizes-content">
<meta name="color-scheme" content="light dark">
<meta name="theme-color" content="${THEME_COLOR}">
<meta name="referrer" content="no-referrer">
<title>berth</title>
<link rel="manifest" href="/manifest.webmanifest">
<link rel="icon" href="/icons/icon.svg" type="image/svg+xml">
<link rel="apple-touch-icon" href="/icons/icon-192.png">
${css ? `<link rel="stylesheet" href="/${css}">\n` : ""}<script type="module" src="/${js}"></script>
</head>
<body>
<noscript>berth's web app needs JavaScript.</noscript>
</body>
</html>
`;
}

function manifest() {
  return JSON.stringify(
    {
      name: "berth",
      short_name: "berth",
      description: "Your agents, in your pocket",
      id: "/",
      start_url: "/#/boxes",
      scope: "/",
      display: "standalone",
      background_color: THEME_COLOR,
      theme_color: THEME_COLOR,
      icons: [
        { src: "/icons/icon-192.png", sizes: "192x192", type: "image/png", purpose: "any" },
        { src: "/icons/icon-512.png", sizes: "512x512", type: "image/png", purpose: "any" },
        { src: "/icons/maskable-512.png", sizes: "512x512", type: "image/png", purpose: "maskable" },
      ],
    },
    null,
    2,
  );
}

const SVG_ICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100"><rect width="100" height="100" rx="20" fill="${THEME_COLOR}"/><path d="M20 56h60l-8 10H28z" fill="#fff"/><path d="M52 16v36h20zM48 26v26H34z" fill="#fff"/><path d="M12 74q8-5 16 0t16 0 16 0 16 0 12 0" stroke="#5ec8d6" stroke-width="5" fill="none"/></svg>`;

async function bundleServiceWorker(precache) {
  const version = createHash("sha256").update(precache.map((p) => p + ":" + hashOf(p)).join("\n")).digest("hex").slice(0, 16);
  const result = await esbuild.build({
    absWorkingDir: here,
    entryPoints: ["src/sw/sw.ts"],
    bundle: true,
    format: "iife",
    target: ["es2022"],
    minify: true,
    legalComments: "none",
    write: false,
    define: {
      __SHELL__: JSON.stringify(precache.map((p) => (p === "index.html" ? "/" : "/" + p))),
      __VERSION__: JSON.stringify(version),
    },
    logLevel: "warning",
  });
  files.set("sw.js", Buffer.from(result.outputFiles[0].contents));
}

function hashOf(p) {
  return createHash("sha256").update(files.get(p)).digest("hex");
}

function gzip(buf) {
  return gzipSync(buf, { level: zlib.Z_BEST_COMPRESSION });
}

async function main() {
  const out = parseArgs(process.argv.slice(2));
  typeCheck();
  const app = await bundleApp();
  files.set("index.html", Buffer.from(indexHtml(app)));
  files.set("manifest.webmanifest", Buffer.from(manifest()));
  files.set("icons/icon.svg", Buffer.from(SVG_ICON));
  files.set("icons/icon-192.png", icon(192));
  files.set("icons/icon-512.png", icon(512));
  files.set("icons/maskable-512.png", icon(512, { maskable: true }));
  // What the app needs to open offline; the chunks loaded on demand (the terminal, which
  // needs the network anyway) are not fetched ahead by every install.
  const precache = [...files.keys()].filter((p) => !p.startsWith("assets/") || app.shell.includes(p)).sort();
  await bundleServiceWorker(precache);

  cleanOut(out);
  const listing = [];
  for (const [rel, buf] of [...files.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const dest = path.join(out, rel);
    fs.mkdirSync(path.dirname(dest), { recursive: true });
    fs.writeFileSync(dest, buf);
    fs.writeFileSync(dest + ".gz", gzip(buf));
    const type = CONTENT_TYPES[path.extname(rel)];
    if (!type) die(`no content type for ${rel}`);
    listing.push({ path: rel, content_type: type, immutable: rel.startsWith("assets/") });
  }
  fs.writeFileSync(path.join(out, "files.json"), JSON.stringify(listing, null, 1) + "\n");

  const shell = ["index.html", ...app.shell];
  const shellGz = shell.reduce((n, p) => n + gzip(files.get(p)).length, 0);
  const lazyGz = [...files.keys()]
    .filter((p) => p.startsWith("assets/") && !shell.includes(p))
    .reduce((n, p) => n + gzip(files.get(p)).length, 0);
  const kb = (n) => (n / 1024).toFixed(1);
  console.log(
    `web app: shell ${kb(shellGz)} KB gzipped (budget ${kb(SHELL_BUDGET_BYTES)} KB; ${shell.join(", ")}), ` +
      `loaded on demand ${kb(lazyGz)} KB, ${listing.length} files in ${out}`,
  );
  if (shellGz > SHELL_BUDGET_BYTES) die(`the app shell is ${kb(shellGz)} KB gzipped, over the ${kb(SHELL_BUDGET_BYTES)} KB budget`);
}

main().catch((err) => die(err && err.stack ? err.stack : String(err)));
