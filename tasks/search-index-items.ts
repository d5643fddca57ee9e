/**
 * Task `search-index-items` {items: ItemRecord[]}: enqueued by signals (lib/items.ts) in the same
 * transaction as every stored change, with snapshots of the items as stored. Applies them to the
 * search index with one batch of embeddings (lib/search/indexer.ts: order-safe, re-embeds only
 * changed text, retired items leave the index). Idempotent; a failure (e.g. the model) retries.
 */
import type { Task } from 'graphile-worker';
import { z } from 'zod';
import type { PlatformContext } from '../lib/context.ts';
import { itemRecordSchema, type ItemRecord } from '../lib/network/items.ts';
import { searchEngine } from '../lib/search/engine.ts';
import { indexSnapshots } from '../lib/search/indexer.ts';


const payloadSchema = z.object({ items: z.array(itemRecordSchema) });

export function searchIndexItems(ctx: PlatformContext): Task {
  return async (payload, helpers) => {
    const parsed = payloadSchema.safeParse(payload);
    if (!parsed.success) {
      throw new Error(`search-index-items payload is invalid: ${parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    }
    const { provider } = await searchEngine(ctx);
    const outcome = await indexSnapshots(ctx, provider, parsed.data.items as ItemRecord[]);
    ctx.metrics.counter('search_embedded_items_total', 'Items embedded and written to the search index (rate = embedding throughput).').inc(outcome.embedded);
    helpers.logger.debug(`indexed ${parsed.data.items.length} snapshots`, { outcome });
  };
}
