/**
 * Keeping a list current by upload (issue 30; docs/decisions.md "Bulk onboarding III"): how a row
 * of an `upsert` or `update` upload finds the participant it stands for, whether it changes it, and
 * what changes. Shared by staging (unchanged rows are settled there, by content hash), the chunks
 * (which apply the changes, each only if its participant still holds the content it was compared
 * with) and the dry run (which reports them), so that all three give a row the same outcome.
 *
 * - A row's participant is found by the domain's key: its `x-external-id` field where it has one,
 *   else the phone blind index, else the e-mail's — among the aggregator's participants of the
 *   upload's domain.
 * - The fields a row sets are the fields its mapping maps: a mapped column left empty clears its
 *   field, a field the file has no column for keeps its stored value.
 * - Unchanged: the stored content hash equals the row's, or no field differs. Nothing is written.
 * - A row that would take a phone, e-mail or external id another participant holds fails, naming
 *   that participant (and its row, when an upload made it).
 */
import type { PiiCrypto } from '../../platform/crypto.ts';
import { analyzeIfChanged, type Queryable } from '../../platform/db.ts';
import type { LifecycleStatus } from '../../network/items.ts';
import type { Domain, FieldInfo } from '../../network/config.ts';
import { contentHash, findRegistered, type ParticipantKeys, type RegisteredParticipant } from '../participants.ts';
import type { ColumnMapping } from './header-match.ts';
import { participantOf, profileErrors, type CoercedParticipant, type FieldError } from './row-coercion.ts';

export const UPLOAD_MODES = ['create', 'upsert', 'update'] as const;
/** create: new participants only (an existing one is skipped); upsert: create or update; update: existing ones only. */
export type UploadMode = (typeof UPLOAD_MODES)[number];

/** The outcome of a row of any upload; `passed` (the spec's count) is created + updated + unchanged. */
export type RowOutcomeKind = 'created' | 'updated' | 'unchanged' | 'failed' | 'skipped';

/** The fields a mapping sets (its mapped columns and field specs). */
export function mappedFields(mapping: ColumnMapping): Set<string> {
  return new Set([...mapping.columns.map((c) => c.field), ...(mapping.derived ?? []).map((d) => d.field)]);
}

/** A participant as an upsert reads it; the `full` columns only when asked for. */
export interface StoredParticipant {
  participant_id: string;
  external_id: string | null;
  phone_index: Buffer | null;
  email_index: Buffer | null;
  content_hash: Buffer | null;
  lifecycle_status: LifecycleStatus | null;
  paused_by_upload_id: string | null;
  name_encrypted?: string | null;
  phone_encrypted?: string | null;
  email_encrypted?: string | null;
  /** The profile without its identity fields (those are the encrypted columns). */
  profile?: Record<string, unknown>;
  locations?: unknown[];
}

/**
 * Refreshes the planner's statistics of aggregator.participants when the table changed by more
 * than a tenth since they were taken (lib/platform/db.ts `analyzeIfChanged`): an upsert looks up
 * every row's participant by key, 1000 keys a query, and right after a large upload the stale
 * statistics plan that lookup on the wrong index — measured at 100,000 participants: 211 ms a
 * query, against 0.6 ms once analyzed. Called before an upsert is staged or dry-run, where `wait`
 * (the default) waits for a concurrent analyze (autovacuum's) rather than go on with the stale
 * ones; and when an upload completes, without waiting, so that the next upload (and the dashboard)
 * finds them fresh instead of paying for the analyze at its start (~1.8 s after the 266,978-row file).
 * `changed`: the rows the caller's upload wrote (see `analyzeIfChanged`).
 * @returns whether it analyzed. @throws Error from the database.
 */
export async function refreshParticipantStatistics(db: Queryable, { wait = true, changed }: { wait?: boolean; changed?: number } = {}): Promise<boolean> {
  return analyzeIfChanged(db, 'aggregator.participants', { minRows: 1000, share: 0.1, skipLocked: !wait, changed });
}

/** How a domain's rows find their participant: by external id where the domain has one, else by phone, then e-mail. */
export function matchKey(domain: Domain): 'external_id' | 'contact' {
  return domain.fields.some((f) => f.externalId) ? 'external_id' : 'contact';
}

const BASE_COLUMNS = ['participant_id', 'external_id', 'phone_index', 'email_index', 'content_hash', 'lifecycle_status', 'paused_by_upload_id'];
const FULL_COLUMNS = [...BASE_COLUMNS, 'name_encrypted', 'phone_encrypted', 'email_encrypted', 'profile', 'locations'];

/**
 * The stored participant of `aggregatorId` and `domain` each of `keys` names (see `matchKey`), in
 * one query; undefined where none. `full` reads the encrypted identity and the profile too.
 */
export async function findMatches(db: Queryable, aggregatorId: string, domain: Domain, keys: ParticipantKeys[],
  options: { full?: boolean } = {}): Promise<(StoredParticipant | undefined)[]> {
  // `= ANY`: one index probe per key once the planner has statistics of the table as it is
  // (`refreshParticipantStatistics`; without, a plan on the wrong index reads the whole domain).
  const columns = (options.full ? FULL_COLUMNS : BASE_COLUMNS).join(', ');
  if (matchKey(domain) === 'external_id') {
    const ids = keys.flatMap((k) => (k.externalId !== undefined ? [k.externalId] : []));
    if (!ids.length) return keys.map(() => undefined);
    const { rows } = await db.query<StoredParticipant>(
      `SELECT ${columns} FROM aggregator.participants
        WHERE aggregator_id = $1 AND domain = $2 AND external_id = ANY($3::text[])`, [aggregatorId, domain.name, ids]);
    const byId = new Map(rows.map((r) => [r.external_id!, r]));
    return keys.map((k) => (k.externalId === undefined ? undefined : byId.get(k.externalId)));
  }
  const phones = keys.flatMap((k) => (k.phoneIndex ? [k.phoneIndex] : []));
  const emails = keys.flatMap((k) => (k.emailIndex ? [k.emailIndex] : []));
  if (!phones.length && !emails.length) return keys.map(() => undefined);
  const { rows } = await db.query<StoredParticipant>(
    `SELECT ${columns} FROM aggregator.participants
      WHERE aggregator_id = $1 AND domain = $2 AND (phone_index = ANY($3::bytea[]) OR email_index = ANY($4::bytea[]))`,
    [aggregatorId, domain.name, phones, emails]);
  const byPhone = new Map<string, StoredParticipant>();
  const byEmail = new Map<string, StoredParticipant>();
  for (const r of rows) {
    if (r.phone_index) byPhone.set(r.phone_index.toString('hex'), r);
    if (r.email_index) byEmail.set(r.email_index.toString('hex'), r);
  }
  return keys.map((k) => (k.phoneIndex && byPhone.get(k.phoneIndex.toString('hex'))) || (k.emailIndex && byEmail.get(k.emailIndex.toString('hex'))) || undefined);
}

/** The whole stored profile of a participant read with `full`: its profile plus the decrypted identity fields. */
export function storedProfile(pii: PiiCrypto, domain: Domain, stored: StoredParticipant): Record<string, unknown> {
  const profile: Record<string, unknown> = { ...stored.profile };
  const encrypted = { name: stored.name_encrypted, phone: stored.phone_encrypted, email: stored.email_encrypted };
  for (const field of domain.fields) {
    const value = field.identity && encrypted[field.identity];
    if (value) profile[field.name] = pii.decrypt(value);
  }
  return profile;
}

/** One field a row changes: its value before and after (undefined = absent). */
export interface FieldChange {
  field: string;
  before: unknown;
  after: unknown;
}

const same = (a: unknown, b: unknown) => a === b || (a !== undefined && b !== undefined && JSON.stringify(a) === JSON.stringify(b));

/** The fields of `domain` whose values differ between `before` and `after`, in schema order. */
export function changedFields(domain: Domain, before: Record<string, unknown>, after: Record<string, unknown>): FieldChange[] {
  const changes: FieldChange[] = [];
  for (const { name } of domain.fields) {
    if (!same(before[name], after[name])) changes.push({ field: name, before: before[name], after: after[name] });
  }
  return changes;
}

/**
 * `value` of an identity field as a dry run shows it: enough to recognise, not to read (a name's
 * first letter, a phone's last four digits, an e-mail's first letter and domain). Other fields
 * are shown as they are.
 */
export function shownValue(field: FieldInfo | undefined, value: unknown): unknown {
  if (value === undefined || value === null || !field?.identity) return value ?? null;
  const text = String(value);
  if (field.identity === 'phone') return `${'•'.repeat(Math.max(0, text.length - 4))}${text.slice(-4)}`;
  if (field.identity === 'email') {
    const at = text.lastIndexOf('@');
    return at > 0 ? `${text[0]}•••${text.slice(at)}` : '•••';
  }
  return `${[...text][0] ?? ''}•••`;
}

/** What a row of an upsert or update upload will do to its participant. */
export type RowPlan =
  | { kind: 'create' }
  /** `backfill`: the hash of a participant stored before content hashes were kept, to record. */
  | { kind: 'unchanged'; stored: StoredParticipant; backfill?: Buffer }
  | {
    kind: 'update';
    stored: StoredParticipant;
    /** The participant as it will be: the stored profile with the row's mapped fields. */
    participant: CoercedParticipant;
    keys: ParticipantKeys;
    hash: Buffer;
    changes: FieldChange[];
    /** Paused by a sync upload and held again by this file: made live (or draft) again. */
    resume: boolean;
  }
  | { kind: 'failed' | 'skipped'; errors: FieldError[] };

/** A row that coerced, with its keys and (when it may be unchanged) its content hash. */
export interface KeyedRow {
  participant: CoercedParticipant;
  keys: ParticipantKeys;
  hash?: Buffer;
}

/** The upload a plan is made for. */
export interface PlanScope {
  aggregatorId: string;
  uploadId: string;
  domain: Domain;
  mode: Exclude<UploadMode, 'create'>;
  /** The fields the upload's mapping sets (`mappedFields`). */
  mapped: Set<string>;
}

/** A participant paused by a sync upload, to be made live again by a row that holds it. */
export const resumable = (stored: StoredParticipant) => stored.lifecycle_status === 'paused' && stored.paused_by_upload_id !== null;

/**
 * The plan of each of `rows` (see the module comment), reading the participants they name in
 * one query, and the holders of the keys they would take (new rows' keys, and the keys an update
 * changes) in one more. No row lock is taken: an update is written only if its participant still
 * holds the content hash it was compared with (`updateParticipants`).
 * @throws errors of the database only
 */
export async function planRows(db: Queryable, pii: PiiCrypto, scope: PlanScope, rows: KeyedRow[]): Promise<RowPlan[]> {
  const { domain, mapped } = scope;
  const matches = await findMatches(db, scope.aggregatorId, domain, rows.map((r) => r.keys), { full: true });
  const plans: RowPlan[] = rows.map((row, i) => {
    const stored = matches[i];
    if (!stored) {
      return scope.mode === 'update'
        ? { kind: 'skipped', errors: [notRegistered(domain, row.keys)] }
        : { kind: 'create' };
    }
    // Same hash, same profile: nothing to decrypt or compare.
    if (row.hash && stored.content_hash?.equals(row.hash) && !resumable(stored)) return { kind: 'unchanged', stored };
    const before = storedProfile(pii, domain, stored);
    const after = { ...before };
    for (const field of mapped) {
      const value = row.participant.profile[field];
      if (value === undefined) delete after[field];
      else after[field] = value;
    }
    const changes = changedFields(domain, before, after);
    const resume = resumable(stored);
    if (!changes.length && !resume) return { kind: 'unchanged', stored, backfill: stored.content_hash ? undefined : contentHash(pii, domain, before) };
    const errors = changes.length ? profileErrors(domain, after) : null;
    if (errors) return { kind: 'failed', errors };
    const participant = participantOf(domain, after);
    return {
      kind: 'update', stored, participant, changes, resume, hash: contentHash(pii, domain, after), keys: keysOf(pii, participant),
    };
  });
  await refuseTakenKeys(db, scope, rows, plans);
  return plans;
}

/** Blind indexes and external id of `participant` (as `participantKeys` makes them). */
function keysOf(pii: PiiCrypto, participant: CoercedParticipant): ParticipantKeys {
  return {
    phoneIndex: participant.identity.phone ? pii.blindIndex('phone', participant.identity.phone) : undefined,
    emailIndex: participant.identity.email ? pii.blindIndex('email', participant.identity.email) : undefined,
    externalId: participant.externalId,
  };
}

/** The reason an `update` upload skips a row naming no participant. */
function notRegistered(domain: Domain, keys: ParticipantKeys): FieldError {
  const field = (k: 'externalId' | 'identity', which?: string) => domain.fields.find((f) => (k === 'externalId' ? f.externalId : f.identity === which))?.name;
  if (matchKey(domain) === 'external_id') {
    const name = field('externalId') ?? 'external_id';
    return { field: name, message: keys.externalId === undefined
      ? `${name} is empty: an update upload changes existing participants, found by ${name}`
      : `no participant with ${name} "${keys.externalId}" is registered with this aggregator: an update upload does not create participants` };
  }
  const name = (keys.phoneIndex ? field('identity', 'phone') : field('identity', 'email')) ?? 'phone';
  return { field: name, message: `no participant with this ${name} is registered with this aggregator: an update upload does not create participants` };
}

/**
 * Fails the created and updated rows whose phone, e-mail or external id another participant of
 * the aggregator holds (phone and e-mail across its domains, external id within the domain).
 */
async function refuseTakenKeys(db: Queryable, scope: PlanScope, rows: KeyedRow[], plans: RowPlan[]): Promise<void> {
  const taking = plans.flatMap((plan, i): { i: number; keys: ParticipantKeys; self?: string }[] => {
    if (plan.kind === 'create') return [{ i, keys: rows[i].keys }];
    if (plan.kind !== 'update') return [];
    // Only the keys the update changes can be another's: most updates change none, and are not looked up.
    const { keys, stored } = plan;
    const changed: ParticipantKeys = {
      phoneIndex: keys.phoneIndex && !stored.phone_index?.equals(keys.phoneIndex) ? keys.phoneIndex : undefined,
      emailIndex: keys.emailIndex && !stored.email_index?.equals(keys.emailIndex) ? keys.emailIndex : undefined,
      externalId: keys.externalId !== undefined && keys.externalId !== stored.external_id ? keys.externalId : undefined,
    };
    return changed.phoneIndex || changed.emailIndex || changed.externalId !== undefined ? [{ i, keys: changed, self: stored.participant_id }] : [];
  });
  if (!taking.length) return;
  const held = await findRegistered(db, scope.aggregatorId, scope.domain.name, taking.map((t) => t.keys));
  const fields = {
    phone: scope.domain.fields.find((f) => f.identity === 'phone')?.name ?? 'phone',
    email: scope.domain.fields.find((f) => f.identity === 'email')?.name ?? 'email',
    externalId: scope.domain.fields.find((f) => f.externalId)?.name ?? 'external_id',
  };
  for (const { i, keys, self } of taking) {
    const errors: FieldError[] = [];
    const check = (field: string, holder: RegisteredParticipant | undefined) => {
      if (holder && holder.participant_id !== self) errors.push({ field, message: `${field} is already held by ${holderName(scope.uploadId, holder)}` });
    };
    check(fields.phone, keys.phoneIndex && held.phone.get(keys.phoneIndex.toString('hex')));
    check(fields.email, keys.emailIndex && held.email.get(keys.emailIndex.toString('hex')));
    check(fields.externalId, keys.externalId === undefined ? undefined : held.externalId.get(keys.externalId));
    if (errors.length) plans[i] = { kind: 'failed', errors };
  }
}

/** How a row's reason names another participant. */
export function holderName(uploadId: string, holder: Pick<RegisteredParticipant, 'participant_id' | 'bulk_upload_id' | 'row_number'>): string {
  if (holder.bulk_upload_id === uploadId && holder.row_number !== null) return `row ${holder.row_number} of this file`;
  const origin = holder.bulk_upload_id && holder.row_number !== null ? ` (row ${holder.row_number} of bulk upload ${holder.bulk_upload_id})` : '';
  return `participant ${holder.participant_id}${origin}`;
}

/**
 * The live and draft participants of `aggregatorId` and `domain` whose ids are not in `held`: those
 * a sync upload whose rows named `held` leaves out, and pauses. Read in pages of 10,000 ids (the
 * domain may hold hundreds of thousands).
 */
export async function participantsNotHeld(db: Queryable, aggregatorId: string, domain: Domain, held: Set<string>): Promise<string[]> {
  const ids: string[] = [];
  for (let after = '00000000-0000-0000-0000-000000000000'; ;) {
    const { rows } = await db.query<{ participant_id: string }>(
      `SELECT participant_id FROM aggregator.participants
        WHERE aggregator_id = $1 AND domain = $2 AND lifecycle_status IN ('live', 'draft') AND participant_id > $3
        ORDER BY participant_id LIMIT 10000`, [aggregatorId, domain.name, after]);
    for (const { participant_id: id } of rows) if (!held.has(id)) ids.push(id);
    if (rows.length < 10000) return ids;
    after = rows[rows.length - 1].participant_id;
  }
}
