/**
 * Sessions of the operator console (table aggregator.console_sessions, sql/014_console.sql): a
 * random 256-bit value in an HttpOnly cookie, stored only as its SHA-256, with an expiry; and the
 * single use of console links (aggregator.console_login_links).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '../../platform/db.ts';
import type { AggregatorClaims } from '../../platform/tokens.ts';

/** The purpose of a console link token (`tokens.issueForPurpose`): it signs in to the console once, and is no bearer token. */
export const CONSOLE_LINK_PURPOSE = 'console-login';

const hash = (value: string) => createHash('sha256').update(value, 'utf8').digest();

/**
 * Records the use of console link `jti` (valid until `expiresAt`); false when it was used before.
 * Expired rows are pruned on the way: a link past its expiry fails verification anyway.
 */
export async function consumeConsoleLink(db: Queryable, jti: string, expiresAt: Date): Promise<boolean> {
  await db.query('DELETE FROM aggregator.console_login_links WHERE expires_at < now()');
  const { rowCount } = await db.query(
    'INSERT INTO aggregator.console_login_links (jti, expires_at) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING', [jti, expiresAt]);
  return rowCount === 1;
}

/**
 * Starts a session for `claims` lasting `ttlSeconds`; returns the cookie value (base64url, 43
 * characters). Expired sessions are deleted on the way (sign-ins are rare: no task is needed).
 */
export async function createConsoleSession(db: Queryable, claims: AggregatorClaims, ttlSeconds: number): Promise<string> {
  await db.query('DELETE FROM aggregator.console_sessions WHERE expires_at < now()');
  const value = randomBytes(32).toString('base64url');
  await db.query(
    `INSERT INTO aggregator.console_sessions (session_hash, aggregator_id, claims, expires_at)
     VALUES ($1, $2, $3, now() + make_interval(secs => $4))`, [hash(value), claims.aggregator_id, JSON.stringify(claims), ttlSeconds]);
  return value;
}

/** The claims of the unexpired session whose cookie value is `value`, or null. */
export async function findConsoleSession(db: Queryable, value: string): Promise<AggregatorClaims | null> {
  const { rows } = await db.query<{ claims: AggregatorClaims }>(
    'SELECT claims FROM aggregator.console_sessions WHERE session_hash = $1 AND expires_at > now()', [hash(value)]);
  return rows[0]?.claims ?? null;
}

/** Ends the session of cookie value `value` (sign-out), and any expired ones. */
export async function deleteConsoleSession(db: Queryable, value: string): Promise<void> {
  await db.query('DELETE FROM aggregator.console_sessions WHERE session_hash = $1 OR expires_at < now()', [hash(value)]);
}
