// The app's icons, drawn here rather than committed as binaries: a boat on the sea in a
// rounded square. Pure Node (zlib), so the build needs no image tool.
import { deflateSync } from "node:zlib";

const BG = [15, 76, 92]; // deep teal
const FG = [255, 255, 255];
const SEA = [94, 200, 214];

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type, data) {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, "ascii");
  data.copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

function png(size, rgba) {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header[8] = 8; // bit depth
  header[9] = 6; // RGBA
  const raw = Buffer.alloc((size * 4 + 1) * size);
  for (let y = 0; y < size; y++) {
    raw[y * (size * 4 + 1)] = 0; // filter: none
    rgba.copy(raw, y * (size * 4 + 1) + 1, y * size * 4, (y + 1) * size * 4);
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", deflateSync(raw, { level: 9 })),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

// Shapes in unit coordinates (0..1 across the content area), y down.
function inHull(x, y) {
  if (y < 0.6 || y > 0.72) return false;
  const t = (y - 0.6) / 0.12;
  return x > 0.2 + 0.1 * t && x < 0.8 - 0.1 * t;
}
function inSail(x, y) {
  // A triangle from the mast (x = 0.52) forward, and a smaller one behind it.
  if (y > 0.56 || y < 0.18) return false;
  const t = (y - 0.18) / 0.38;
  return (x > 0.52 && x < 0.52 + 0.24 * t) || (x < 0.48 && x > 0.48 - 0.16 * t && y > 0.3);
}
function inSea(x, y) {
  return y > 0.76 + 0.025 * Math.sin(x * Math.PI * 6) && y < 0.82 + 0.025 * Math.sin(x * Math.PI * 6);
}

function insideRoundedSquare(x, y, r) {
  const cx = Math.min(Math.max(x, r), 1 - r);
  const cy = Math.min(Math.max(y, r), 1 - r);
  return (x - cx) ** 2 + (y - cy) ** 2 <= r * r;
}

/** One icon, `size` px square. Maskable icons fill the square and keep the drawing inside
 * the central 80% (the safe zone); plain ones are a rounded square on transparency. */
export function icon(size, { maskable = false } = {}) {
  const rgba = Buffer.alloc(size * size * 4);
  const samples = 4; // 4x4 supersampling for smooth edges
  const inset = maskable ? 0.2 : 0.08;
  for (let py = 0; py < size; py++) {
    for (let px = 0; px < size; px++) {
      let r = 0, g = 0, b = 0, a = 0;
      for (let sy = 0; sy < samples; sy++) {
        for (let sx = 0; sx < samples; sx++) {
          const x = (px + (sx + 0.5) / samples) / size;
          const y = (py + (sy + 0.5) / samples) / size;
          if (!maskable && !insideRoundedSquare(x, y, 0.2)) continue;
          const ux = (x - inset) / (1 - 2 * inset);
          const uy = (y - inset) / (1 - 2 * inset);
          const c = inHull(ux, uy) || inSail(ux, uy) ? FG : inSea(ux, uy) ? SEA : BG;
          r += c[0]; g += c[1]; b += c[2]; a += 255;
        }
      }
      const n = samples * samples;
      const o = (py * size + px) * 4;
      const covered = a / 255;
      rgba[o] = covered ? Math.round(r / covered) : 0;
      rgba[o + 1] = covered ? Math.round(g / covered) : 0;
      rgba[o + 2] = covered ? Math.round(b / covered) : 0;
      rgba[o + 3] = Math.round(a / n);
    }
  }
  return png(size, rgba);
}

export const THEME_COLOR = `rgb(${BG.join(",")})`;
