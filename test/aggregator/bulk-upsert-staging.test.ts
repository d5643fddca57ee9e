/**
 * An upsert of a list whose first rows all changed (issue 30): staging stops looking its rows up
 * (tasks/bulk-upload-stage.ts `createUnchangedFilter`: a looked-up batch with under a quarter of
 * its rows unchanged pauses the lookups), so the unchanged rows after it reach the chunks, which
 * settle them by comparing with the stored participants. The outcome must be the same as had
 * staging settled them: exact counts, and nothing written for an unchanged row.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { csv, itemsOf, onboard, participantsOf } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, services: ['signals', 'aggregator'], env: { BULK_UPLOAD_CHUNK_ROWS: '500' } });
});
afterAll(() => platform.stop());

describe('an upsert whose first 1,000 rows changed and the 4,000 after them did not', () => {
  it('settles the unchanged rows in the chunks: exact counts, nothing written for them', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const rows = [...generateSeekers({ count: 5000, seed: 29, errorRate: 0, duplicateRate: 0, places: BUILT_IN_PLACES })].map((r) => r.values);
    const file = (changedRows: number) => csv([...SEEKER_COLUMNS], rows.map((r, i) =>
      SEEKER_COLUMNS.map((c) => (c === 'skills' ? (i < changedRows ? 'welding' : 'tailoring') : r[c]))));
    expect(await onboard(platform, agg.token, { file: file(0) })).toMatchObject({ status: 'completed', created: 5000 });
    const before = new Map((await participantsOf(platform, agg.aggregatorId)).map((p) => [p.participant_id, p.updated_at]));
    const itemsBefore = new Map((await itemsOf(platform, agg.aggregatorId)).map((i) => [i.item_id, i.updated_at]));

    const job = await onboard(platform, agg.token, { file: file(1000), mode: 'upsert' });
    expect(job).toMatchObject({ status: 'completed', total_rows: 5000, passed: 5000, created: 0, updated: 1000, unchanged: 4000, failed: 0, skipped: 0 });
    // The lookups of rows 3,001–5,000 at least were paused (staging had three batches under way
    // when the first one's answer came): the chunks found those rows unchanged.
    const { rows: [chunks] } = await platform.ctx.pool.query(
      'SELECT sum(unchanged)::int AS unchanged, sum(updated)::int AS updated FROM aggregator.bulk_upload_chunks WHERE upload_id = $1', [job.upload_id]);
    expect(chunks.unchanged).toBeGreaterThanOrEqual(2000);
    expect(chunks.updated).toBe(1000);

    const after = await participantsOf(platform, agg.aggregatorId);
    const changed = after.filter((p) => p.updated_at.getTime() !== before.get(p.participant_id)!.getTime());
    expect(changed).toHaveLength(1000);
    expect(changed.every((p) => p.row_number <= 1001 && p.profile.skills.join() === 'welding')).toBe(true);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.filter((i) => i.updated_at.getTime() !== itemsBefore.get(i.item_id)!.getTime())).toHaveLength(1000);
    const { rows: [history] } = await platform.ctx.pool.query(
      'SELECT count(*)::int AS n FROM aggregator.participant_changes WHERE upload_id = $1', [job.upload_id]);
    expect(history.n).toBe(1000);
  });
});
