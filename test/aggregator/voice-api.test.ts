/**
 * Voice jobs over HTTP without a worker: creation (validation, roles, Idempotency-Key), the job
 * resource (items pages, cursor, ETag/304, 403/404 scoping), the list, and the signature check of
 * the callback endpoint.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signBody } from '../../lib/aggregator/voice/signature.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';
import { createVoiceJob, getVoiceJob, phones, PROVIDER_SECRET, seedSeekers } from '../helpers/voice.ts';

let platform: TestPlatform;
let agg: TestAggregator;
let ids: string[];

beforeAll(async () => {
  // Ten seconds: within this file's tests a read answer is always reused (the expiry is exercised by the
  // dispatch tests, whose polls must see the worker's moves).
  platform = await startTestPlatform({ services: ['aggregator'], env: { VOICE_PROVIDER_SECRET: PROVIDER_SECRET, VOICE_CHUNK_ITEMS: '3', VOICE_POLL_MAX_AGE_MS: '10000' } });
  agg = await platform.aggregator({ types: ['seeker'] });
  ids = await seedSeekers(platform, agg, phones(7));
});
afterAll(async () => {
  await platform?.stop();
});

const voiceBody = (itemIds: string[], extra: object = {}) => ({ item_ids: itemIds, content: { script: 'Hello from the job fair' }, ...extra });

function expectShapeC(body: any, code: string) {
  expect(body).toMatchObject({ error: { code, title: expect.any(String), detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) } });
}

describe('POST /v1/campaign/voice', () => {
  it('answers 202 with a queued job whose counts are all pending, its items stored and its chunks enqueued', async () => {
    const res = await createVoiceJob(platform, agg.token, voiceBody([...ids, ids[0]], { metadata: [{ key: 'campaign', value: 'mela-2026' }] }));
    expect(res.status).toBe(202);
    expect(res.headers.location).toBe(`/v1/campaign/voice/${res.body.job_id}`);
    expect(res.body).toMatchObject({
      channel: 'voice', status: 'queued', metadata: [{ key: 'campaign', value: 'mela-2026' }], provider_response: null,
      counts: { total: 7, pending: 7, resolved: 0, submitted: 0, sent: 0, skipped_not_owned: 0, skipped_no_contact: 0, duplicate_active: 0, failed: 0 },
    });
    const { rows } = await platform.ctx.pool.query('SELECT item_id, seq, status FROM aggregator.voice_job_items WHERE job_id = $1 ORDER BY seq', [res.body.job_id]);
    expect(rows.map((r) => r.item_id)).toEqual(ids);
    expect(new Set(rows.map((r) => r.status))).toEqual(new Set(['pending']));
    const { rows: jobs } = await platform.ctx.pool.query(
      `SELECT j.payload FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE t.identifier = 'voice-dispatch-chunk' AND j.payload->>'job_id' = $1 ORDER BY (j.payload->>'first_seq')::int`, [res.body.job_id]);
    expect(jobs.map((j) => [j.payload.first_seq, j.payload.last_seq])).toEqual([[0, 2], [3, 5], [6, 6]]);
  });

  it('answers the same job for the same Idempotency-Key and body, 409 for another body, and creates nothing more', async () => {
    const key = randomUUID();
    const first = await createVoiceJob(platform, agg.token, voiceBody(ids.slice(0, 2)), key);
    expect(first.status).toBe(202);
    const again = await createVoiceJob(platform, agg.token, voiceBody(ids.slice(0, 2)), key);
    expect(again.status).toBe(202);
    expect(again.body.job_id).toBe(first.body.job_id);
    expect(again.headers['idempotent-replayed']).toBe('true');
    const other = await createVoiceJob(platform, agg.token, voiceBody(ids.slice(0, 3)), key);
    expect(other.status).toBe(409);
    expectShapeC(other.body, 'idempotency_key_reused');
    const { rows } = await platform.ctx.pool.query(
      'SELECT count(*)::int AS n FROM aggregator.voice_jobs j JOIN aggregator.voice_idempotency_keys k USING (job_id) WHERE k.idempotency_key = $1', [key]);
    expect(rows[0].n).toBe(1);
    // Another aggregator may use the same key for its own job.
    const other2 = await platform.aggregator({ types: ['seeker'] });
    const theirs = await createVoiceJob(platform, other2.token, voiceBody(ids.slice(0, 2)), key);
    expect(theirs.status).toBe(202);
    expect(theirs.body.job_id).not.toBe(first.body.job_id);
  });

  it('refuses bad requests with 400 naming the field, and writes nothing', async () => {
    const before = (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.voice_jobs')).rows[0].n;
    const noKey = await request(platform.url('aggregator')).post('/v1/campaign/voice').set('authorization', `Bearer ${agg.token}`).send(voiceBody(ids));
    expect(noKey.status).toBe(400);
    expect(noKey.body.error.fields).toHaveProperty('Idempotency-Key');
    const cases: [object, string][] = [
      [{ content: { script: 'x' } }, 'item_ids'],
      [voiceBody([]), 'item_ids'],
      [voiceBody(['not-a-uuid']), 'item_ids.0'],
      [{ item_ids: ids }, 'content'],
      [voiceBody(ids, { content: { script: 'x', audio_url: 'https://example.org/a.mp3' } }), 'content'],
      [voiceBody(ids, { content: { audio_url: 'ftp://example.org/a.mp3' } }), 'content.audio_url'],
      [voiceBody(ids, { channel: 'sms' }), 'channel'],
      [voiceBody(ids, { schedule_at: 'tomorrow' }), 'schedule_at'],
      [voiceBody(ids, { metadata: [{ key: '', value: 'x' }] }), 'metadata.0.key'],
      [voiceBody(ids, { surprise: 1 }), '(root)'],
    ];
    for (const [body, field] of cases) {
      const res = await createVoiceJob(platform, agg.token, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expectShapeC(res.body, 'invalid_request');
      expect(Object.keys(res.body.error.fields), JSON.stringify(body)).toContain(field);
    }
    const tooMany = await createVoiceJob(platform, agg.token, voiceBody(Array.from({ length: 100_001 }, () => randomUUID())));
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.error.fields).toHaveProperty('item_ids');
    const after = (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.voice_jobs')).rows[0].n;
    expect(after).toBe(before);
  });

  it('schedules the dispatch at schedule_at: the chunks wait for it and the job stays queued', async () => {
    const at = new Date(Date.now() + 3_600_000);
    const res = await createVoiceJob(platform, agg.token, voiceBody(ids.slice(0, 2), { schedule_at: at.toISOString().replace('Z', '+00:00') }));
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ status: 'queued', schedule_at: at.toISOString() });
    const { rows } = await platform.ctx.pool.query(
      `SELECT j.run_at FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE t.identifier = 'voice-dispatch-chunk' AND j.payload->>'job_id' = $1`, [res.body.job_id]);
    expect(rows.map((r) => r.run_at.toISOString())).toEqual([at.toISOString()]);
  });

  it('needs the operator or admin role and a bearer token', async () => {
    const viewer = await platform.aggregator({ types: ['seeker'], roles: ['viewer'] });
    const res = await createVoiceJob(platform, viewer.token, voiceBody(ids));
    expect(res.status).toBe(403);
    expectShapeC(res.body, 'insufficient_role');
    const operator = await platform.aggregator({ types: ['seeker'], roles: ['operator'] });
    expect((await createVoiceJob(platform, operator.token, voiceBody(ids))).status).toBe(202);
    const anonymous = await request(platform.url('aggregator')).post('/v1/campaign/voice').set('idempotency-key', 'k').send(voiceBody(ids));
    expect(anonymous.status).toBe(401);
  });
});

describe('GET /v1/campaign/voice/{job_id}', () => {
  it('pages the items with items_limit and the cursor, in the order given, all fields strings', async () => {
    const created = await createVoiceJob(platform, agg.token, voiceBody(ids));
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; ; pages++) {
      const res = await getVoiceJob(platform, agg.token, created.body.job_id, { items_limit: 3, ...(cursor ? { cursor } : {}) });
      expect(res.status).toBe(200);
      expect(res.body.items.length).toBeLessThanOrEqual(3);
      for (const item of res.body.items) {
        expect(item).toEqual({ item_id: expect.any(String), status: 'pending', provider_ref: '', provider_batch_ref: '', skip_reason: '', error_reason: '' });
        seen.push(item.item_id);
      }
      cursor = res.body.items_next_cursor ?? undefined;
      if (!cursor) break;
      expect(pages).toBeLessThan(5);
    }
    expect(seen).toEqual(ids);
    const res = await getVoiceJob(platform, agg.token, created.body.job_id);
    expect(res.body).toMatchObject({ job_id: created.body.job_id, channel: 'voice', status: 'queued', items_limit: 100, items_next_cursor: null });
    expect(res.body.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it('refuses items_limit over 1000 and a cursor it did not give', async () => {
    const created = await createVoiceJob(platform, agg.token, voiceBody(ids));
    const queries: Record<string, string | number>[] = [{ items_limit: 1001 }, { items_limit: 0 }, { cursor: 'bogus!' }, { cursor: Buffer.from('x9').toString('base64url') }];
    for (const query of queries) {
      const res = await getVoiceJob(platform, agg.token, created.body.job_id, query);
      expect(res.status, JSON.stringify(query)).toBe(400);
      expectShapeC(res.body, 'invalid_request');
    }
  });

  it('answers 304 to If-None-Match with the current ETag (also in a list or weak), 200 with the body otherwise', async () => {
    const created = await createVoiceJob(platform, agg.token, voiceBody(ids));
    const first = await getVoiceJob(platform, agg.token, created.body.job_id);
    const etag = first.headers.etag;
    expect(etag).toMatch(/^"\d+"$/);
    const cached = await getVoiceJob(platform, agg.token, created.body.job_id).set('if-none-match', etag);
    expect(cached.status).toBe(304);
    expect(cached.text).toBe('');
    expect((await getVoiceJob(platform, agg.token, created.body.job_id).set('if-none-match', `"x", W/${etag}`)).status).toBe(304);
    expect((await getVoiceJob(platform, agg.token, created.body.job_id).set('if-none-match', '"0"')).status).toBe(200);
    expect((await getVoiceJob(platform, agg.token, created.body.job_id)).headers.etag).toBe(etag);
  });

  it('reuses an answer for VOICE_POLL_MAX_AGE_MS and only for its organisation; a callback applied starts a re-read at once', async () => {
    const created = await createVoiceJob(platform, agg.token, voiceBody(ids));
    const jobId = created.body.job_id;
    const first = await getVoiceJob(platform, agg.token, jobId);
    expect(first.status).toBe(200);
    expect((await getVoiceJob(platform, agg.token, jobId)).body).toEqual(first.body);
    // Another organisation asking for the page just answered still gets 403, with nothing of it.
    const stranger = await platform.aggregator({ types: ['seeker'] });
    const forbidden = await getVoiceJob(platform, stranger.token, jobId);
    expect(forbidden.status).toBe(403);
    expect(JSON.stringify(forbidden.body)).not.toContain(ids[0]);
    // An item submitted as the worker submits it (item and counters, version bumped, one transaction):
    // within VOICE_POLL_MAX_AGE_MS the answer read before is reused.
    await platform.ctx.pool.query(`WITH moved AS (
        UPDATE aggregator.voice_job_items SET status = 'submitted', provider_ref = 'vc_reuse' WHERE job_id = $1 AND seq = 0 RETURNING job_id)
      UPDATE aggregator.voice_jobs SET pending = pending - 1, submitted = submitted + 1, version = version + 1, updated_at = now()
       WHERE job_id = (SELECT job_id FROM moved)`, [jobId]);
    const reused = await getVoiceJob(platform, agg.token, jobId);
    expect(reused.headers.etag).toBe(first.headers.etag);
    expect(reused.body).toEqual(first.body);
    // The provider's callback for it, applied by this process, starts a re-read without anyone
    // waiting for it: its effect shows within one read, long before the 10 s age of this platform.
    const body = JSON.stringify({ updates: [{ idempotency_key: `${jobId}:${ids[0]}`, provider_ref: 'vc_reuse', status: 'sent' }] });
    const callback = await request(platform.url('aggregator')).post('/v1/campaign/voice/callbacks').set('content-type', 'application/json')
      .set('x-voice-signature', signBody(PROVIDER_SECRET, body)).send(body);
    expect(callback.body).toEqual({ accepted: 1, ignored: 0 });
    const changed = await until('the callback\'s effect in the answer', async () => {
      const answer = await getVoiceJob(platform, agg.token, jobId);
      return answer.headers.etag !== first.headers.etag && answer;
    }, 5_000);
    expect(changed.status).toBe(200);
    expect(changed.headers.etag).toBe(`"${Number(JSON.parse(first.headers.etag)) + 2}"`);
    expect(changed.body).toMatchObject({ status: 'processing', counts: { pending: 6, submitted: 0, sent: 1 } });
    expect(changed.body.items[0]).toMatchObject({ item_id: ids[0], status: 'sent', provider_ref: 'vc_reuse' });
    expect((await getVoiceJob(platform, agg.token, jobId).set('if-none-match', first.headers.etag)).status).toBe(200);
    expect((await getVoiceJob(platform, stranger.token, jobId)).status).toBe(403);
  });

  it('answers 403 (shape C) for another organisation\'s job and for an export job, 404 for an unknown id', async () => {
    const created = await createVoiceJob(platform, agg.token, voiceBody(ids));
    const stranger = await platform.aggregator({ types: ['seeker'] });
    const forbidden = await getVoiceJob(platform, stranger.token, created.body.job_id);
    expect(forbidden.status).toBe(403);
    expectShapeC(forbidden.body, 'forbidden');
    expect(JSON.stringify(forbidden.body)).not.toContain(ids[0]);
    const exported = await createVoiceJob(platform, agg.token, { channel: 'export', item_ids: ids });
    expect(exported.status).toBe(202);
    expect(exported.body).toMatchObject({ channel: 'export', status: 'queued' });
    const wrongChannel = await getVoiceJob(platform, agg.token, exported.body.job_id);
    expect(wrongChannel.status).toBe(403);
    expectShapeC(wrongChannel.body, 'wrong_channel');
    const unknown = await getVoiceJob(platform, agg.token, randomUUID());
    expect(unknown.status).toBe(404);
    expectShapeC(unknown.body, 'not_found');
  });
});

describe('GET /v1/campaign/voice', () => {
  it('lists the organisation\'s jobs of both channels, newest first, paginated; none of another organisation', async () => {
    const own = await platform.aggregator({ types: ['seeker'] });
    const made = [];
    for (const channel of ['voice', 'export', 'voice']) {
      const body = channel === 'voice' ? voiceBody(ids.slice(0, 1)) : { channel, item_ids: ids.slice(0, 1) };
      made.push((await createVoiceJob(platform, own.token, body)).body.job_id);
    }
    const page1 = await request(platform.url('aggregator')).get('/v1/campaign/voice').query({ limit: 2 }).set('authorization', `Bearer ${own.token}`);
    expect(page1.status).toBe(200);
    expect(page1.body).toMatchObject({ page: 1, limit: 2, total: 3, has_more: true });
    const page2 = await request(platform.url('aggregator')).get('/v1/campaign/voice').query({ limit: 2, page: 2 }).set('authorization', `Bearer ${own.token}`);
    expect([...page1.body.voice_jobs, ...page2.body.voice_jobs].map((j: any) => j.job_id)).toEqual(made.reverse());
    expect(page2.body.has_more).toBe(false);
    const bad = await request(platform.url('aggregator')).get('/v1/campaign/voice').query({ limit: 201 }).set('authorization', `Bearer ${own.token}`);
    expect(bad.status).toBe(400);
  });
});

describe('POST /v1/campaign/voice/callbacks', () => {
  const path = '/v1/campaign/voice/callbacks';
  const update = { idempotency_key: `${randomUUID()}:${randomUUID()}`, provider_ref: 'vc_unknown', status: 'sent' };

  it('answers 401 without a valid signature, whatever the body', async () => {
    const body = JSON.stringify({ updates: [update] });
    const send = (signature?: string) => {
      const req = request(platform.url('aggregator')).post(path).set('content-type', 'application/json');
      return (signature ? req.set('x-voice-signature', signature) : req).send(body);
    };
    for (const signature of [undefined, 'garbage', signBody('another-secret-0123456789', body),
      signBody(PROVIDER_SECRET, body, Date.now() - 3_600_000), signBody(PROVIDER_SECRET, `${body} `)]) {
      const res = await send(signature);
      expect(res.status, String(signature)).toBe(401);
      expectShapeC(res.body, 'invalid_signature');
    }
  });

  it('accepts a signed batch and ignores updates for unknown refs', async () => {
    const body = JSON.stringify({ batch_ref: 'vb_x', updates: [update, { ...update, idempotency_key: 'not-ours' }] });
    const res = await request(platform.url('aggregator')).post(path).set('content-type', 'application/json')
      .set('x-voice-signature', signBody(PROVIDER_SECRET, body)).send(body);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ accepted: 0, ignored: 2 });
    const malformed = JSON.stringify({ updates: [{ ...update, status: 'maybe' }] });
    const bad = await request(platform.url('aggregator')).post(path).set('content-type', 'application/json')
      .set('x-voice-signature', signBody(PROVIDER_SECRET, malformed)).send(malformed);
    expect(bad.status).toBe(400);
    expectShapeC(bad.body, 'invalid_request');
    expect(JSON.stringify(bad.body)).toContain('updates.0.status');
    // Parsed in the callbacks' thread: signed bytes that are not JSON, or a NUL in a value, are 400 too, never 500.
    for (const [raw, code, field] of [['{"updates": [', 'invalid_json', ''], [JSON.stringify({ updates: [{ ...update, provider_ref: 'vc_\u0000' }] }), 'invalid_request', 'updates.0.provider_ref']]) {
      const res = await request(platform.url('aggregator')).post(path).set('content-type', 'application/json')
        .set('x-voice-signature', signBody(PROVIDER_SECRET, raw)).send(raw);
      expect(res.status, raw).toBe(400);
      expectShapeC(res.body, code);
      expect(JSON.stringify(res.body)).toContain(field);
    }
  });
});
