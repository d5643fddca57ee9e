/**
 * Voice exports (Trust II, issue 29): an export job resolves items against its own aggregator's
 * participants, not its organisation's, and only that aggregator reads its CSV — two aggregators of
 * one organisation; the CSV (decrypted contacts) is deleted VOICE_EXPORT_RETENTION_DAYS after it
 * was written by the hourly task, after which the download answers 410. Real worker, real HTTP.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';
import { createVoiceJob, listedJob, PROVIDER_SECRET, seedSeekers } from '../helpers/voice.ts';

let platform: TestPlatform;
let first: TestAggregator;
/** A second approved aggregator of `first`'s organisation. */
let sibling: TestAggregator;

/** An approved aggregator in the organisation of `of`, with a token of `roles`. */
async function siblingOf(of: TestAggregator, roles: string[]): Promise<TestAggregator> {
  const { rows: [agg] } = await platform.ctx.pool.query<{ aggregator_id: string }>(
    `INSERT INTO aggregator.aggregators (org_id, name, types) VALUES ($1, $2, '{seeker}') RETURNING aggregator_id`,
    [of.orgId, `Sibling ${randomBytes(3).toString('hex')}`]);
  const token = await platform.ctx.tokens.issue({
    sub: `aggregator:${agg.aggregator_id}`, aggregator_id: agg.aggregator_id, org_id: of.orgId, aggregator_type: ['seeker'], roles,
  }, 3600);
  return { aggregatorId: agg.aggregator_id, orgId: of.orgId, orgSlug: of.orgSlug, token };
}

/** The export job once its CSV is written (or it failed). */
async function settledExport(agg: TestAggregator, jobId: string) {
  return until(`export job ${jobId} settled`, async () => {
    const job = await listedJob(platform, agg.token, jobId);
    return job && !['queued', 'processing'].includes(job.status) ? job : undefined;
  });
}

const download = (agg: TestAggregator, jobId: string) => request(platform.url('aggregator')).get(`/v1/campaign/exports/${jobId}`)
  .set('authorization', `Bearer ${agg.token}`).buffer(true)
  .parse((res, done) => { let t = ''; res.setEncoding('utf8'); res.on('data', (c: string) => { t += c; }); res.on('end', () => done(null, t)); });

/** Runs task `voice-export-retention` through the worker once; resolves when it is done. */
async function runRetention(): Promise<void> {
  const { rows: [{ id }] } = await platform.ctx.pool.query<{ id: string }>(
    `SELECT id FROM graphile_worker.add_job('voice-export-retention', '{}'::json, job_key := $1)`, [`retention-${randomUUID()}`]);
  await until('the retention task', async () => {
    const { rows } = await platform.ctx.pool.query('SELECT last_error FROM graphile_worker.jobs WHERE id = $1', [id]);
    if (rows[0]?.last_error) throw new Error(rows[0].last_error);
    return rows.length === 0;
  });
}

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['aggregator'], worker: true, env: { VOICE_PROVIDER_SECRET: PROVIDER_SECRET } });
  first = await platform.aggregator({ types: ['seeker'], roles: ['operator'] });
  sibling = await siblingOf(first, ['operator']);
});
afterAll(async () => {
  await platform?.stop();
});

describe('voice exports belong to the aggregator that made them', () => {
  it('an export of another aggregator of the same organisation skips its participants: the CSV holds only the caller\'s', async () => {
    const theirs = await seedSeekers(platform, first, ['+919811100001', '+919811100002'], ['Their Seeker Anand', 'Their Seeker Bela']);
    const mine = await seedSeekers(platform, sibling, ['+919811100003'], ['My Seeker Chitra']);
    const created = await createVoiceJob(platform, sibling.token, { channel: 'export', item_ids: [...theirs, ...mine] });
    expect(created.status).toBe(202);
    const job = await settledExport(sibling, created.body.job_id);
    expect(job).toMatchObject({ status: 'partial', counts: expect.objectContaining({ resolved: 1, skipped_not_owned: 2 }) });
    const { rows: skipped } = await platform.ctx.pool.query(
      `SELECT item_id, skip_reason FROM aggregator.voice_job_items WHERE job_id = $1 AND status = 'skipped_not_owned' ORDER BY seq`, [created.body.job_id]);
    expect(skipped).toEqual(theirs.map((id) => ({ item_id: id, skip_reason: 'not a participant of your aggregator' })));

    const csv = await download(sibling, created.body.job_id);
    expect(csv.status).toBe(200);
    expect(csv.body).toContain('My Seeker Chitra');
    for (const leaked of ['Their Seeker', '+919811100001', '+919811100002', ...theirs]) expect(csv.body).not.toContain(leaked);
  });

  it('only the aggregator that made an export downloads its CSV; a sibling aggregator gets 403', async () => {
    const ids = await seedSeekers(platform, first, ['+919811100011'], ['Owned Seeker Devika']);
    const created = await createVoiceJob(platform, first.token, { channel: 'export', item_ids: ids });
    expect(created.status).toBe(202);
    expect(await settledExport(first, created.body.job_id)).toMatchObject({ status: 'completed' });
    expect((await download(first, created.body.job_id)).body).toContain('Owned Seeker Devika');

    const refused = await download(sibling, created.body.job_id);
    expect(refused.status).toBe(403);
    expect(refused.body).not.toContain('Devika');
    expect(JSON.parse(refused.body).error).toMatchObject({ code: 'forbidden', detail: expect.stringContaining('another aggregator') });
  });
});

describe('voice export retention (VOICE_EXPORT_RETENTION_DAYS)', () => {
  it('deletes the CSV past retention, marks the job, and the download then answers 410 saying why', async () => {
    const ids = await seedSeekers(platform, first, ['+919811100021'], ['Retained Seeker Esha']);
    const created = await createVoiceJob(platform, first.token, { channel: 'export', item_ids: ids });
    const jobId = created.body.job_id;
    const job = await settledExport(first, jobId);
    expect(await platform.ctx.storage.stat(job.export_object_key)).not.toBeNull();

    // Not yet due: left alone.
    await runRetention();
    expect((await download(first, jobId)).status).toBe(200);

    // Written 8 days ago: past the default 7.
    await platform.ctx.pool.query(`UPDATE aggregator.voice_jobs SET export_written_at = now() - interval '8 days' WHERE job_id = $1`, [jobId]);
    await runRetention();
    expect(await platform.ctx.storage.stat(job.export_object_key)).toBeNull();
    const { rows: [row] } = await platform.ctx.pool.query('SELECT export_purged_at FROM aggregator.voice_jobs WHERE job_id = $1', [jobId]);
    expect(row.export_purged_at).toBeInstanceOf(Date);

    const gone = await download(first, jobId);
    expect(gone.status).toBe(410);
    const body = JSON.parse(gone.body);
    expect(body.error).toMatchObject({ code: 'export_expired', requestId: expect.any(String) });
    expect(body.error.detail).toMatch(/deleted on .*7 days after it was written \(VOICE_EXPORT_RETENTION_DAYS\)/);
    // The job stays, with its counts.
    expect(await listedJob(platform, first.token, jobId)).toMatchObject({ status: 'completed', counts: expect.objectContaining({ resolved: 1 }) });
    // A second run finds nothing more to do.
    await runRetention();
  });
});
