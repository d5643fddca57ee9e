/**
 * Task `search-reconcile` (periodic, workers/crontab.ts): repairs what indexing jobs missed.
 * 1. Reads signals' change feed (`GET /api/v1/items?after=&limit=`, oldest first) from the
 *    cursor kept in `search.settings`, and applies every item whose index entry is missing or
 *    older than the item at signals (or that is retired but still indexed). The cursor only moves
 *    past changes older than SETTLE_MS, so a change committed late with an earlier timestamp is
 *    still read on the next run.
 * 2. Re-embeds every entry embedded with another model version than the current provider's,
 *    from the item state the index holds.
 * Each run works for about SEARCH_RECONCILE_RUN_MS (at least one step of each part) and leaves the
 * rest to a follow-up job, which continues where the run stopped: starting again from the saved
 * cursor would read the same first pages over and over while a bulk upload's changes are younger
 * than SETTLE_MS (a 267k-row upload kept a core busy for ten minutes that way). The search
 * service never reads the signals schema: the feed is signals' HTTP API.
 */
import type { Task } from 'graphile-worker';
import { z } from 'zod';
import type { PlatformContext } from '../lib/context.ts';
import { JOB_PRIORITY } from '../lib/platform/jobs.ts';
import type { EmbeddingProvider } from '../lib/search/embeddings/index.ts';
import { itemRecordSchema, type ItemRecord } from '../lib/network/items.ts';
import { searchEngine } from '../lib/search/engine.ts';
import { indexSnapshots } from '../lib/search/indexer.ts';

export const RECONCILE_TASK = 'search-reconcile';
const CURSOR_KEY = 'reconcile_cursor';
/** Changes younger than this may still be committing with an earlier timestamp: the cursor waits. */
export const SETTLE_MS = 10 * 60_000;
const FEED_TIMEOUT_MS = 30_000;

const feedSchema = z.object({ items: z.array(itemRecordSchema), next_cursor: z.string().nullable() });

/**
 * Where the feed step stands, carried by a follow-up job. `after`: the feed cursor to read from
 * next; null once the feed was read to its end (the follow-up only finishes the model step).
 * `settled`: every change read before `after` was older than SETTLE_MS, so the saved cursor may
 * still move. A job without it (the crontab's) reads from the saved cursor.
 */
const continuationSchema = z.object({ after: z.string().nullable(), settled: z.boolean() });
type FeedPosition = z.infer<typeof continuationSchema>;

/**
 * Reads the change feed from `from` (or the saved cursor) and applies what the index lacks, at
 * least one page, then until `deadline`.
 * @returns where it stopped; `after` null when it read the feed to its end.
 */
async function reconcileFeed(ctx: PlatformContext, provider: EmbeddingProvider, deadline: number, batch: number, from?: FeedPosition): Promise<FeedPosition> {
  let readFrom: string | null;
  let settled = from?.settled ?? true;
  if (from) readFrom = from.after;
  else {
    const { rows } = await ctx.pool.query<{ value: string }>(`SELECT value FROM search.settings WHERE key = $1`, [CURSOR_KEY]);
    readFrom = rows[0]?.value ?? null;
  }
  const settleBefore = Date.now() - SETTLE_MS;
  do {
    const url = new URL('/api/v1/items', ctx.urls.signals);
    url.searchParams.set('limit', String(batch));
    if (readFrom) url.searchParams.set('after', readFrom);
    const res = await fetch(url, { headers: { 'x-api-key': ctx.internalApiKey }, signal: AbortSignal.timeout(FEED_TIMEOUT_MS) }).catch((err) => {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new Error(`signals change feed ${url.origin} unreachable: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
    });
    if (!res.ok) throw new Error(`signals change feed answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
    const page = feedSchema.parse(await res.json());
    if (page.items.length) {
      const { rows: missing } = await ctx.pool.query<{ item_id: string }>(
        `SELECT d.item_id FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid, updated_at timestamptz, lifecycle_status text)
           LEFT JOIN search.items i USING (item_id) LEFT JOIN search.retired_items r USING (item_id)
          WHERE CASE WHEN d.lifecycle_status = 'retired' THEN i.item_id IS NOT NULL OR r.item_id IS NULL
                     ELSE r.item_id IS NULL AND (i.item_id IS NULL OR i.source_updated_at < d.updated_at) END`,
        [JSON.stringify(page.items.map(({ item_id, updated_at, lifecycle_status }) => ({ item_id, updated_at, lifecycle_status })))]);
      if (missing.length) {
        const ids = new Set(missing.map((m) => m.item_id));
        const outcome = await indexSnapshots(ctx, provider, page.items.filter((i) => ids.has(i.item_id)) as ItemRecord[]);
        ctx.logger.info({ component: RECONCILE_TASK, repaired: ids.size, outcome }, 'search index repaired from the change feed');
      }
      // Items come oldest first: the settled ones are a prefix of the page.
      const lastSettled = settled ? page.items.filter((i) => Date.parse(i.updated_at) < settleBefore).at(-1) : undefined;
      if (lastSettled) {
        await ctx.pool.query(
          `INSERT INTO search.settings (key, value) VALUES ($1, $2)
           ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`,
          [CURSOR_KEY, `${lastSettled.updated_at},${lastSettled.item_id}`]);
      }
      if (lastSettled !== page.items.at(-1)) settled = false;
    }
    if (!page.next_cursor) return { after: null, settled };
    readFrom = page.next_cursor;
  } while (Date.now() < deadline);
  return { after: readFrom, settled };
}

/** Re-embeds entries of other model versions, at least one step, then until `deadline`. @returns whether none is left. */
async function reconcileModelVersions(ctx: PlatformContext, provider: EmbeddingProvider, deadline: number, batch: number): Promise<boolean> {
  const { model_id, quantization, dimensions } = provider.version;
  let after = '00000000-0000-0000-0000-000000000000';
  do {
    const { rows } = await ctx.pool.query<ItemRecord>(
      `SELECT item_network, item_domain, item_type, item_id::text AS item_id, item_state, item_locations, item_instance_url,
              item_schema_url, created_by, lifecycle_status,
              to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
              to_char(source_updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at
         FROM search.items
        WHERE (model_id, model_quantization, model_dimensions) IS DISTINCT FROM ($1, $2, $3) AND item_id > $4
        ORDER BY item_id LIMIT $5`, [model_id, quantization, dimensions, after, batch]);
    if (rows.length) {
      const outcome = await indexSnapshots(ctx, provider, rows);
      ctx.logger.info({ component: RECONCILE_TASK, outcome }, 'search index entries re-embedded with the current model version');
    }
    if (rows.length < batch) return true;
    after = rows.at(-1)!.item_id;
  } while (Date.now() < deadline);
  return false;
}

export function searchReconcile(ctx: PlatformContext): Task {
  return async (payload, helpers) => {
    const { provider } = await searchEngine(ctx);
    const deadline = Date.now() + ctx.config.SEARCH_RECONCILE_RUN_MS;
    const batch = ctx.config.SEARCH_RECONCILE_BATCH_SIZE;
    const continued = continuationSchema.safeParse((payload as { feed?: unknown } | null)?.feed);
    let feedError: unknown;
    const feed = continued.success && continued.data.after === null
      ? continued.data
      : await reconcileFeed(ctx, provider, deadline, batch, continued.success ? continued.data : undefined).catch((err): FeedPosition => {
        feedError = err;
        return { after: null, settled: false };
      });
    const modelsDone = await reconcileModelVersions(ctx, provider, deadline, batch);
    if (feed.after !== null || !modelsDone) {
      await helpers.addJob(RECONCILE_TASK, { feed }, { jobKey: RECONCILE_TASK, queueName: RECONCILE_TASK, priority: JOB_PRIORITY.upkeep });
    }
    // Failing the job makes the missed feed visible (and retried); the model step has still run.
    if (feedError) throw feedError;
  };
}
