/**
 * Signals asks the aggregator service about an aggregator's token (issue 29, found by the actor
 * table): a suspended aggregator, or one of a suspended organisation, is refused by signals within
 * a second, as by the aggregator service, instead of acting on actions until its token expires;
 * and an aggregator's token is not taken while the aggregator service cannot be asked.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGGREGATOR_CHECK_MS } from '../../api/signals/identity.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let signalsKey: string;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'] });
  signalsKey = await platform.apiKey('signals');
});
afterAll(() => platform.stop());

const me = (token: string) => request(platform.url('signals')).get('/api/v1/auth/me').set('x-api-key', signalsKey).set('authorization', `Bearer ${token}`);

describe('an aggregator token at signals', () => {
  it('is refused once its aggregator or organisation is suspended, within the check\'s second', async () => {
    const agg = await platform.aggregator({ types: ['provider'], roles: ['operator'] });
    const ok = await me(agg.token);
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ kind: 'aggregator', aggregator: { aggregator_id: agg.aggregatorId } });

    await platform.ctx.pool.query(`UPDATE aggregator.aggregators SET status = 'suspended' WHERE aggregator_id = $1`, [agg.aggregatorId]);
    const refused = await until('the suspension to reach signals', async () => {
      const res = await me(agg.token);
      return res.status === 403 ? res : undefined;
    }, 5 * AGGREGATOR_CHECK_MS);
    expect(refused.body).toMatchObject({ error: 'aggregator_not_approved' });
    // The actions routes identify their actor the same way: refused before the action is looked up.
    const read = await request(platform.url('signals')).get(`/api/v1/action/${randomUUID()}`).set('x-api-key', signalsKey)
      .set('authorization', `Bearer ${agg.token}`);
    expect(read.status).toBe(403);

    const other = await platform.aggregator({ types: ['provider'] });
    expect((await me(other.token)).status).toBe(200);
    await platform.ctx.pool.query(`UPDATE aggregator.organisations SET status = 'suspended' WHERE org_id = $1`, [other.orgId]);
    await until('the organisation\'s suspension to reach signals', async () => (await me(other.token)).status === 403, 5 * AGGREGATOR_CHECK_MS);
  });
});

describe('without the aggregator service', () => {
  it('does not take an aggregator\'s token (503) while the aggregator service does not answer', async () => {
    const alone = await startTestPlatform({ services: ['signals'], env: { AGGREGATOR_PUBLIC_URL: 'http://127.0.0.1:9' } });
    try {
      const key = await alone.apiKey('signals');
      const agg = await alone.aggregator({ types: ['provider'] });
      const res = await request(alone.url('signals')).get('/api/v1/auth/me').set('x-api-key', key).set('authorization', `Bearer ${agg.token}`);
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ error: 'aggregator_unavailable' });
      expect(res.headers['retry-after']).toBe('5');
    } finally {
      await alone.stop();
    }
  });
});
