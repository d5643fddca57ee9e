/**
 * Item endpoints of the signals service (the spec's "item" group, whose endpoints it does not show;
 * decided in docs/decisions.md):
 * - `PUT  /api/v1/items/{item_id}`          upsert one item (201 created, 200 otherwise)
 * - `POST /api/v1/items/batch`              upsert 1..1000 items, one result per item
 * - `GET  /api/v1/items/{item_id}`          one item record
 * - `POST /api/v1/items/{item_id}/lifecycle` {lifecycle_status} explicit move (draft, live, paused, retired)
 * - `POST /api/v1/items/lifecycle`          {items: [{item_id, lifecycle_status}]} 1..1000 moves, one result per item
 * - `GET  /api/v1/items?after=&limit=`      items changed since a cursor, oldest first (reconciliation feed)
 * An upserted item may carry `person` (ciphertexts and blind indexes only, lib/signals/people.ts
 * `ItemPerson`): the item is then linked to that person's user, found or created (issue 7).
 */
import express, { Router } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import {
  createItemStateValidators, getItem, itemInputProblem, itemInputSchema, LifecycleError, LIFECYCLE_STATUSES,
  listItemsChangedSince, setLifecycleStatus, setLifecycleStatuses, upsertItems,
} from '../../lib/network/items.ts';
import { linkItemsToPeople } from '../../lib/signals/people.ts';
import { isInternalKey } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { jsonOf, requestThread } from '../http/request-thread.ts';
import { JSON_TYPES, routeBody } from '../http/service-app.ts';
import { applyItemBatch, batchSchema, MAX_BATCH_ITEMS, personOf, personSchema, userFields, type ItemBatchAnswer } from './item-batch.ts';
import { API_EXAMPLES, itemRecordDoc } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

export const idParam = z.object({ item_id: itemInputSchema.shape.item_id });
export const lifecycleSchema = z.object({ lifecycle_status: z.enum(LIFECYCLE_STATUSES) });
export const lifecycleBatchSchema = z.object({
  items: z.array(z.object({ item_id: itemInputSchema.shape.item_id, lifecycle_status: z.enum(LIFECYCLE_STATUSES) })).min(1).max(MAX_BATCH_ITEMS),
});
export const feedSchema = z.object({
  after: z.string().refine((cursor) => {
    const [updatedAt, itemId, ...rest] = cursor.split(',');
    return rest.length === 0 && z.iso.datetime({ precision: 6 }).safeParse(updatedAt).success && z.uuid().safeParse(itemId).success;
  }, 'expected the next_cursor of the previous page').optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(500),
});

export function itemRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const validators = createItemStateValidators(ctx.network);

  router.put('/items/:item_id', async (req, res) => {
    const { item_id } = parse(idParam, req.params, 'path');
    const item = parse(itemInputSchema, { ...req.body, item_id: req.body?.item_id ?? item_id });
    if (item.item_id !== item_id) throw new HttpError(400, 'item_id in the body differs from the path');
    const problem = itemInputProblem(ctx.network, validators, item);
    if (problem) throw new HttpError(400, problem);
    const person = personOf(ctx.pii, req.body?.person);
    if (typeof person === 'string') throw new HttpError(400, person);
    const [result, user] = await withTransaction(ctx.pool, async (client) => {
      const [r] = await upsertItems(client, ctx.network, [item]);
      const linked = person && r.outcome !== 'conflict'
        ? await linkItemsToPeople(client, ctx.network.id, [{ itemId: item_id, domain: item.item_domain, createdBy: item.created_by ?? null, person, age: item.item_state.age }])
        : undefined;
      return [r, linked?.get(item_id)] as const;
    });
    if (result.outcome === 'conflict') throw new HttpError(409, result.message!);
    res.status(result.outcome === 'created' ? 201 : 200).json({ ...result, ...userFields(user), item: await getItem(ctx.pool, item_id) });
  });

  // The batches the platform's own jobs push (a bulk upload's rows) are background work: applied in
  // a thread whose sessions run at BACKGROUND_NICE (item-batch-worker.ts), so that people's requests
  // go first on this event loop and in PostgreSQL (docs/decisions.md, "Search under load").
  const inThread = requestThread<ItemBatchAnswer>(ctx, new URL('./item-batch-worker.js', import.meta.url), "signals' item batch thread",
    { config: { NETWORK: ctx.config.NETWORK, PII_KEY: ctx.config.PII_KEY, dataDirPath: ctx.config.dataDirPath } });
  const deps = { network: ctx.network, validators, pii: ctx.pii };
  router.post('/items/batch', ...routeBody(express.raw({ limit: ctx.config.HTTP_BODY_LIMIT, type: JSON_TYPES })), async (req, res) => {
    // Without a JSON body express.raw leaves `{}`, which the batch's schema refuses as JSON's parser's would.
    const raw = Buffer.isBuffer(req.body) ? req.body : undefined;
    if (raw && isInternalKey(ctx, req)) res.json(await inThread(raw));
    else res.json(await applyItemBatch(deps, ctx.pool, raw ? jsonOf(raw) : req.body));
  });

  router.get('/items/:item_id', async (req, res) => {
    const { item_id } = parse(idParam, req.params, 'path');
    const item = await getItem(ctx.pool, item_id);
    if (!item) throw new HttpError(404, `No item ${item_id}`);
    res.json(item);
  });

  router.post('/items/:item_id/lifecycle', async (req, res) => {
    const { item_id } = parse(idParam, req.params, 'path');
    const { lifecycle_status } = parse(lifecycleSchema, req.body);
    try {
      const item = await withTransaction(ctx.pool, (client) => setLifecycleStatus(client, ctx.network, item_id, lifecycle_status));
      if (!item) throw new HttpError(404, `No item ${item_id}`);
      res.json(item);
    } catch (err) {
      if (err instanceof LifecycleError) throw new HttpError(409, err.message, { code: 'lifecycle_conflict' });
      throw err;
    }
  });

  router.post('/items/lifecycle', async (req, res) => {
    const { items } = parse(lifecycleBatchSchema, req.body);
    const { results } = await withTransaction(ctx.pool, (client) => setLifecycleStatuses(client, ctx.network, items));
    const count = (o: string) => results.filter((r) => r.outcome === o).length;
    res.json({
      results: results.map((r, index) => ({ index, ...r })),
      summary: { total: results.length, moved: count('moved'), unchanged: count('unchanged'), not_found: count('not_found'), refused: count('refused') },
    });
  });

  router.get('/items', async (req, res) => {
    const { after, limit } = parse(feedSchema, req.query, 'query');
    const [updatedAt, itemId] = after ? after.split(',') : [];
    const items = await listItemsChangedSince(ctx.pool, after ? { updatedAt, itemId } : null, limit);
    const last = items.at(-1);
    res.json({ items, next_cursor: items.length === limit && last ? `${last.updated_at},${last.item_id}` : null });
  });

  return router;
}

const UPSERT_OUTCOMES = ['created', 'updated', 'unchanged'] as const;
/** Present when the item carried a `person`: the user it is linked to, and whether signals created that user. */
const userLinkFields = {
  user_id: z.uuid().optional().meta({ description: 'the person\'s user, when the item carried a `person`' }),
  user_created: z.boolean().optional().meta({ description: 'whether that user was created by this request' }),
};
const upsertResponseSchema = z.object({
  item_id: z.uuid(),
  outcome: z.enum(UPSERT_OUTCOMES),
  lifecycle_status: z.enum(LIFECYCLE_STATUSES),
  ...userLinkFields,
  item: itemRecordDoc,
});
const batchResponseSchema = z.object({
  results: z.array(z.object({
    index: z.int().min(0),
    item_id: z.uuid().optional(),
    outcome: z.enum([...UPSERT_OUTCOMES, 'conflict', 'invalid']),
    lifecycle_status: z.enum(LIFECYCLE_STATUSES).optional(),
    message: z.string().optional(),
    ...userLinkFields,
  })),
  summary: z.object({
    total: z.int(), created: z.int(), updated: z.int(), unchanged: z.int(), conflict: z.int(), invalid: z.int(),
  }),
});
const lifecycleBatchResponseSchema = z.object({
  results: z.array(z.object({
    index: z.int().min(0), item_id: z.uuid(), outcome: z.enum(['moved', 'unchanged', 'not_found', 'refused']),
    lifecycle_status: z.enum(LIFECYCLE_STATUSES).optional(), message: z.string().optional(),
  })),
  summary: z.object({ total: z.int(), moved: z.int(), unchanged: z.int(), not_found: z.int(), refused: z.int() }),
});
const feedResponseSchema = z.object({
  items: z.array(itemRecordDoc),
  next_cursor: z.string().nullable().meta({ description: 'pass as `after` for the next page; null on the last page' }),
});
const itemBodyDoc = itemInputSchema.partial({ item_id: true }).extend({ person: personSchema.optional().meta({ description: 'the item\'s person (ciphertexts and blind indexes of the platform\'s PII key only): signals links the item to that person\'s user' }) })
  .meta({ description: 'item_id may be left out: the path names it' });

/** Docs of `itemRoutes` (api/http/openapi.ts). */
export const itemRouteDocs: RouteDoc[] = [
  {
    method: 'PUT', path: '/api/v1/items/:item_id', summary: 'Create or update one item', tags: ['items'], security: 'apiKey',
    params: idParam, body: { schema: itemBodyDoc, example: API_EXAMPLES.item },
    responses: {
      200: { description: 'Updated or unchanged', schema: upsertResponseSchema },
      201: { description: 'Created', schema: upsertResponseSchema },
    },
    errors: { 409: 'The id belongs to an item of another network, domain or type' },
  },
  {
    method: 'POST', path: '/api/v1/items/batch', summary: `Create or update 1..${MAX_BATCH_ITEMS} items, one result per item`, tags: ['items'], security: 'apiKey',
    description: 'Each element is an item as for PUT /api/v1/items/{item_id}; a bad item gets outcome `invalid` and never rejects the others.',
    body: { schema: batchSchema }, responses: { 200: { description: 'One result per item, in order', schema: batchResponseSchema } },
  },
  {
    method: 'GET', path: '/api/v1/items/:item_id', summary: 'One item', tags: ['items'], security: 'apiKey',
    params: idParam, responses: { 200: { description: 'The item', schema: itemRecordDoc } }, errors: { 404: 'No such item' },
  },
  {
    method: 'POST', path: '/api/v1/items/:item_id/lifecycle', summary: 'Move an item to another lifecycle status', tags: ['items'], security: 'apiKey',
    params: idParam, body: { schema: lifecycleSchema, example: API_EXAMPLES.lifecycle },
    responses: { 200: { description: 'The item after the move', schema: itemRecordDoc } },
    errors: { 404: 'No such item', 409: 'The move is not allowed (retired is final; live needs the go-live rules met)' },
  },
  {
    method: 'POST', path: '/api/v1/items/lifecycle', summary: `Move 1..${MAX_BATCH_ITEMS} items to other lifecycle statuses, one result per item`, tags: ['items'], security: 'apiKey',
    description: 'Each move is checked as for POST /api/v1/items/{item_id}/lifecycle; a refused or unknown item never rejects the others.',
    body: { schema: lifecycleBatchSchema }, responses: { 200: { description: 'One result per move, in order', schema: lifecycleBatchResponseSchema } },
  },
  {
    method: 'GET', path: '/api/v1/items', summary: 'Items changed since a cursor, oldest first (the reconciliation feed)', tags: ['items'], security: 'apiKey',
    query: feedSchema, responses: { 200: { description: 'A page of items', schema: feedResponseSchema } },
  },
];
