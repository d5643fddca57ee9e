/**
 * Items of the signals service: the record shape of the spec ("Item record"), input validation
 * against the network, and the batched upsert that decides lifecycle status by the go-live rules
 * and enqueues the search-indexing job for every stored change in the same transaction.
 */
import { z } from 'zod';
import type { PoolClient, Queryable } from '../platform/db.ts';
import { enqueue, JOB_PRIORITY } from '../platform/jobs.ts';
import { createAjv, goLiveStatus, type Domain, type Network } from './config.ts';
import { searchText } from './search-text.ts';
import type { ValidateFunction } from 'ajv';

export const LIFECYCLE_STATUSES = ['draft', 'live', 'paused', 'retired'] as const;
export type LifecycleStatus = (typeof LIFECYCLE_STATUSES)[number];

/** Task that (re)indexes items for search; payload `IndexItemsPayload`. */
export const SEARCH_INDEX_TASK = 'search-index-items';
/** Indexing of batches yields to onboarding and other interactive work. */
export const SEARCH_INDEX_PRIORITY = JOB_PRIORITY.indexing;
/** Items a search-index job may hold and still be one person's (searchIndexPriority). */
const PERSON_ITEMS_MAX = 10;

/**
 * The priority of a search-index job of `items` items: a few (a registration, an API write) are
 * indexed ahead of an upload's queued chunks and their indexing (JOB_PRIORITY.person), where in a
 * short soak run a registration waited ~70 s behind them (docs/decisions.md, issue 32); batches
 * at SEARCH_INDEX_PRIORITY.
 */
export function searchIndexPriority(items: number): number {
  return items <= PERSON_ITEMS_MAX ? JOB_PRIORITY.person : SEARCH_INDEX_PRIORITY;
}

export interface ItemLocation {
  lat: number;
  lng: number;
  label?: string;
}

/** An item as stored and returned (spec "Item record"); times are ISO-8601 UTC. */
export interface ItemRecord {
  item_network: string;
  item_domain: string;
  item_type: string;
  item_id: string;
  item_state: Record<string, unknown>;
  item_locations: ItemLocation[];
  item_instance_url: string | null;
  item_schema_url: string | null;
  created_by: string | null;
  created_at: string;
  updated_at: string;
  lifecycle_status: LifecycleStatus;
}

/** Payload of SEARCH_INDEX_TASK: snapshots of the items as stored by this change. */
export interface IndexItemsPayload {
  items: ItemRecord[];
}

export const itemLocationSchema = z.object({
  lat: z.number().min(-90).max(90),
  lng: z.number().min(-180).max(180),
  label: z.string().max(200).optional(),
});

/** Body of an item upsert (the four identity values plus content). */
export const itemInputSchema = z.object({
  item_network: z.string().min(1),
  item_domain: z.string().min(1),
  item_type: z.string().min(1),
  // Lower-cased (RFC 9562 §4: UUIDs compare case-insensitively, and PostgreSQL prints them lower
  // case): the batch's repeat check and its matching of returned rows compare strings.
  item_id: z.uuid().overwrite((id) => id.toLowerCase()),
  item_state: z.record(z.string(), z.unknown()),
  item_locations: z.array(itemLocationSchema).max(50).default([]),
  item_instance_url: z.url().nullable().optional(),
  item_schema_url: z.string().min(1).nullable().optional(),
  created_by: z.string().min(1).max(200).nullable().optional(),
});
export type ItemInput = z.infer<typeof itemInputSchema>;

/** An item record as signals stores and sends it (spec "Item record", with lifecycle_status and ISO times). */
export const itemRecordSchema = itemInputSchema.extend({
  item_locations: z.array(itemLocationSchema),
  item_instance_url: z.string().nullable(),
  item_schema_url: z.string().nullable(),
  created_by: z.string().nullable(),
  created_at: z.iso.datetime({ offset: true }),
  updated_at: z.iso.datetime({ offset: true }),
  lifecycle_status: z.enum(LIFECYCLE_STATUSES),
});

/**
 * Validators of the public part of each domain's participant schema: the schema without its
 * private fields, which therefore may never reach signals (additionalProperties stays as declared).
 */
export function createItemStateValidators(network: Network): Map<string, ValidateFunction> {
  const ajv = createAjv();
  const validators = new Map<string, ValidateFunction>();
  for (const domain of network.domains.values()) {
    const privateFields = new Set(domain.fields.filter((f) => f.private).map((f) => f.name));
    const schema = domain.schema as Record<string, any>;
    const properties = Object.fromEntries(Object.entries<unknown>(schema.properties ?? {}).filter(([k]) => !privateFields.has(k)));
    validators.set(domain.name, ajv.compile({
      ...schema,
      $id: `${domain.schemaId}:public`,
      properties,
      required: (schema.required ?? []).filter((f: string) => !privateFields.has(f)),
    }));
  }
  return validators;
}

/** Why an input item cannot be stored, or null when it can. */
export function itemInputProblem(network: Network, validators: Map<string, ValidateFunction>, item: ItemInput): string | null {
  if (item.item_network !== network.id) return `item_network must be ${network.id}`;
  // Organisations pushed by the aggregator service (network `organisation` block, issue 8).
  if (network.organisation && item.item_domain === network.organisation.domain) {
    if (item.item_type !== network.organisation.itemType) return `item_type of ${item.item_domain} items must be ${network.organisation.itemType}`;
    const valid = network.organisation.validate(item.item_state);
    return valid ? null : `item_state: ${network.organisation.validate.errors!.map((e) => `${e.instancePath || '(root)'} ${e.message}`).join('; ')}`;
  }
  const domain: Domain | undefined = network.domains.get(item.item_domain);
  if (!domain) return `item_domain must be one of ${[...network.domains.keys()].join(', ')}`;
  if (item.item_type !== domain.itemType) return `item_type of ${domain.name} items must be ${domain.itemType}`;
  const validate = validators.get(domain.name)!;
  if (!validate(item.item_state)) {
    return `item_state: ${validate.errors!.map((e) => `${e.instancePath || '(root)'} ${e.message}`).join('; ')}`;
  }
  return null;
}

export type UpsertOutcome = 'created' | 'updated' | 'unchanged' | 'conflict';

export interface UpsertResult {
  item_id: string;
  outcome: UpsertOutcome;
  lifecycle_status?: LifecycleStatus;
  /** For `conflict`: the item id exists with other identity values. */
  message?: string;
}

/** Select list of an ItemRecord from signals.items (times as ISO-8601 UTC strings). */
export const RECORD_COLUMNS = `item_network, item_domain, item_type, item_id, item_state, item_locations, item_instance_url,
  item_schema_url, created_by, lifecycle_status,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at`;

/**
 * Inserts or updates `items` (already validated, distinct ids) inside the caller's transaction —
 * the stored ones by one UPDATE, the others by one INSERT — and enqueues one indexing job holding
 * every created or changed item.
 *
 * Lifecycle: a new item is `live` when the go-live rules are met, else `draft`; an update
 * recomputes that, except that `paused` and `retired` (set explicitly) are kept. An update that
 * changes nothing is `unchanged` and touches nothing. An id stored with other identity values is
 * a `conflict` and left alone.
 */
export async function upsertItems(client: PoolClient, network: Network, items: ItemInput[]): Promise<UpsertResult[]> {
  if (items.length === 0) return [];
  // Rows and snapshots are built with their properties named, not by spread or rest copies: this runs
  // for every pushed item, and the copies were ~40 % of this function's Node CPU (issue 17).
  const rows = items.map((item) => {
    // Organisation items (the network's `organisation` block) have no go-live rules: live, found by name.
    const domain = network.domains.get(item.item_domain);
    return {
      item_id: item.item_id, item_network: item.item_network, item_domain: item.item_domain, item_type: item.item_type,
      item_state: item.item_state,
      item_locations: item.item_locations ?? [],
      item_instance_url: item.item_instance_url ?? null,
      item_schema_url: item.item_schema_url ?? null,
      created_by: item.created_by ?? null,
      lifecycle_status: domain ? goLiveStatus(domain, item.item_state) : 'live',
      search_text: domain ? searchText(domain, item.item_state) : String(item.item_state.name ?? ''),
    };
  });
  // The stored ones are found first, and changed by a plain UPDATE; only the others go through
  // INSERT … ON CONFLICT (which still settles an item created meanwhile). An update through ON
  // CONFLICT takes a row lock first (a WAL record and, on a page not written since the last
  // checkpoint, a full-page image of its own), and tries the insert's speculative path: PostgreSQL's
  // CPU per 1,000 changed items 0.195–0.208 s that way, 0.176–0.193 this way; per 1,000 unchanged
  // ones 0.067 against 0.039 (`npm run bench:signals-upsert`; docs/decisions.md "Updates in signals").
  const { rows: found } = await client.query<{ item_id: string; identity: string; lifecycle_status: LifecycleStatus }>(
    `SELECT item_id, concat_ws('/', item_network, item_domain, item_type) AS identity, lifecycle_status
       FROM signals.items WHERE item_id = ANY($1::uuid[])`, [rows.map((r) => r.item_id)]);
  const existing = new Map(found.map((r) => [r.item_id, r]));
  const stored = rows.filter((r) => existing.has(r.item_id));
  const fresh = stored.length ? rows.filter((r) => !existing.has(r.item_id)) : rows;
  type Decided = Pick<ItemRecord, 'item_id' | 'lifecycle_status' | 'created_by' | 'created_at' | 'updated_at'> & { inserted: boolean };
  // RETURNING only what the statement decides (status, creator, times): the snapshots for the
  // search index are the input rows plus those, so PostgreSQL need not print every item's state
  // back nor this process parse it (a fifth of the statement's cost in bulk onboarding, issue 17).
  const returning = (inserted: string) => `RETURNING i.item_id, i.lifecycle_status, i.created_by,
       to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
       to_char(i.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at, ${inserted} AS inserted`;
  const recordset = `AS x(item_id uuid, item_network text, item_domain text, item_type text, item_state jsonb, item_locations jsonb,
         item_instance_url text, item_schema_url text, created_by text, lifecycle_status text, search_text text)`;
  // An update (from the input row `x` or EXCLUDED): only an item of the same identity whose state
  // changed; `paused` and `retired` are kept.
  const assignments = (x: string) => `item_state = ${x}.item_state, item_locations = ${x}.item_locations,
       item_instance_url = ${x}.item_instance_url, item_schema_url = ${x}.item_schema_url, search_text = ${x}.search_text,
       created_by = COALESCE(${x}.created_by, i.created_by),
       lifecycle_status = CASE WHEN i.lifecycle_status IN ('paused', 'retired') THEN i.lifecycle_status ELSE ${x}.lifecycle_status END,
       updated_at = now()`;
  const changedOnly = (x: string) => `(i.item_network, i.item_domain, i.item_type) = (${x}.item_network, ${x}.item_domain, ${x}.item_type)
       AND (i.item_state, i.item_locations, i.item_instance_url, i.item_schema_url)
           IS DISTINCT FROM (${x}.item_state, ${x}.item_locations, ${x}.item_instance_url, ${x}.item_schema_url)`;
  const { rows: updated } = stored.length ? await client.query<Decided>(
    `UPDATE signals.items AS i SET ${assignments('x')}
       FROM jsonb_to_recordset($1::jsonb) ${recordset}
      WHERE i.item_id = x.item_id AND ${changedOnly('x')}
     ${returning('false')}`, [JSON.stringify(stored)]) : { rows: [] as Decided[] };
  const { rows: inserted } = fresh.length ? await client.query<Decided>(
    `INSERT INTO signals.items AS i (item_id, item_network, item_domain, item_type, item_state, item_locations,
       item_instance_url, item_schema_url, created_by, lifecycle_status, search_text)
     SELECT item_id, item_network, item_domain, item_type, item_state, item_locations, item_instance_url,
       item_schema_url, created_by, lifecycle_status, search_text
       FROM jsonb_to_recordset($1::jsonb) ${recordset}
     ON CONFLICT (item_id) DO UPDATE SET ${assignments('EXCLUDED')}
     WHERE ${changedOnly('EXCLUDED')}
     ${returning('(xmax = 0)')}`, [JSON.stringify(fresh)]) : { rows: [] as Decided[] };
  // Ids are lower case in the input (itemInputSchema) as PostgreSQL returns them.
  const decidedById = new Map([...updated, ...inserted].map((d) => [d.item_id, d]));
  // In input order (the indexing job's snapshots follow the batch).
  const byId = new Map<string, { record: ItemRecord; inserted: boolean }>();
  for (const r of rows) {
    const decided = decidedById.get(r.item_id);
    if (!decided) continue;
    byId.set(decided.item_id, {
      record: {
        item_network: r.item_network, item_domain: r.item_domain, item_type: r.item_type, item_id: decided.item_id,
        item_state: r.item_state, item_locations: r.item_locations, item_instance_url: r.item_instance_url,
        item_schema_url: r.item_schema_url, created_by: decided.created_by, created_at: decided.created_at,
        updated_at: decided.updated_at, lifecycle_status: decided.lifecycle_status,
      },
      inserted: decided.inserted,
    });
  }
  // Left alone: unchanged, or another item's id. An id neither found nor inserted was inserted by
  // another transaction meanwhile (the ON CONFLICT's WHERE found it unchanged or another's).
  const unknown = items.filter((i) => !byId.has(i.item_id) && !existing.has(i.item_id)).map((i) => i.item_id);
  if (unknown.length) {
    const { rows: late } = await client.query<{ item_id: string; identity: string; lifecycle_status: LifecycleStatus }>(
      `SELECT item_id, concat_ws('/', item_network, item_domain, item_type) AS identity, lifecycle_status
         FROM signals.items WHERE item_id = ANY($1::uuid[])`, [unknown]);
    for (const r of late) existing.set(r.item_id, r);
  }
  if (byId.size) {
    await enqueue(client, {
      task: SEARCH_INDEX_TASK,
      payload: { items: Array.from(byId.values(), (s) => s.record) } satisfies IndexItemsPayload,
      priority: searchIndexPriority(byId.size),
    });
  }
  return items.map((item) => {
    const row = byId.get(item.item_id);
    if (row) return { item_id: item.item_id, outcome: row.inserted ? 'created' : 'updated', lifecycle_status: row.record.lifecycle_status };
    const found = existing.get(item.item_id)!;
    const identity = `${item.item_network}/${item.item_domain}/${item.item_type}`;
    return found.identity === identity
      ? { item_id: item.item_id, outcome: 'unchanged', lifecycle_status: found.lifecycle_status }
      : { item_id: item.item_id, outcome: 'conflict', message: `item_id is already used by a ${found.identity} item` };
  });
}

/** The item with id `itemId`, or null. */
export async function getItem(db: Queryable, itemId: string): Promise<ItemRecord | null> {
  const { rows } = await db.query<ItemRecord>(`SELECT ${RECORD_COLUMNS} FROM signals.items WHERE item_id = $1`, [itemId]);
  return rows[0] ?? null;
}

/** Allowed explicit lifecycle moves (spec: values draft, live, paused, retired; transitions ours). */
const TRANSITIONS: Record<LifecycleStatus, LifecycleStatus[]> = {
  draft: ['live', 'paused', 'retired'],
  live: ['draft', 'paused', 'retired'],
  paused: ['live', 'draft', 'retired'],
  retired: [],
};

export class LifecycleError extends Error {
  name = 'LifecycleError';
}

/** One item's answer to a lifecycle move (`setLifecycleStatuses`). */
export interface LifecycleMoveResult {
  item_id: string;
  /** moved; unchanged (already there); not_found; refused (retired is final, or live needs the go-live rules). */
  outcome: 'moved' | 'unchanged' | 'not_found' | 'refused';
  lifecycle_status?: LifecycleStatus;
  message?: string;
}

/**
 * Moves items to other lifecycle statuses in one statement, and enqueues one re-indexing job for
 * those moved (a promotion to live must make an item findable; a pause or retirement removes it
 * from search). Going `live` requires the go-live rules. Rows are locked in id order.
 * @returns one result per move, in order, and the record of every item found (after its move).
 */
export async function setLifecycleStatuses(client: PoolClient, network: Network, moves: { item_id: string; lifecycle_status: LifecycleStatus }[]):
  Promise<{ results: LifecycleMoveResult[]; records: Map<string, ItemRecord> }> {
  const ids = moves.map((m) => m.item_id.toLowerCase());
  const { rows } = await client.query<ItemRecord>(
    `SELECT ${RECORD_COLUMNS} FROM signals.items WHERE item_id = ANY($1::uuid[]) ORDER BY item_id FOR UPDATE`, [ids]);
  const records = new Map(rows.map((r) => [r.item_id, r]));
  const moved = new Map<string, LifecycleStatus>();
  const results = moves.map(({ lifecycle_status: status }, i): LifecycleMoveResult => {
    const item = records.get(ids[i]);
    if (!item) return { item_id: ids[i], outcome: 'not_found', message: `No item ${ids[i]}` };
    const current = moved.get(item.item_id) ?? item.lifecycle_status;
    if (current === status) return { item_id: item.item_id, outcome: 'unchanged', lifecycle_status: status };
    const refuse = (message: string): LifecycleMoveResult => ({ item_id: item.item_id, outcome: 'refused', lifecycle_status: current, message });
    if (!TRANSITIONS[current].includes(status)) return refuse(`cannot move a ${current} item to ${status}`);
    const domain = network.domains.get(item.item_domain);
    if (status === 'live' && domain && goLiveStatus(domain, item.item_state) !== 'live') {
      return refuse(`cannot go live: ${domain.goLiveRequired.join(', ')} must all have values`);
    }
    moved.set(item.item_id, status);
    return { item_id: item.item_id, outcome: 'moved', lifecycle_status: status };
  });
  if (moved.size) {
    const { rows: updated } = await client.query<ItemRecord>(
      `UPDATE signals.items AS i SET lifecycle_status = x.status, updated_at = now()
         FROM unnest($1::uuid[], $2::text[]) AS x(id, status) WHERE i.item_id = x.id RETURNING ${RECORD_COLUMNS}`,
      [[...moved.keys()], [...moved.values()]]);
    for (const r of updated) records.set(r.item_id, r);
    await enqueue(client, { task: SEARCH_INDEX_TASK, payload: { items: updated } satisfies IndexItemsPayload, priority: searchIndexPriority(updated.length) });
  }
  return { results, records };
}

/**
 * Moves one item to `status` (`setLifecycleStatuses`).
 * @returns the updated record, or null when the item does not exist.
 * @throws LifecycleError when the move is not allowed (retired is final) or the rules are unmet.
 */
export async function setLifecycleStatus(client: PoolClient, network: Network, itemId: string, status: LifecycleStatus): Promise<ItemRecord | null> {
  const { results: [result], records } = await setLifecycleStatuses(client, network, [{ item_id: itemId, lifecycle_status: status }]);
  if (result.outcome === 'not_found') return null;
  if (result.outcome === 'refused') throw new LifecycleError(result.message!);
  return records.get(result.item_id)!;
}

/**
 * Items changed after a point, oldest first, for the search service's reconciliation:
 * keyset pagination on (updated_at, item_id).
 */
export async function listItemsChangedSince(db: Queryable, after: { updatedAt: string; itemId: string } | null, limit: number): Promise<ItemRecord[]> {
  const { rows } = await db.query<ItemRecord>(
    // Qualified: RECORD_COLUMNS outputs updated_at as text, and ordering by that output would sort
    // every item for each page (268 ms a page at 267k items) instead of reading items_updated_idx
    // (2.6 ms). One condition the index serves in a generic plan too; without a cursor, from -infinity.
    `SELECT ${RECORD_COLUMNS} FROM signals.items AS i
      WHERE (i.updated_at, i.item_id) > (coalesce($1::timestamptz, '-infinity'), $2::uuid)
      ORDER BY i.updated_at, i.item_id LIMIT $3`,
    [after?.updatedAt ?? null, after?.itemId ?? '00000000-0000-0000-0000-000000000000', limit]);
  return rows;
}

/**
 * The person an item stands for, as a pushing service sends it with the item (issue 7): the
 * ciphertexts and blind indexes (hex of the 32-byte HMAC) of the platform's PII crypto only, never
 * plaintext. Signals links the item to the user holding the phone or e-mail index, or creates one.
 */
export interface ItemPerson {
  name_encrypted?: string;
  phone_encrypted?: string;
  email_encrypted?: string;
  phone_index?: string;
  email_index?: string;
}
