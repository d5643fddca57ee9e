/**
 * One-time codes (guardian consent, code login): 6 decimal digits from `crypto.randomInt` (uniform,
 * CSPRNG), stored only as a keyed hash (HMAC through the PII blind-index key, so a stolen table
 * cannot be brute-forced offline), valid for 10 minutes, used at most once. Per scope: at most 3
 * codes sent per hour, at most 5 wrong tries per 5 minutes (issue 7; docs/decisions.md).
 */
import { randomInt, timingSafeEqual } from 'node:crypto';
import type { PiiCrypto } from '../platform/crypto.ts';
import type { Queryable } from '../platform/db.ts';

export const CODE_TTL_SECONDS = 600;
export const MAX_SENDS_PER_HOUR = 3;
export const MAX_WRONG_TRIES = 5;
export const WRONG_TRIES_WINDOW_SECONDS = 300;

/** Why a code could not be sent or was not accepted; `code` is the API error code. */
export class OneTimeCodeError extends Error {
  name = 'OneTimeCodeError';
  constructor(
    readonly code: 'OTP_SEND_LIMIT' | 'OTP_TOO_MANY_TRIES' | 'OTP_INVALID' | 'OTP_EXPIRED',
    message: string,
    /** For the limits: seconds until a new try can succeed. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

const hashCode = (pii: PiiCrypto, scope: string, code: string) => pii.blindIndex('one-time-code', `${scope}\u0000${code}`);

/**
 * Creates a new code for `scope` and returns it (to be encrypted into the sending job's payload).
 * Older unused codes of the scope stay valid until they expire.
 * @throws OneTimeCodeError `OTP_SEND_LIMIT` when 3 codes were already created in the last hour.
 */
export async function createCode(db: Queryable, pii: PiiCrypto, scope: string): Promise<string> {
  // Serialises code creation per scope inside the caller's transaction, so the count is exact.
  await db.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, [`otp:${scope}`]);
  const { rows: [sent] } = await db.query<{ n: number; oldest: string | null }>(
    `SELECT count(*)::int AS n, extract(epoch FROM min(created_at) + interval '1 hour' - now())::int AS oldest
       FROM signals.one_time_codes WHERE scope = $1 AND created_at > now() - interval '1 hour'`, [scope]);
  if (sent.n >= MAX_SENDS_PER_HOUR) {
    throw new OneTimeCodeError('OTP_SEND_LIMIT', `At most ${MAX_SENDS_PER_HOUR} codes are sent per hour; try again later`, Math.max(1, Number(sent.oldest)));
  }
  const code = String(randomInt(0, 1_000_000)).padStart(6, '0');
  await db.query(
    `INSERT INTO signals.one_time_codes (scope, code_hash, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))`,
    [scope, hashCode(pii, scope, code), CODE_TTL_SECONDS]);
  return code;
}

/**
 * Checks `code` for `scope` and, when right, marks it used (single use). Run it in a transaction
 * that commits even when the code is wrong, so that the wrong try is counted.
 * @throws OneTimeCodeError `OTP_TOO_MANY_TRIES` (5 wrong tries in 5 minutes), `OTP_EXPIRED` (the
 *   code was right but has expired or was used), `OTP_INVALID` (no such code: the try is counted).
 */
export async function consumeCode(db: Queryable, pii: PiiCrypto, scope: string, code: string): Promise<void> {
  await db.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, [`otp:${scope}`]);
  const { rows: [tries] } = await db.query<{ n: number; wait: number | null }>(
    `SELECT count(*)::int AS n, extract(epoch FROM min(failed_at) + make_interval(secs => $2) - now())::int AS wait
       FROM signals.one_time_code_failures WHERE scope = $1 AND failed_at > now() - make_interval(secs => $2)`,
    [scope, WRONG_TRIES_WINDOW_SECONDS]);
  if (tries.n >= MAX_WRONG_TRIES) {
    throw new OneTimeCodeError('OTP_TOO_MANY_TRIES', `Too many wrong codes; try again in ${Math.max(1, Number(tries.wait))} s`, Math.max(1, Number(tries.wait)));
  }
  const hash = hashCode(pii, scope, code);
  const { rows } = await db.query<{ code_id: string; code_hash: Buffer; live: boolean }>(
    `SELECT code_id, code_hash, (used_at IS NULL AND expires_at > now()) AS live
       FROM signals.one_time_codes WHERE scope = $1 AND created_at > now() - interval '1 day'
      ORDER BY created_at DESC`, [scope]);
  const match = rows.find((r) => r.code_hash.length === hash.length && timingSafeEqual(r.code_hash, hash));
  if (!match) {
    await db.query('INSERT INTO signals.one_time_code_failures (scope) VALUES ($1)', [scope]);
    throw new OneTimeCodeError('OTP_INVALID', 'The code is not right');
  }
  if (!match.live) throw new OneTimeCodeError('OTP_EXPIRED', 'The code has expired or was already used; ask for a new one');
  await db.query('UPDATE signals.one_time_codes SET used_at = now() WHERE code_id = $1', [match.code_id]);
}
