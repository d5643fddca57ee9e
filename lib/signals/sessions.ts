/**
 * Login sessions of the signals service: the browser holds a random 256-bit token in a cookie; the
 * server keeps only its SHA-256 with the user, expiry and revocation (a logout is effective at
 * once). Each login makes a new session ("rotation on login": a token planted before login is
 * never promoted), and revokes the session the browser held before.
 * Login flows in progress (OIDC state/nonce/PKCE, or the built-in code login) live 10 minutes,
 * each bound to its browser by the LOGIN_COOKIE.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '../platform/db.ts';

export const SESSION_COOKIE = 'ldp_session';
export const LOGIN_FLOW_TTL_SECONDS = 600;
/**
 * The cookie binding a login flow to the browser that started it (review of issue 29, login CSRF):
 * it holds the flow's state, lives as long as the flow, and is sent only to the login routes; the
 * callback refuses a state that this cookie does not carry.
 */
export const LOGIN_COOKIE = 'ldp_login';
export const LOGIN_COOKIE_PATH = '/api/v1/auth/session';

const hash = (token: string) => createHash('sha256').update(token).digest();

export interface Session {
  session_id: string;
  user_id: string;
  method: string;
  created_at: string;
  expires_at: string;
}

const SESSION_COLUMNS = `s.session_id, s.user_id, s.method,
  to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  to_char(s.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS expires_at`;

/**
 * Opens a session for `userId` valid `ttlSeconds`, revoking `previousToken`'s session if any.
 * @returns the cookie token (shown once) and the session.
 */
export async function createSession(db: Queryable, userId: string, method: string, ttlSeconds: number, previousToken?: string): Promise<{ token: string; session: Session }> {
  if (previousToken) await revokeSession(db, previousToken);
  const token = randomBytes(32).toString('base64url');
  const { rows } = await db.query<Session>(
    `INSERT INTO signals.sessions AS s (token_hash, user_id, method, expires_at) VALUES ($1, $2, $3, now() + make_interval(secs => $4))
     RETURNING ${SESSION_COLUMNS}`, [hash(token), userId, method, ttlSeconds]);
  return { token, session: rows[0] };
}

/** The live (unexpired, unrevoked) session of `token` whose user is not disabled, or null. */
export async function findSession(db: Queryable, token: string): Promise<Session | null> {
  const { rows } = await db.query<Session>(
    `SELECT ${SESSION_COLUMNS} FROM signals.sessions s JOIN signals.users u USING (user_id)
      WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now() AND u.status <> 'disabled'`, [hash(token)]);
  return rows[0] ?? null;
}

/** Revokes the session of `token`. @returns whether a live session was revoked. */
export async function revokeSession(db: Queryable, token: string): Promise<boolean> {
  const { rowCount } = await db.query(
    'UPDATE signals.sessions SET revoked_at = now() WHERE token_hash = $1 AND revoked_at IS NULL', [hash(token)]);
  return rowCount === 1;
}

export interface LoginFlow {
  flow_id: string;
  kind: 'oidc' | 'code';
  state: string;
  nonce: string | null;
  code_verifier: string | null;
  user_id: string | null;
  return_to: string | null;
}

/** Records a login flow keyed by a fresh random `state`; returns it. */
export async function startLoginFlow(
  db: Queryable, flow: { kind: 'oidc' | 'code'; state?: string; nonce?: string; codeVerifier?: string; userId?: string | null; returnTo?: string | null },
): Promise<LoginFlow> {
  const { rows } = await db.query<LoginFlow>(
    `INSERT INTO signals.login_flows (kind, state, nonce, code_verifier, user_id, return_to, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
     RETURNING flow_id, kind, state, nonce, code_verifier, user_id, return_to`,
    [flow.kind, flow.state ?? randomBytes(24).toString('base64url'), flow.nonce ?? null, flow.codeVerifier ?? null,
      flow.userId ?? null, flow.returnTo ?? null, LOGIN_FLOW_TTL_SECONDS]);
  return rows[0];
}

/** The unexpired, unused flow of `state` (locked for the caller's transaction), or null. */
export async function findLoginFlow(db: Queryable, state: string): Promise<LoginFlow | null> {
  const { rows } = await db.query<LoginFlow>(
    `SELECT flow_id, kind, state, nonce, code_verifier, user_id, return_to FROM signals.login_flows
      WHERE state = $1 AND used_at IS NULL AND expires_at > now() FOR UPDATE`, [state]);
  return rows[0] ?? null;
}

/** Marks a flow used (a state is good for one completed login). */
export async function finishLoginFlow(db: Queryable, flowId: string): Promise<void> {
  await db.query('UPDATE signals.login_flows SET used_at = now() WHERE flow_id = $1', [flowId]);
}

/**
 * Deletes what no longer serves: one-time codes and wrong tries older than a day (the send and try
 * limits look back an hour at most), login flows expired a day ago, and sessions expired or revoked
 * more than 30 days ago (kept that long for audit).
 * @returns rows deleted per table.
 */
export async function prunePeopleRecords(db: Queryable): Promise<Record<string, number>> {
  const run = async (sql: string) => (await db.query(sql)).rowCount ?? 0;
  return {
    one_time_codes: await run(`DELETE FROM signals.one_time_codes WHERE created_at < now() - interval '1 day'`),
    one_time_code_failures: await run(`DELETE FROM signals.one_time_code_failures WHERE failed_at < now() - interval '1 day'`),
    login_flows: await run(`DELETE FROM signals.login_flows WHERE expires_at < now() - interval '1 day'`),
    sessions: await run(`DELETE FROM signals.sessions WHERE coalesce(revoked_at, expires_at) < now() - interval '30 days'`),
  };
}
