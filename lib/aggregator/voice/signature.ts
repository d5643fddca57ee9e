/**
 * Signatures of the voice-provider protocol, both directions (our batch submissions, the provider's
 * callbacks): header `x-voice-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`
 * — the timestamped scheme of common webhook senders (e.g. Stripe's), HMAC per RFC 2104. The
 * timestamp bounds replays to `toleranceSeconds`; comparison is constant-time.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'x-voice-signature';

/** Default accepted clock difference between signer and verifier, in seconds. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;

function mac(secret: string, timestamp: number, body: Buffer | string): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex');
}

/** The header value signing `body` (the exact bytes sent) at `now` (ms since the epoch). */
export function signBody(secret: string, body: Buffer | string, now = Date.now()): string {
  const t = Math.floor(now / 1000);
  return `t=${t},v1=${mac(secret, t, body)}`;
}

const HEADER = /^t=(\d{1,12}),v1=([0-9a-f]{64})$/;

/**
 * True when `header` is a well-formed signature whose timestamp is within `toleranceSeconds` of
 * `now` — what can be checked before the body is read, so a request that cannot verify is refused
 * without reading it.
 */
export function signatureCurrent(header: string | undefined, now = Date.now(), toleranceSeconds = SIGNATURE_TOLERANCE_SECONDS): boolean {
  const match = HEADER.exec(header?.trim() ?? '');
  return match !== null && Math.abs(now / 1000 - Number(match[1])) <= toleranceSeconds;
}

/**
 * True when `header` signs `body` with `secret` and its timestamp is within `toleranceSeconds` of
 * `now`; false for a missing, malformed, stale or wrong signature.
 */
export function verifySignature(secret: string, header: string | undefined, body: Buffer | string,
  now = Date.now(), toleranceSeconds = SIGNATURE_TOLERANCE_SECONDS): boolean {
  if (!signatureCurrent(header, now, toleranceSeconds)) return false;
  const match = HEADER.exec(header!.trim())!;
  return timingSafeEqual(Buffer.from(mac(secret, Number(match[1]), body), 'hex'), Buffer.from(match[2], 'hex'));
}
