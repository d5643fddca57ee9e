/**
 * Voice jobs dispatched by the real graphile-worker runner to the real local provider, run as its
 * own process (`ldp voice-provider`), which calls back over HTTP: every item status, every job
 * status, duplicates across active jobs, callbacks that must not move final items, and the export
 * channel's CSV.
 */
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signBody } from '../../lib/aggregator/voice/signature.ts';
import { startTestPlatform, tempDir, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import {
  callsPerKey, createVoiceJob, getVoiceJob, listedJob, phones, PROVIDER_SECRET, providerLog, seedSeekers, startProvider,
  waitForVoiceJob, type ProviderProcess,
} from '../helpers/voice.ts';

let dir: string;
let provider: ProviderProcess;
let platform: TestPlatform;
let agg: TestAggregator;
let stranger: TestAggregator;

beforeAll(async () => {
  dir = await tempDir('ldp-voice-');
  // Numbers ending in 99 fail; numbers ending in 77 are never called back (stay submitted).
  provider = await startProvider(dir, ['--fail-to', '99$', '--hold-to', '77$', '--delay', '20']);
  platform = await startTestPlatform({
    services: ['aggregator'], worker: true,
    env: { VOICE_PROVIDER_URL: provider.url, VOICE_PROVIDER_SECRET: PROVIDER_SECRET, VOICE_CHUNK_ITEMS: '10', VOICE_PROVIDER_BATCH_SIZE: '4' },
  });
  agg = await platform.aggregator({ types: ['seeker'], roles: ['operator'] });
  stranger = await platform.aggregator({ types: ['seeker'] });
});
afterAll(async () => {
  await platform?.stop();
  await provider?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const script = { content: { script: 'Namaste: the job fair is on Saturday' } };

/** Counters recounted from the item rows, as a check of the O(1) ones. */
async function recount(jobId: string) {
  const { rows } = await platform.ctx.pool.query<{ status: string; n: number }>(
    'SELECT status, count(*)::int AS n FROM aggregator.voice_job_items WHERE job_id = $1 GROUP BY status', [jobId]);
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

function nonZero(counts: Record<string, number>) {
  return Object.fromEntries(Object.entries(counts).filter(([k, n]) => k !== 'total' && n !== 0));
}

describe('voice job dispatch through the worker and the local provider', () => {
  it('moves each item to the right bucket and settles a mixed job as partial; the provider placed each call once', async () => {
    const ok = await seedSeekers(platform, agg, phones(12, 1));
    const failing = await seedSeekers(platform, agg, ['+919800000099', '+919800000199', '+919800000299']);
    const noPhone = await seedSeekers(platform, agg, [null, null, null, null]);
    const theirs = await seedSeekers(platform, stranger, phones(3, 500));
    const unknown = [randomUUID(), randomUUID()];
    const created = await createVoiceJob(platform, agg.token, { item_ids: [...ok, ...theirs, ...failing, ...unknown, ...noPhone], ...script });
    expect(created.status).toBe(202);
    const jobId = created.body.job_id;

    const job = await waitForVoiceJob(platform, agg.token, jobId);
    expect(job.status).toBe('partial');
    expect(job.counts).toEqual({
      total: 24, pending: 0, resolved: 0, submitted: 0, sent: 12, failed: 3, skipped_not_owned: 5, skipped_no_contact: 4, duplicate_active: 0,
    });
    expect(await recount(jobId)).toEqual(nonZero(job.counts));
    const byId = new Map(job.items.map((i: any) => [i.item_id, i]));
    for (const id of ok) expect(byId.get(id)).toMatchObject({ status: 'sent', provider_ref: expect.stringMatching(/^vc_/), provider_batch_ref: expect.stringMatching(/^vb_/), error_reason: '' });
    for (const id of failing) expect(byId.get(id)).toMatchObject({ status: 'failed', provider_ref: expect.stringMatching(/^vc_/), error_reason: expect.stringMatching(/\w/) });
    for (const id of noPhone) expect(byId.get(id)).toMatchObject({ status: 'skipped_no_contact', provider_ref: '', skip_reason: expect.stringContaining('phone') });
    for (const id of [...theirs, ...unknown]) expect(byId.get(id)).toMatchObject({ status: 'skipped_not_owned', provider_ref: '', skip_reason: expect.stringContaining('organisation') });
    expect(job.provider_response).toMatchObject({ batches_submitted: expect.any(Number), calls_accepted: 15, calls_replayed: 0 });

    const calls = callsPerKey(await providerLog(provider.logFile));
    const ours = [...calls].filter(([key]) => key.startsWith(`${jobId}:`));
    expect(ours.map(([key]) => key.split(':')[1]).sort()).toEqual([...ok, ...failing].sort());
    expect(ours.every(([, n]) => n === 1)).toBe(true);
  });

  it('settles as completed when every call is sent, and as failed when none is', async () => {
    const ok = await seedSeekers(platform, agg, phones(5, 100));
    const completed = await createVoiceJob(platform, agg.token, { item_ids: ok, content: { audio_url: 'https://example.org/fair.mp3' } });
    const done = await waitForVoiceJob(platform, agg.token, completed.body.job_id);
    expect(done.status).toBe('completed');
    expect(nonZero(done.counts)).toEqual({ sent: 5 });

    const failing = await seedSeekers(platform, agg, ['+919800000399']);
    const noPhone = await seedSeekers(platform, agg, [null]);
    const failed = await createVoiceJob(platform, agg.token, { item_ids: [...failing, ...noPhone, randomUUID()], ...script });
    const end = await waitForVoiceJob(platform, agg.token, failed.body.job_id);
    expect(end.status).toBe('failed');
    expect(nonZero(end.counts)).toEqual({ failed: 1, skipped_no_contact: 1, skipped_not_owned: 1 });
  });

  it('keeps a submitted call active, answers duplicate_active for it in another job, and never moves a final item back', async () => {
    const held = await seedSeekers(platform, agg, ['+919800000177', '+919800000277']);
    const [fresh] = await seedSeekers(platform, agg, phones(1, 900));
    const first = await createVoiceJob(platform, agg.token, { item_ids: held, ...script });
    // The page waitForVoiceJob polls (items_limit 1000): its answers show the worker's moves within VOICE_POLL_MAX_AGE_MS.
    const page = { items_limit: 1000 };
    const queuedTag = (await getVoiceJob(platform, agg.token, first.body.job_id, page)).headers.etag;
    const active = await waitForVoiceJob(platform, agg.token, first.body.job_id, (j) => j.counts.submitted === 2);
    expect(active.status).toBe('processing');
    expect(active.items.map((i: any) => i.status)).toEqual(['submitted', 'submitted']);
    const activeTag = (await getVoiceJob(platform, agg.token, first.body.job_id, page)).headers.etag;
    expect(activeTag).not.toBe(queuedTag);
    expect((await getVoiceJob(platform, agg.token, first.body.job_id, page).set('if-none-match', activeTag)).status).toBe(304);

    const second = await createVoiceJob(platform, agg.token, { item_ids: [...held, fresh], ...script });
    const other = await waitForVoiceJob(platform, agg.token, second.body.job_id);
    expect(other.status).toBe('partial');
    expect(nonZero(other.counts)).toEqual({ sent: 1, duplicate_active: 2 });
    expect(other.items[0]).toMatchObject({ status: 'duplicate_active', skip_reason: expect.stringContaining('another active voice job') });

    // The provider's callbacks for the held calls, as it would send them (signed), plus one with a foreign ref.
    const callback = async (updates: object[]) => {
      const body = JSON.stringify({ batch_ref: 'vb_manual', updates });
      return request(platform.url('aggregator')).post('/v1/campaign/voice/callbacks').set('content-type', 'application/json')
        .set('x-voice-signature', signBody(PROVIDER_SECRET, body)).send(body);
    };
    const [a, b] = active.items;
    const key = (item: any) => `${first.body.job_id}:${item.item_id}`;
    const res = await callback([
      { idempotency_key: key(a), provider_ref: a.provider_ref, status: 'sent' },
      { idempotency_key: key(b), provider_ref: 'vc_someone-else', status: 'sent' },
    ]);
    expect(res.body).toEqual({ accepted: 1, ignored: 1 });
    expect((await callback([{ idempotency_key: key(b), provider_ref: b.provider_ref, status: 'failed', error_reason: 'busy' }])).body).toEqual({ accepted: 1, ignored: 0 });
    const settled = await getVoiceJob(platform, agg.token, first.body.job_id);
    expect(settled.body.status).toBe('partial');
    expect(settled.body.items.map((i: any) => [i.status, i.error_reason])).toEqual([['sent', ''], ['failed', 'busy']]);
    // Final items never move back.
    expect((await callback([{ idempotency_key: key(a), provider_ref: a.provider_ref, status: 'failed', error_reason: 'late' }])).body).toEqual({ accepted: 0, ignored: 1 });
    const after = await getVoiceJob(platform, agg.token, first.body.job_id);
    expect(after.body.counts).toEqual(settled.body.counts);
    expect(after.headers.etag).toBe(settled.headers.etag);
    expect(await recount(first.body.job_id)).toEqual({ sent: 1, failed: 1 });
  });

  it('writes the resolved contacts of an export job to a formula-safe CSV in object storage', async () => {
    const ids = await seedSeekers(platform, agg, ['+919800000601', '+919800000602', null], ['=HYPERLINK("http://evil")', '@Priya', 'No Phone']);
    const created = await createVoiceJob(platform, agg.token, { channel: 'export', item_ids: [...ids, randomUUID()] });
    expect(created.status).toBe(202);
    const jobId = created.body.job_id;
    let job;
    for (let i = 0; ; i++) {
      job = await listedJob(platform, agg.token, jobId);
      if (!['queued', 'processing'].includes(job.status)) break;
      if (i > 300) throw new Error(`export job still ${job.status}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(job.status).toBe('partial');
    expect(nonZero(job.counts)).toEqual({ resolved: 2, skipped_no_contact: 1, skipped_not_owned: 1 });
    expect(job.export_object_key).toBe(`voice-exports/${agg.orgId}/${jobId}.csv`);
    expect(job.provider_response).toEqual({ export_object_key: job.export_object_key, rows: 2 });
    expect((await getVoiceJob(platform, agg.token, jobId)).status).toBe(403);

    const csv = await request(platform.url('aggregator')).get(`/v1/campaign/exports/${jobId}`).set('authorization', `Bearer ${agg.token}`)
      .buffer(true).parse((res, done) => { let t = ''; res.setEncoding('utf8'); res.on('data', (c: string) => { t += c; }); res.on('end', () => done(null, t)); });
    expect(csv.status).toBe(200);
    const lines = (csv.body as string).replace(/^\uFEFF/, '').trim().split('\r\n');
    expect(lines).toEqual([
      'item_id,participant_type,name,phone,email',
      `${ids[0]},seeker,"'=HYPERLINK(""http://evil"")",+919800000601,${ids[0]}@example.org`,
      `${ids[1]},seeker,'@Priya,+919800000602,${ids[1]}@example.org`,
    ]);
    const stored = await platform.ctx.storage.stat(job.export_object_key);
    expect(stored?.size).toBe(Buffer.byteLength(csv.body as string));
    expect((await request(platform.url('aggregator')).get(`/v1/campaign/exports/${jobId}`).set('authorization', `Bearer ${stranger.token}`)).status).toBe(403);
  });
});
