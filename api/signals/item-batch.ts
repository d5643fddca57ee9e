/**
 * `POST /api/v1/items/batch`'s work: 1..MAX_BATCH_ITEMS items checked one by one (schema, the
 * domain's item state, `person`), the valid ones upserted and linked to their people in one
 * transaction, one result per item. Run on the service's event loop for an integration's batch,
 * and in the item batch thread (item-batch-worker.ts) for the batches the platform's own jobs push
 * (a bulk upload's rows: docs/decisions.md, "Search under load").
 */
import { z } from 'zod';
import type { Network } from '../../lib/network/config.ts';
import { itemInputProblem, itemInputSchema, upsertItems, type ItemPerson } from '../../lib/network/items.ts';
import type { PiiCrypto } from '../../lib/platform/crypto.ts';
import { withTransaction, type Pool } from '../../lib/platform/db.ts';
import { itemPersonProblem, linkItemsToPeople } from '../../lib/signals/people.ts';
import type { ValidateFunction } from 'ajv';
import { parse } from '../http/validation.ts';

export const MAX_BATCH_ITEMS = 1000;

/** `application_name` of the item batch thread's database sessions. */
export const ITEM_BATCH_SESSIONS = 'ldp-item-batches';

export const batchSchema = z.object({ items: z.array(z.unknown()).min(1).max(MAX_BATCH_ITEMS) });
const hex32 = z.string().regex(/^[0-9a-fA-F]{64}$/, 'expected the 32-byte blind index in hex');
export const personSchema = z.strictObject({
  name_encrypted: z.string().min(1).max(2000).optional(),
  phone_encrypted: z.string().min(1).max(2000).optional(),
  email_encrypted: z.string().min(1).max(2000).optional(),
  phone_index: hex32.optional(),
  email_index: hex32.optional(),
});

/** The user fields of an item result when the item was linked to a person's user. */
export const userFields = (u: { userId: string; created: boolean } | undefined) => (u ? { user_id: u.userId, user_created: u.created } : {});

/** What the batch route answers: one result per item, in order, and their counts. */
export interface ItemBatchAnswer {
  results: Record<string, unknown>[];
  summary: { total: number; created: number; updated: number; unchanged: number; conflict: number; invalid: number };
}

/** What checking a batch needs: the network, its item state validators (`createItemStateValidators`), the PII key's crypto. */
export interface ItemBatchDeps {
  network: Network;
  validators: Map<string, ValidateFunction>;
  pii: PiiCrypto;
}

/**
 * The item's `person`, parsed and checked (its ciphertexts decrypt under this platform's key and
 * match their blind indexes); a string says why it is refused.
 */
export function personOf(pii: PiiCrypto, raw: unknown): ItemPerson | string | undefined {
  if (raw === undefined || raw === null) return undefined;
  const parsed = personSchema.safeParse(raw);
  if (!parsed.success) return `person: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'} ${i.message}`).join('; ')}`;
  return itemPersonProblem(pii, parsed.data) ?? parsed.data;
}

/**
 * Applies the batch `body` (`{items: [...]}`) with sessions of `pool`: an invalid item is answered
 * `invalid` with its reason and the others still go through.
 * @throws HttpError 400 naming the field when `body` is not a batch of 1..MAX_BATCH_ITEMS items;
 *   errors of the database.
 */
export async function applyItemBatch(deps: ItemBatchDeps, pool: Pool, body: unknown): Promise<ItemBatchAnswer> {
  const { items } = parse(batchSchema, body);
  const seen = new Set<string>();
  const valid: z.infer<typeof itemInputSchema>[] = [];
  const people = new Map<string, ItemPerson>();
  const results: Record<string, unknown>[] = items.map((raw, index) => {
    const parsed = itemInputSchema.safeParse(raw);
    if (!parsed.success) {
      return { index, outcome: 'invalid', message: parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') };
    }
    const person = personOf(deps.pii, (raw as { person?: unknown }).person);
    const problem = itemInputProblem(deps.network, deps.validators, parsed.data)
      ?? (seen.has(parsed.data.item_id) ? 'item_id repeated in this batch' : null)
      ?? (typeof person === 'string' ? person : null);
    if (problem) return { index, item_id: parsed.data.item_id, outcome: 'invalid', message: problem };
    seen.add(parsed.data.item_id);
    if (person && typeof person !== 'string') people.set(parsed.data.item_id, person);
    valid.push(parsed.data);
    return { index, item_id: parsed.data.item_id };
  });
  const [stored, linked] = await withTransaction(pool, async (client) => {
    const upserted = new Map((await upsertItems(client, deps.network, valid)).map((r) => [r.item_id, r]));
    const links = valid.filter((i) => people.has(i.item_id) && upserted.get(i.item_id)?.outcome !== 'conflict')
      .map((i) => ({ itemId: i.item_id, domain: i.item_domain, createdBy: i.created_by ?? null, person: people.get(i.item_id)!, age: i.item_state.age }));
    return [upserted, await linkItemsToPeople(client, deps.network.id, links)] as const;
  });
  for (const r of results) if (!r.outcome) Object.assign(r, stored.get(r.item_id as string), userFields(linked.get(r.item_id as string)));
  const count = (o: string) => results.filter((r) => r.outcome === o).length;
  return {
    results,
    summary: { total: results.length, created: count('created'), updated: count('updated'), unchanged: count('unchanged'), conflict: count('conflict'), invalid: count('invalid') },
  };
}
