/**
 * A person who registers while an upload runs is found before most of its chunks have run (issue 32): the registration's
 * push to signals and its item's indexing run ahead of the upload's queued chunks and their
 * indexing (graphile-worker runs smaller priorities first), through a real worker of one job at a time.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv, createUpload, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

const ROWS = 1200;
const CHUNK_ROWS = 20;

let platform: TestPlatform;
beforeAll(async () => {
  platform = await startTestPlatform({
    services: ['signals', 'aggregator', 'search'], worker: true,
    env: { WORKER_CONCURRENCY: '1', BULK_UPLOAD_CHUNK_ROWS: String(CHUNK_ROWS), EMBEDDING_PROVIDER: 'hashing' },
  });
});
afterAll(() => platform?.stop());

describe('a registration during an upload', () => {
  it('is pushed and indexed before the upload’s queued chunks have run', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const link = await request(platform.url('aggregator')).post('/v1/links/create').set('authorization', `Bearer ${agg.token}`)
      .send({ domain: 'seeker', slug: 'camp', status: 'live' });
    expect(link.status).toBe(201);
    const rows = Array.from({ length: ROWS }, (_, i) => [`Seeker ${i}`, `98${String(10_000_000 + i)}`, 'Haryana']);
    const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(['name', 'phone', 'state'], rows) });
    expect(created.status).toBe(201);
    const uploadId = created.body.upload_id as string;
    expect((await startUpload(platform, agg.token, uploadId)).status).toBe(200);

    const chunksDone = async () => (await platform.ctx.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM aggregator.participants WHERE aggregator_id = $1 AND registration_link_id IS NULL', [agg.aggregatorId])).rows[0].n;
    await until('the upload under way', async () => (await chunksDone()) > 0, 30_000);

    const registered = await request(platform.url('aggregator')).post(`/public/v1/aggregators/${agg.orgSlug}/registrations/camp`)
      .send({ name: 'Asha Rani', phone: '+91 97000 00001', state: 'Punjab' });
    expect(registered.status, JSON.stringify(registered.body)).toBe(201);
    const itemId = registered.body.submission_id as string;
    await until('the registrant indexed for search', async () =>
      (await platform.ctx.pool.query('SELECT 1 FROM search.items WHERE item_id = $1', [itemId])).rowCount === 1, 30_000);
    // Found while most of the upload's chunks were still queued (one job at a time: before, the
    // push waited behind every chunk, and its indexing behind the chunks' indexing).
    expect(await chunksDone()).toBeLessThan(ROWS / 2);

    const job = await waitForJob(platform, agg.token, uploadId, 120_000);
    expect(job).toMatchObject({ status: 'completed', passed: ROWS, failed: 0 });
  }, 180_000);
});
