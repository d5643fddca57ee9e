/**
 * Participants of an aggregator (aggregator schema): how a coerced participant is stored (identity
 * encrypted, blind indexes for duplicates: DESIGN.md "Data rules"), found again by phone, e-mail or
 * external id, and turned into the item pushed to signals.
 */
import { parse as uuidParse, v5 as uuidv5 } from 'uuid';
import type { PiiCrypto } from '../platform/crypto.ts';
import type { PoolClient, Queryable } from '../platform/db.ts';
import type { ItemInput, LifecycleStatus } from '../network/items.ts';
import type { Domain, Network } from '../network/config.ts';
import type { CoercedParticipant } from './bulk/row-coercion.ts';

/**
 * The participant (and item) id of the participant onboarded from row `rowNumber` of bulk upload
 * `uploadId`: a UUID v5 (RFC 9562 §5.5) named by the row number in the upload's namespace, so a
 * retried chunk creates and pushes the very same ids again instead of new ones.
 */
export function bulkParticipantId(uploadId: string, rowNumber: number): string {
  return uuidv5(String(rowNumber), uploadId);
}

/** `bulkParticipantId` for many rows of one upload: the namespace is parsed once. */
export function bulkParticipantIds(uploadId: string): (rowNumber: number) => string {
  const namespace = uuidParse(uploadId);
  return (rowNumber) => uuidv5(String(rowNumber), namespace);
}

/** Per domain: its fields' names as JSON object keys (`"name":`), in schema order, for `contentHash`. */
const canonicalKeys = new WeakMap<Domain, { name: string; key: string }[]>();

/**
 * The content hash of a participant's `profile` of `domain` (identity fields included):
 * HMAC-SHA-256 under the PII blind-index key of its JSON with the fields in schema order, so equal
 * profiles hash equal whatever the file's column order, and the hash reveals nothing of a phone to
 * whoever reads the table. Built field by field (no sorted copy, no JSON.stringify replacer: this
 * runs for every row of every upload). Fields the schema does not have are not part of a profile.
 */
export function contentHash(pii: PiiCrypto, domain: Domain, profile: Record<string, unknown>): Buffer {
  let keys = canonicalKeys.get(domain);
  if (!keys) canonicalKeys.set(domain, keys = domain.fields.map((f) => ({ name: f.name, key: `${JSON.stringify(f.name)}:` })));
  let text = '{';
  for (const { name, key } of keys) {
    const value = profile[name];
    if (value === undefined) continue;
    text += `${text.length > 1 ? ',' : ''}${key}${typeof value === 'number' ? String(value) : JSON.stringify(value)}`;
  }
  return pii.blindIndex('participant-content', `${text}}`);
}

/** The keys that make two participants of one aggregator the same participant. */
export interface ParticipantKeys {
  /** HMAC blind index of the E.164 phone. */
  phoneIndex?: Buffer;
  /** HMAC blind index of the lower-cased e-mail. */
  emailIndex?: Buffer;
  externalId?: string;
}

/** Blind indexes (lib/crypto.ts `blindIndex('phone' | 'email', …)`) and external id of `p`. */
export function participantKeys(pii: PiiCrypto, p: Pick<CoercedParticipant, 'externalId'> & { identity: { phone?: string; email?: string } }): ParticipantKeys {
  return {
    phoneIndex: p.identity.phone ? pii.blindIndex('phone', p.identity.phone) : undefined,
    emailIndex: p.identity.email ? pii.blindIndex('email', p.identity.email) : undefined,
    externalId: p.externalId,
  };
}

/** A stored participant that already holds one of the keys looked up. */
export interface RegisteredParticipant {
  participant_id: string;
  bulk_upload_id: string | null;
  row_number: number | null;
  phone_index: Buffer | null;
  email_index: Buffer | null;
  external_id: string | null;
}

/** Which stored participant holds each key (maps keyed by hex blind index / external id). */
export interface RegisteredKeys {
  phone: Map<string, RegisteredParticipant>;
  email: Map<string, RegisteredParticipant>;
  externalId: Map<string, RegisteredParticipant>;
}

/**
 * Finds the participants of `aggregatorId` that already hold any of `keys` (phone and e-mail
 * across all domains, external id within `domain`), in one query.
 */
export async function findRegistered(db: Queryable, aggregatorId: string, domain: string, keys: ParticipantKeys[]): Promise<RegisteredKeys> {
  const phones = keys.flatMap((k) => (k.phoneIndex ? [k.phoneIndex] : []));
  const emails = keys.flatMap((k) => (k.emailIndex ? [k.emailIndex] : []));
  const externalIds = keys.flatMap((k) => (k.externalId !== undefined ? [k.externalId] : []));
  const found: RegisteredKeys = { phone: new Map(), email: new Map(), externalId: new Map() };
  if (!phones.length && !emails.length && !externalIds.length) return found;
  const { rows } = await db.query<RegisteredParticipant>(
    `SELECT participant_id, bulk_upload_id, row_number, phone_index, email_index, external_id
       FROM aggregator.participants
      WHERE aggregator_id = $1
        AND (phone_index = ANY($2::bytea[]) OR email_index = ANY($3::bytea[])
             OR (domain = $4 AND external_id = ANY($5::text[])))`,
    [aggregatorId, phones, emails, domain, externalIds]);
  const phoneSet = new Set(phones.map((b) => b.toString('hex')));
  const emailSet = new Set(emails.map((b) => b.toString('hex')));
  const externalSet = new Set(externalIds);
  for (const r of rows) {
    const phone = r.phone_index?.toString('hex');
    const email = r.email_index?.toString('hex');
    if (phone && phoneSet.has(phone)) found.phone.set(phone, r);
    if (email && emailSet.has(email)) found.email.set(email, r);
    if (r.external_id !== null && externalSet.has(r.external_id)) found.externalId.set(r.external_id, r);
  }
  return found;
}

/** A participant ready to be stored. */
export interface NewParticipant {
  participantId: string;
  participant: CoercedParticipant;
  keys: ParticipantKeys;
  /**
   * Set when the participant is stored in the transaction that pushes it to signals: the status
   * signals is expected to answer (its go-live rules, `goLiveStatus`); the push's actual answer is
   * recorded with `recordLifecycle` before the transaction commits. Unset: not pushed yet.
   */
  lifecycleStatus?: LifecycleStatus;
  bulkUploadId?: string;
  rowNumber?: number;
}

/**
 * Inserts `participants` of one aggregator and domain in one statement, inside the caller's
 * transaction: identity fields encrypted with `pii`, the rest of the profile as JSON, the content
 * hash of the profile (so that an upsert finds an unchanged row by it), `pushed_at` now when a
 * lifecycle status is given. A row whose phone, e-mail or external id is taken
 * meanwhile (the unique indexes are the final guard) is left out.
 * @returns the ids actually inserted.
 */
export async function insertParticipants(
  client: PoolClient,
  pii: PiiCrypto,
  scope: { aggregatorId: string; orgId: string; domain: Domain },
  participants: NewParticipant[],
): Promise<Set<string>> {
  if (participants.length === 0) return new Set();
  const identityFields = fieldNames(scope.domain, 'identity');
  const enc = (v: string | undefined) => (v === undefined ? null : pii.encrypt(v));
  const rows = participants.map(({ participantId, participant: p, keys, lifecycleStatus, bulkUploadId, rowNumber }) => ({
    participant_id: participantId,
    name_encrypted: enc(p.identity.name),
    phone_encrypted: enc(p.identity.phone),
    email_encrypted: enc(p.identity.email),
    phone_index: keys.phoneIndex?.toString('hex') ?? null,
    email_index: keys.emailIndex?.toString('hex') ?? null,
    external_id: keys.externalId ?? null,
    profile: without(p.profile, identityFields),
    locations: p.locations,
    content_hash: contentHash(pii, scope.domain, p.profile).toString('hex'),
    lifecycle_status: lifecycleStatus ?? null,
    bulk_upload_id: bulkUploadId ?? null,
    row_number: rowNumber ?? null,
  }));
  const { rows: inserted } = await client.query<{ participant_id: string }>(
    `INSERT INTO aggregator.participants (participant_id, aggregator_id, org_id, domain, item_type, name_encrypted,
       phone_encrypted, email_encrypted, phone_index, email_index, external_id, profile, locations, content_hash, lifecycle_status,
       pushed_at, bulk_upload_id, row_number)
     SELECT x.participant_id, $2, $3, $4, $5, x.name_encrypted, x.phone_encrypted, x.email_encrypted,
            decode(x.phone_index, 'hex'), decode(x.email_index, 'hex'), x.external_id, x.profile, x.locations,
            decode(x.content_hash, 'hex'), x.lifecycle_status, CASE WHEN x.lifecycle_status IS NOT NULL THEN now() END,
            x.bulk_upload_id, x.row_number
       FROM json_to_recordset($1::json) AS x(participant_id uuid, name_encrypted text, phone_encrypted text,
         email_encrypted text, phone_index text, email_index text, external_id text, profile jsonb, locations jsonb,
         content_hash text, lifecycle_status text, bulk_upload_id uuid, row_number integer)
     ON CONFLICT DO NOTHING
     RETURNING participant_id`,
    [JSON.stringify(rows), scope.aggregatorId, scope.orgId, scope.domain.name, scope.domain.itemType]);
  return new Set(inserted.map((r) => r.participant_id));
}

/** A stored participant changed by an upload row (lib/aggregator/bulk/upsert.ts `RowPlan` update). */
export interface ParticipantUpdate {
  participantId: string;
  participant: CoercedParticipant;
  keys: ParticipantKeys;
  contentHash: Buffer;
  /** Made live again: the pause of a sync upload is lifted (the status itself is recorded from signals' answer). */
  resume: boolean;
  /** The content hash the participant held when it was compared (null: stored before hashes were kept). */
  expectedHash: Buffer | null;
  /**
   * Stored ciphertexts of identity values the update leaves as they are, written back unchanged
   * instead of encrypting the same value again (an AES-GCM encryption per row and field).
   */
  kept?: Partial<Record<'name' | 'phone' | 'email', string | null>>;
}

/** A participant changed by someone else since an update compared it: the caller's transaction must roll back and try again. */
export class ParticipantChangedError extends Error {
  name = 'ParticipantChangedError';
}

/**
 * Writes `updates` of one aggregator's participants in one statement, in the caller's
 * transaction: identity re-encrypted with `pii` (but for the `kept` ciphertexts), blind indexes, profile, locations, content hash;
 * `paused_by_upload_id` cleared when resumed. Optimistic: each is written only if the participant
 * still holds `expectedHash` (the content it was compared with). A participant another
 * transaction changed meanwhile (it waits for that one to end, then finds the hash changed) is
 * not written, and the whole call throws, so that the caller's transaction rolls back and its
 * rows are compared again with what is stored now — never a stale value written over a newer one,
 * and no row lock taken for reading (a lock is a write of every row read). The caller has checked
 * that no other participant holds their keys; a concurrent taker makes the statement fail
 * (unique index), and the caller's transaction with it.
 * @throws ParticipantChangedError
 */
export async function updateParticipants(client: PoolClient, pii: PiiCrypto, scope: { aggregatorId: string; domain: Domain }, updates: ParticipantUpdate[]): Promise<void> {
  if (updates.length === 0) return;
  const identityFields = fieldNames(scope.domain, 'identity');
  const enc = (v: string | undefined) => (v === undefined ? null : pii.encrypt(v));
  const written = await writeParticipants(client, scope.aggregatorId, updates.map(({ participantId, participant: p, keys, contentHash: hash, resume, expectedHash, kept = {} }) => ({
    participant_id: participantId,
    name_encrypted: kept.name !== undefined ? kept.name : enc(p.identity.name),
    phone_encrypted: kept.phone !== undefined ? kept.phone : enc(p.identity.phone),
    email_encrypted: kept.email !== undefined ? kept.email : enc(p.identity.email),
    phone_index: keys.phoneIndex?.toString('hex') ?? null,
    email_index: keys.emailIndex?.toString('hex') ?? null,
    external_id: keys.externalId ?? null,
    profile: without(p.profile, identityFields),
    locations: p.locations,
    content_hash: hash.toString('hex'),
    resume,
    expected_hash: expectedHash?.toString('hex') ?? null,
  })));
  if (written !== updates.length) {
    throw new ParticipantChangedError(`${updates.length - written} of ${updates.length} participants changed since they were compared; the rows are compared again`);
  }
}

/** The columns of a participant an update writes, as stored (ciphertexts, hex of the blind indexes and hash). */
export interface StoredColumns {
  participant_id: string;
  name_encrypted: string | null;
  phone_encrypted: string | null;
  email_encrypted: string | null;
  phone_index: string | null;
  email_index: string | null;
  external_id: string | null;
  profile: Record<string, unknown>;
  locations: unknown[];
  content_hash: string | null;
  /** Clears paused_by_upload_id. */
  resume: boolean;
  /** When given (hex, or null for none), the row is written only if it still holds this content hash. */
  expected_hash?: string | null;
}

/**
 * Writes participants' columns (`rows`, as stored: an update, or an update that signals refused
 * undone by writing back what was read), in the caller's transaction. A row with `expected_hash`
 * is written only if the participant still holds it.
 * @returns how many rows were written.
 */
export async function writeParticipants(client: PoolClient, aggregatorId: string, rows: StoredColumns[]): Promise<number> {
  if (rows.length === 0) return 0;
  const { rowCount } = await client.query(
    `UPDATE aggregator.participants AS p SET name_encrypted = x.name_encrypted, phone_encrypted = x.phone_encrypted,
            email_encrypted = x.email_encrypted, phone_index = decode(x.phone_index, 'hex'), email_index = decode(x.email_index, 'hex'),
            external_id = x.external_id, profile = x.profile, locations = x.locations, content_hash = decode(x.content_hash, 'hex'),
            paused_by_upload_id = CASE WHEN x.resume THEN NULL ELSE p.paused_by_upload_id END, updated_at = now()
       FROM json_to_recordset($1::json) AS x(participant_id uuid, name_encrypted text, phone_encrypted text, email_encrypted text,
         phone_index text, email_index text, external_id text, profile jsonb, locations jsonb, content_hash text, resume boolean,
         expected_hash text)
      WHERE p.participant_id = x.participant_id AND p.aggregator_id = $2
        AND (NOT $3 OR p.content_hash IS NOT DISTINCT FROM decode(x.expected_hash, 'hex'))`,
    [JSON.stringify(rows), aggregatorId, rows.some((r) => r.expected_hash !== undefined)]);
  return rowCount ?? 0;
}

/** Records the content hash of participants stored before content hashes were kept (an unchanged row's only write). */
export async function backfillContentHashes(client: PoolClient, hashes: { participantId: string; hash: Buffer }[]): Promise<void> {
  if (hashes.length === 0) return;
  await client.query(
    `UPDATE aggregator.participants AS p SET content_hash = x.hash FROM unnest($1::uuid[], $2::bytea[]) AS x(id, hash)
      WHERE p.participant_id = x.id AND p.content_hash IS NULL`,
    [hashes.map((h) => h.participantId), hashes.map((h) => h.hash)]);
}

/** One entry of a participant's change history. */
export interface ParticipantChange {
  participantId: string;
  uploadId: string;
  rowNumber: number | null;
  kind: 'updated' | 'paused' | 'resumed';
  fields: string[];
}

/** Appends to the change history (`aggregator.participant_changes`) in one statement. */
export async function recordChanges(client: PoolClient, aggregatorId: string, changes: ParticipantChange[]): Promise<void> {
  if (changes.length === 0) return;
  await client.query(
    `INSERT INTO aggregator.participant_changes (participant_id, aggregator_id, upload_id, row_number, kind, changed_fields)
     SELECT x.participant_id, $2, x.upload_id, x.row_number, x.kind, x.fields
       FROM json_to_recordset($1::json) AS x(participant_id uuid, upload_id uuid, row_number integer, kind text, fields text[])`,
    [JSON.stringify(changes.map((c) => ({ participant_id: c.participantId, upload_id: c.uploadId, row_number: c.rowNumber, kind: c.kind, fields: c.fields }))), aggregatorId]);
}

/** Names of the domain's fields with the `private` or `identity` annotation; computed once per domain (run per row in bulk onboarding). */
const fieldNameSets = new WeakMap<Domain, Record<'private' | 'identity', Set<string>>>();
function fieldNames(domain: Domain, kind: 'private' | 'identity'): Set<string> {
  let sets = fieldNameSets.get(domain);
  if (!sets) {
    sets = { private: new Set(domain.fields.filter((f) => f.private).map((f) => f.name)), identity: new Set(domain.fields.filter((f) => f.identity).map((f) => f.name)) };
    fieldNameSets.set(domain, sets);
  }
  return sets[kind];
}

/** A copy of `record` without the keys in `left` (a loop: no entry arrays per row, as Object.entries would make). */
function without(record: Record<string, unknown>, left: Set<string>): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const key in record) if (!left.has(key)) kept[key] = record[key];
  return kept;
}

/**
 * Records the lifecycle status signals answered for pushed participants (e.g. an item paused in
 * signals keeps `paused` when pushed again), marking them pushed now.
 */
export async function recordLifecycle(client: PoolClient, pushed: { participantId: string; lifecycleStatus: LifecycleStatus }[]): Promise<void> {
  if (pushed.length === 0) return;
  await client.query(
    `UPDATE aggregator.participants p SET lifecycle_status = x.status, pushed_at = now(), updated_at = now()
       FROM unnest($1::uuid[], $2::text[]) AS x(id, status)
      WHERE p.participant_id = x.id`,
    [pushed.map((p) => p.participantId), pushed.map((p) => p.lifecycleStatus)]);
}

/** Deletes participants (of a transaction whose push signals refused). */
export async function deleteParticipants(client: PoolClient, participantIds: string[]): Promise<void> {
  if (participantIds.length === 0) return;
  await client.query('DELETE FROM aggregator.participants WHERE participant_id = ANY($1::uuid[])', [participantIds]);
}

/**
 * The item signals holds for a participant: `item_state` is the profile without the domain's
 * private fields (`x-private`, e.g. phone and e-mail), `item_locations` the coerced locations,
 * `item_schema_url` the domain's schema `$id`, `item_instance_url` the aggregator service that
 * holds the full participant.
 */
export function participantItem(
  network: Network,
  domain: Domain,
  participantId: string,
  participant: CoercedParticipant,
  origin: { createdBy: string; instanceUrl: string | null },
): ItemInput {
  return {
    item_network: network.id,
    item_domain: domain.name,
    item_type: domain.itemType,
    item_id: participantId,
    item_state: without(participant.profile, fieldNames(domain, 'private')),
    item_locations: participant.locations,
    item_instance_url: origin.instanceUrl,
    item_schema_url: domain.schemaId,
    created_by: origin.createdBy,
  };
}
