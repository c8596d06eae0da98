// A Web Push service of our own on 127.0.0.1: it takes what berth sends to a subscription's
// endpoint, checks the VAPID authorization (RFC 8292) and decrypts the aes128gcm body
// (RFC 8291, RFC 8188) with node's crypto, written here from the RFCs and not shared with
// berth, so a mistake on either side shows.

import crypto from 'node:crypto';
import http from 'node:http';

const b64u = (buf) => Buffer.from(buf).toString('base64url');
const unb64u = (text) => Buffer.from(text, 'base64url');

/** A subscriber's keys, as a browser's push manager would make them. */
export function subscriberKeys() {
  const ecdh = crypto.createECDH('prime256v1');
  ecdh.generateKeys();
  return { ecdh, p256dh: b64u(ecdh.getPublicKey()), auth: b64u(crypto.randomBytes(16)) };
}

/** The public key of an uncompressed P-256 point, for verifying ES256. */
function p256Key(point) {
  if (point.length !== 65 || point[0] !== 4) throw new Error(`not an uncompressed P-256 point (${point.length} bytes)`);
  return crypto.createPublicKey({
    key: { kty: 'EC', crv: 'P-256', x: b64u(point.subarray(1, 33)), y: b64u(point.subarray(33)) },
    format: 'jwk',
  });
}

/**
 * Checks `Authorization: vapid t=<jwt>, k=<key>` (RFC 8292 §3) for a push to `origin`:
 * an ES256 JWT signed by `k`, whose `aud` is the push service's origin, `exp` within the
 * next 24 hours and `sub` a contact. Returns `k`; throws saying what is wrong.
 */
export function verifyVapid(header, origin) {
  const m = /^vapid\s+(.*)$/i.exec(header ?? '');
  if (!m) throw new Error(`Authorization is not "vapid t=…, k=…": ${header}`);
  const params = Object.fromEntries(m[1].split(',').map((p) => p.trim().split('=').map((s) => s.trim())));
  if (!params.t || !params.k) throw new Error(`vapid authorization lacks t or k: ${header}`);
  const [h, c, s] = params.t.split('.');
  const head = JSON.parse(unb64u(h).toString());
  const claims = JSON.parse(unb64u(c).toString());
  if (head.alg !== 'ES256') throw new Error(`JWT alg ${head.alg}, not ES256`);
  const signed = crypto.verify('sha256', Buffer.from(`${h}.${c}`), { key: p256Key(unb64u(params.k)), dsaEncoding: 'ieee-p1363' }, unb64u(s));
  if (!signed) throw new Error('the VAPID JWT signature does not verify with k');
  if (claims.aud !== origin) throw new Error(`JWT aud ${claims.aud}, not ${origin}`);
  const now = Date.now() / 1000;
  if (!(claims.exp > now && claims.exp <= now + 24 * 3600 + 60)) throw new Error(`JWT exp ${claims.exp} is not within 24 h of now`);
  if (!/^(mailto:|https:)/.test(claims.sub ?? '')) throw new Error(`JWT sub ${claims.sub} is not a mailto: or https: contact`);
  return params.k;
}

/** Decrypts an RFC 8291 `aes128gcm` push message for the subscriber `keys`. */
export function decryptPush(body, keys) {
  const salt = body.subarray(0, 16);
  const rs = body.readUInt32BE(16);
  const idlen = body[20];
  const asPublic = body.subarray(21, 21 + idlen);
  if (idlen !== 65) throw new Error(`keyid is ${idlen} bytes, not the sender's 65-byte P-256 key`);
  const records = body.subarray(21 + idlen);
  if (records.length > rs) throw new Error(`a ${records.length}-byte body in one record of rs ${rs}: berth sends one record`);
  const uaPublic = keys.ecdh.getPublicKey();
  const ecdhSecret = keys.ecdh.computeSecret(asPublic);
  const keyInfo = Buffer.concat([Buffer.from('WebPush: info\0'), uaPublic, asPublic]);
  const ikm = Buffer.from(crypto.hkdfSync('sha256', ecdhSecret, unb64u(keys.auth), keyInfo, 32));
  const cek = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const decipher = crypto.createDecipheriv('aes-128-gcm', cek, nonce);
  decipher.setAuthTag(records.subarray(records.length - 16));
  const padded = Buffer.concat([decipher.update(records.subarray(0, records.length - 16)), decipher.final()]);
  let end = padded.length - 1;
  while (end >= 0 && padded[end] === 0) end -= 1;
  if (padded[end] !== 2) throw new Error(`the last record's delimiter is ${padded[end]}, not 2`);
  return padded.subarray(0, end).toString('utf8');
}

/**
 * Listens on 127.0.0.1:`port`. Each POST to `/push/<id>` is checked and decrypted with the
 * keys registered for that id (`subscribe`) and kept in `received`; the service answers 201
 * as a push service does, or 400 saying what was wrong (also kept, as `error`).
 */
export async function startPushService(port) {
  const origin = `http://127.0.0.1:${port}`;
  const subscribers = new Map();
  const received = [];
  const waiters = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const id = req.url.replace(/^\/push\//, '');
      const entry = { id, headers: req.headers, at: Date.now() };
      try {
        const keys = subscribers.get(id);
        if (req.method !== 'POST' || !keys) throw new Error(`${req.method} ${req.url}: no such subscription`);
        if (req.headers['content-encoding'] !== 'aes128gcm') throw new Error(`Content-Encoding ${req.headers['content-encoding']}`);
        if (!/^\d+$/.test(req.headers.ttl ?? '')) throw new Error(`TTL header ${req.headers.ttl}`);
        entry.vapidKey = verifyVapid(req.headers.authorization, origin);
        entry.plaintext = decryptPush(Buffer.concat(chunks), keys);
        entry.payload = JSON.parse(entry.plaintext);
        res.writeHead(201, { Location: `${origin}/message/${received.length}` }).end();
      } catch (e) {
        entry.error = String(e.message ?? e);
        res.writeHead(400).end(entry.error);
      }
      received.push(entry);
      waiters.splice(0).forEach((wake) => wake());
    });
  });
  await new Promise((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve));
  return {
    origin,
    received,
    /** A new subscription: its endpoint and the keys a browser would send. */
    subscribe() {
      const id = crypto.randomBytes(8).toString('hex');
      const keys = subscriberKeys();
      subscribers.set(id, keys);
      return { id, endpoint: `${origin}/push/${id}`, keys: { p256dh: keys.p256dh, auth: keys.auth } };
    },
    /** Waits up to `ms` for a push to subscription `id`. */
    async next(id, ms) {
      const deadline = Date.now() + ms;
      for (;;) {
        const hit = received.find((r) => r.id === id);
        if (hit) return hit;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`no push reached ${origin}/push/${id} within ${ms} ms`);
        await new Promise((wake) => { waiters.push(wake); setTimeout(wake, left); });
      }
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
