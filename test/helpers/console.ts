/** Console links for tests: the token `ldp console` prints, minted with the platform's issuer. */
import { CONSOLE_LINK_PURPOSE } from '../../lib/aggregator/console/sessions.ts';
import type { TestAggregator, TestPlatform } from './platform.ts';

/** A console sign-in URL for `agg` with `role`, valid `ttlSeconds` (as bin/commands/console.ts mints it). */
export async function consoleLinkFor(platform: TestPlatform, agg: TestAggregator, role = 'admin', ttlSeconds = 600): Promise<string> {
  const types = (await platform.ctx.pool.query<{ types: string[] }>('SELECT types FROM aggregator.aggregators WHERE aggregator_id = $1', [agg.aggregatorId])).rows[0].types;
  const token = await platform.ctx.tokens.issueUser(`console:${agg.aggregatorId}:${role}`, ttlSeconds, {
    purpose: CONSOLE_LINK_PURPOSE, aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: types, roles: [role],
  });
  return `${platform.url('aggregator')}/console/login?token=${encodeURIComponent(token)}`;
}
