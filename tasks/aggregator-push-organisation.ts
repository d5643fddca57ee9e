/**
 * Task `aggregator-push-organisation` {aggregator_id}: upserts the approved aggregator's
 * organisation into signals as an item of the network's organisation type (lib/aggregator/
 * registrations.ts `organisationItem`), then records when. Idempotent (signals answers `unchanged`
 * to the same item); signals unreachable or refusing throws, and graphile-worker retries.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { organisationItem } from '../lib/aggregator/registrations.ts';
import { createSignalsClient } from '../lib/clients/signals-client.ts';

export function aggregatorPushOrganisation(ctx: PlatformContext): Task {
  return async (payload) => {
    const { aggregator_id: aggregatorId } = payload as { aggregator_id: string };
    const item = await organisationItem(ctx.pool, ctx.network, aggregatorId, ctx.urls.aggregator);
    if (!item) {
      ctx.logger.warn({ aggregatorId }, 'organisation not pushed: unknown aggregator, or the network declares no organisation item type');
      return;
    }
    const signals = createSignalsClient({ baseUrl: ctx.urls.signals, apiKey: ctx.internalApiKey, maxBodyBytes: ctx.config.HTTP_BODY_LIMIT });
    const [answer] = await signals.pushItems([item]);
    if (answer.outcome === 'invalid' || answer.outcome === 'conflict') {
      throw new Error(`signals refused organisation ${item.item_id}: ${answer.message ?? answer.outcome}`);
    }
    await ctx.pool.query('UPDATE aggregator.aggregators SET org_pushed_at = now() WHERE aggregator_id = $1', [aggregatorId]);
  };
}
