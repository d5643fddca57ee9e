/**
 * API keys of the signals and search services (header `x-api-key`). A key is 32 random bytes,
 * printed once; only its SHA-256 is stored (the key has full entropy, so a fast hash suffices),
 * in the service's own schema (`signals.api_keys`, `search.api_keys`).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from './db.ts';

export const KEY_SERVICES = ['signals', 'search'] as const;
export type KeyService = (typeof KEY_SERVICES)[number];

export interface ApiKeyRecord {
  key_id: string;
  name: string;
  key_prefix: string;
  created_at: string;
  revoked_at: string | null;
}

const hash = (key: string) => createHash('sha256').update(key).digest();
// The schema name comes from the closed KEY_SERVICES list, never from input.
const table = (service: KeyService) => `${service}.api_keys`;

/** Creates a key named `name` for `service`. @returns the key (shown once) and its id. */
export async function createApiKey(db: Queryable, service: KeyService, name: string): Promise<{ keyId: string; key: string }> {
  const key = `ldp_${service}_${randomBytes(32).toString('base64url')}`;
  const { rows } = await db.query<{ key_id: string }>(
    `INSERT INTO ${table(service)} (name, key_prefix, key_hash) VALUES ($1, $2, $3) RETURNING key_id`,
    [name, key.slice(0, service.length + 9), hash(key)],
  );
  return { keyId: rows[0].key_id, key };
}

/** Registers a key whose value is already known (the platform's internal key); idempotent. */
export async function registerApiKey(db: Queryable, service: KeyService, name: string, key: string): Promise<void> {
  await db.query(
    `INSERT INTO ${table(service)} (name, key_prefix, key_hash) VALUES ($1, $2, $3) ON CONFLICT (key_hash) DO NOTHING`,
    [name, key.slice(0, 12), hash(key)],
  );
}

/** Revokes the key with id `keyId`. @returns false when no active key has that id. */
export async function revokeApiKey(db: Queryable, service: KeyService, keyId: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE ${table(service)} SET revoked_at = now() WHERE key_id::text = $1 AND revoked_at IS NULL`, [keyId],
  );
  return rowCount === 1;
}

/** Lists the keys of `service` (without secrets), newest first. */
export async function listApiKeys(db: Queryable, service: KeyService): Promise<ApiKeyRecord[]> {
  const { rows } = await db.query<ApiKeyRecord>(
    `SELECT key_id, name, key_prefix, created_at, revoked_at FROM ${table(service)} ORDER BY created_at DESC`,
  );
  return rows;
}

/** The active key matching `key`, or null when unknown or revoked. */
export async function findApiKey(db: Queryable, service: KeyService, key: string): Promise<{ keyId: string; name: string } | null> {
  const { rows } = await db.query<{ key_id: string; name: string }>(
    `SELECT key_id, name FROM ${table(service)} WHERE key_hash = $1 AND revoked_at IS NULL`, [hash(key)],
  );
  return rows[0] ? { keyId: rows[0].key_id, name: rows[0].name } : null;
}
