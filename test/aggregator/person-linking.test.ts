/**
 * One person, one user (issue 7): participants onboarded by different aggregators — in bulk or
 * through a registration link — are linked by signals to the same user when they share a phone or
 * an e-mail, and the push carries only ciphertexts and blind indexes.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv, onboard } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
beforeAll(async () => {
  platform = await startTestPlatform({ worker: true });
});
afterAll(() => platform.stop());

async function userOfItem(itemId: string): Promise<string | null> {
  const { rows: [row] } = await platform.ctx.pool.query<{ user_id: string | null }>('SELECT user_id FROM signals.items WHERE item_id = $1', [itemId]);
  return row?.user_id ?? null;
}

describe('participants linked to people', () => {
  it('links the same phone onboarded in bulk by one aggregator and registered through another’s link to one user', async () => {
    const first = await platform.aggregator({ types: ['seeker'] });
    const second = await platform.aggregator({ types: ['seeker'] });
    const job = await onboard(platform, first.token, {
      file: csv(['name', 'phone', 'email', 'state'], [
        ['Asha Rani', '9812300001', 'asha.rani@example.org', 'Haryana'],
        ['Bimla Devi', '9812300002', '', 'Punjab'],
      ]),
    });
    expect(job).toMatchObject({ passed: 2, failed: 0 });
    const { rows: bulk } = await platform.ctx.pool.query<{ participant_id: string; row_number: number }>(
      'SELECT participant_id, row_number FROM aggregator.participants WHERE aggregator_id = $1 ORDER BY row_number', [first.aggregatorId]);
    const ashaUser = await userOfItem(bulk[0].participant_id);
    const bimlaUser = await userOfItem(bulk[1].participant_id);
    expect(ashaUser).toMatch(/^[0-9a-f-]{36}$/);
    expect(bimlaUser).toMatch(/^[0-9a-f-]{36}$/);
    expect(ashaUser).not.toBe(bimlaUser);

    // The second aggregator's registration link: the same phone, typed another way.
    const agg = request(platform.url('aggregator'));
    const link = await agg.post('/v1/links/create').set('authorization', `Bearer ${second.token}`).send({ domain: 'seeker', slug: 'camp', status: 'live' });
    expect(link.status).toBe(201);
    const registered = await agg.post(`/public/v1/aggregators/${second.orgSlug}/registrations/camp`)
      .send({ name: 'Asha Rani', phone: '+91 98123 00001', state: 'Haryana' });
    expect(registered.status).toBe(201);
    expect(registered.body.owned_elsewhere).toBe(true);
    const linked = await until('the registered participant linked to a user', () => userOfItem(registered.body.submission_id));
    expect(linked).toBe(ashaUser);

    const { rows: [users] } = await platform.ctx.pool.query<{ n: number }>(
      'SELECT count(DISTINCT user_id)::int AS n FROM signals.items WHERE user_id IS NOT NULL');
    expect(users.n).toBe(2);
    // Stored encrypted: no plaintext phone in the user rows.
    const { rows: plain } = await platform.ctx.pool.query(
      `SELECT 1 FROM signals.users u WHERE u.phone_encrypted LIKE '%9812300001%' OR u.name_encrypted LIKE '%Asha%'`);
    expect(plain).toHaveLength(0);
  });
});
