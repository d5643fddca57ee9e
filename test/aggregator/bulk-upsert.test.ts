/**
 * Keeping a list current by upload (issue 30): upsert, update and sync uploads through the HTTP
 * API and a real graphile-worker runner — row outcomes (created, updated with the changed fields,
 * unchanged, failed, skipped), one change everywhere (participant, signals item, search), nothing
 * written for unchanged rows, the dry run's diff, and the sync guard and pause.
 */
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUpload, csv, errorReport, participantsOf, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';
import { runLdp } from '../helpers/cli.ts';
import { participantKeys, ParticipantChangedError, updateParticipants } from '../../lib/aggregator/participants.ts';
import { participantOf } from '../../lib/aggregator/bulk/row-coercion.ts';
import { withTransaction } from '../../lib/platform/db.ts';

let platform: TestPlatform;
let searchKey: string;

const HEADER = ['external_id', 'name', 'category', 'locality', 'district', 'state', 'latitude', 'longitude'];
const facility = (id: number, locality = `Village ${id}`, category = 'Education') =>
  [`F-${id}`, `Facility ${id}`, category, locality, 'Kaithal', 'Haryana', String(29.6 + id / 1000), String(76.4 + id / 1000)];

beforeAll(async () => {
  // Chunks of four rows, so that each file spans several chunks processed two at a time.
  platform = await startTestPlatform({ worker: true, env: { BULK_UPLOAD_CHUNK_ROWS: '4', EMBEDDING_PROVIDER: 'hashing' } });
  searchKey = await platform.apiKey('search');
});
afterAll(() => platform.stop());

const api = (agg: TestAggregator) => ({
  post: (path: string, body: object = {}) => request(platform.url('aggregator')).post(path).set('authorization', `Bearer ${agg.token}`).send(body),
  get: (path: string) => request(platform.url('aggregator')).get(path).set('authorization', `Bearer ${agg.token}`),
});

/** Creates a job of `rows` and returns its id (the response checked). */
async function created(agg: TestAggregator, rows: string[][], options: { mode?: string; sync?: boolean; participantType?: string; header?: string[] } = {}) {
  const res = await createUpload(platform, agg.token, {
    participantType: options.participantType ?? 'provider', file: csv(options.header ?? HEADER, rows), mode: options.mode, sync: options.sync,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.upload_id as string;
}

/** Creates, starts (with `start`'s body) and waits for a job. */
async function run(agg: TestAggregator, rows: string[][], options: Parameters<typeof created>[2] & { start?: object } = {}) {
  const id = await created(agg, rows, options);
  const started = await startUpload(platform, agg.token, id, { attestation: true, ...options.start });
  expect(started.status, JSON.stringify(started.body)).toBe(200);
  return waitForJob(platform, agg.token, id);
}

/** The dry run of job `id` over its whole file, waited for. */
async function dryRun(agg: TestAggregator, id: string, rows = 200) {
  const res = await api(agg).post(`/v1/bulk-uploads/${id}/preview`, { rows });
  expect([200, 202]).toContain(res.status);
  let preview = res.body;
  await until('the dry run', async () => {
    preview = (await api(agg).get(`/v1/bulk-uploads/${id}/previews/${preview.preview_id}`)).body;
    return preview.status === 'completed';
  }, 30_000);
  return preview;
}

const item = async (itemId: string) => (await platform.ctx.pool.query('SELECT * FROM signals.items WHERE item_id = $1', [itemId])).rows[0];
const byExternalId = async (agg: TestAggregator) => new Map((await participantsOf(platform, agg.aggregatorId)).map((p) => [p.external_id as string, p]));

const search = (text: string) => request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send({
  context: { messageId: randomUUID(), networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
  message: { intent: { textSearch: text } },
});
const found = async (text: string): Promise<string[]> => (await search(text)).body.message.items.map((i: { item_id: string }) => i.item_id);

/** Waits until the search index holds every item of `agg` as signals last wrote it. */
async function indexed(agg: TestAggregator) {
  await until('the search index to catch up', async () => {
    const { rows: [r] } = await platform.ctx.pool.query(
      `SELECT count(*)::int AS behind FROM signals.items i LEFT JOIN search.items s USING (item_id)
        WHERE i.created_by = $1 AND (s.item_id IS NULL OR s.lifecycle_status <> i.lifecycle_status OR s.item_state <> i.item_state)`,
      [`aggregator:${agg.aggregatorId}`]);
    return r.behind === 0;
  }, 30_000);
}

describe('upsert by external id, and sync', () => {
  let agg: TestAggregator;
  const first = Array.from({ length: 10 }, (_, i) => facility(i + 1));
  // Rows 1-2 change (category; locality), 3 leaves the list, 11 is new, the rest are as before.
  const second = [
    facility(1, 'Village 1', 'Medical'), facility(2, 'Zorawarpur'), ...first.slice(3), facility(11),
  ];
  let before: Awaited<ReturnType<typeof byExternalId>>;

  beforeAll(async () => {
    agg = await platform.aggregator({ types: ['provider'] });
    const job = await run(agg, first);
    expect(job).toMatchObject({ status: 'completed', mode: 'create', passed: 10, created: 10, updated: 0, unchanged: 0 });
    await indexed(agg);
    before = await byExternalId(agg);
  });

  it('reports the diff before anything is written: created, updated with each field before and after, unchanged, and who would be paused', async () => {
    const id = await created(agg, second, { mode: 'upsert', sync: true });
    const preview = await dryRun(agg, id);
    expect(preview).toMatchObject({
      status: 'completed', whole_file: true, rows_read: 10,
      counts: { created: 1, updated: 2, unchanged: 7, failed: 0, skipped: 0, passed: 10 },
      pause: { count: 1, participants: [{ external_id: 'F-3', participant_id: before.get('F-3')!.participant_id, lifecycle_status: 'live' }] },
    });
    // Only the rows that change are listed, in file order; the name (an identity field) is masked.
    expect(preview.rows).toEqual([
      expect.objectContaining({ row_number: 2, outcome: 'updated', participant_id: before.get('F-1')!.participant_id, changes: [{ field: 'category', before: 'Education', after: 'Medical' }] }),
      expect.objectContaining({ row_number: 3, outcome: 'updated', changes: [{ field: 'locality', before: 'Village 2', after: 'Zorawarpur' }] }),
      expect.objectContaining({ row_number: 11, outcome: 'created', values: expect.objectContaining({ external_id: 'F-11', locality: 'Village 11' }) }),
    ]);
    expect(preview.pause.participants[0].name).toBe('F•••');
    // Nothing written: the job is pending, the participants as they were.
    expect((await api(agg).get(`/v1/bulk-uploads/${id}`)).body.status).toBe('pending');
    const after = await byExternalId(agg);
    expect(after.get('F-1')!.profile).toEqual(before.get('F-1')!.profile);
    expect(after.has('F-11')).toBe(false);
  });

  it('starts a sync upload only with the dry run\'s pause count', async () => {
    const id = await created(agg, second, { mode: 'upsert', sync: true });
    const start = (body: object) => startUpload(platform, agg.token, id, { attestation: true, ...body });
    const noConfirm = await start({});
    expect(noConfirm.status).toBe(400);
    expect(noConfirm.body.error).toMatchObject({ fields: { confirm_pause: expect.any(Array) } });
    const noDryRun = await start({ confirm_pause: 1 });
    expect(noDryRun.status).toBe(409);
    expect(noDryRun.body.error.code).toBe('dry_run_required');
    await dryRun(agg, id);
    const wrong = await start({ confirm_pause: 2 });
    expect(wrong.status).toBe(409);
    expect(wrong.body.error).toMatchObject({ code: 'pause_count_mismatch', detail: expect.stringMatching(/found 1 participants to pause/) });
    expect((await api(agg).get(`/v1/bulk-uploads/${id}`)).body.status).toBe('pending');
  });

  it('applies the change everywhere: participant, signals item (same id), search; pauses what left the list; records the history', async () => {
    const id = await created(agg, second, { mode: 'upsert', sync: true });
    await dryRun(agg, id);
    expect((await startUpload(platform, agg.token, id, { attestation: true, confirm_pause: 1 })).status).toBe(200);
    const job = await waitForJob(platform, agg.token, id);
    expect(job).toMatchObject({
      status: 'completed', mode: 'upsert', sync: true, total_rows: 10, passed: 10, failed: 0, skipped: 0,
      created: 1, updated: 2, unchanged: 7, confirm_pause: 1, to_pause: 1, paused: 1,
    });

    const after = await byExternalId(agg);
    expect(after.size).toBe(11);
    const f1 = after.get('F-1')!;
    expect(f1.participant_id).toBe(before.get('F-1')!.participant_id);
    expect(f1.profile.category).toBe('Medical');
    expect(f1.content_hash.equals(before.get('F-1')!.content_hash)).toBe(false);
    expect((await item(f1.participant_id)).item_state.category).toBe('Medical');
    expect((await item(after.get('F-2')!.participant_id)).item_state.locality).toBe('Zorawarpur');
    // Unchanged rows: not a write, in the aggregator or in signals.
    for (const id of ['F-4', 'F-10']) {
      expect(after.get(id)!.updated_at).toEqual(before.get(id)!.updated_at);
      expect((await item(after.get(id)!.participant_id)).updated_at).toEqual((await item(before.get(id)!.participant_id)).updated_at);
    }
    // Left the list: paused here and in signals, not deleted.
    const f3 = after.get('F-3')!;
    expect(f3).toMatchObject({ lifecycle_status: 'paused', paused_by_upload_id: id });
    expect((await item(f3.participant_id)).lifecycle_status).toBe('paused');

    const { rows: changes } = await platform.ctx.pool.query(
      `SELECT participant_id, row_number, kind, changed_fields FROM aggregator.participant_changes WHERE upload_id = $1 ORDER BY kind, row_number`, [id]);
    expect(changes).toEqual([
      { participant_id: f3.participant_id, row_number: null, kind: 'paused', changed_fields: ['lifecycle_status'] },
      { participant_id: f1.participant_id, row_number: 2, kind: 'updated', changed_fields: ['category'] },
      { participant_id: after.get('F-2')!.participant_id, row_number: 3, kind: 'updated', changed_fields: ['locality'] },
    ]);

    await indexed(agg);
    expect(await found('Zorawarpur')).toEqual([after.get('F-2')!.participant_id]);
    expect(await found('Village 3')).not.toContain(f3.participant_id);

    const dashboard = await until('the dashboard', async () => {
      const body = (await api(agg).get('/v1/dashboard')).body;
      const provider = body.by_domain?.find((d: { domain: string }) => d.domain === 'provider');
      return provider?.rollup.uploads.rows.updated === 2 ? provider : undefined;
    }, 20_000);
    expect(dashboard.rollup.uploads.rows).toMatchObject({ created: 11, updated: 2, unchanged: 7, paused: 1 });
  });

  it('makes live again what a later upload holds again, and writes nothing for a file uploaded again unchanged', async () => {
    const job = await run(agg, first, { mode: 'upsert' });
    // F-3 resumes; F-1 and F-2 change back; F-11 is not in this file (no sync: left alone).
    expect(job).toMatchObject({ status: 'completed', created: 0, updated: 3, unchanged: 7, paused: 0, to_pause: null });
    const after = await byExternalId(agg);
    expect(after.get('F-3')).toMatchObject({ lifecycle_status: 'live', paused_by_upload_id: null });
    expect((await item(after.get('F-3')!.participant_id)).lifecycle_status).toBe('live');
    expect(after.get('F-11')!.lifecycle_status).toBe('live');
    const { rows: changes } = await platform.ctx.pool.query(
      `SELECT row_number, kind, changed_fields FROM aggregator.participant_changes WHERE upload_id = $1 ORDER BY row_number, kind`, [job.upload_id]);
    expect(changes).toEqual([
      { row_number: 2, kind: 'updated', changed_fields: ['category'] },
      { row_number: 3, kind: 'updated', changed_fields: ['locality'] },
      { row_number: 4, kind: 'resumed', changed_fields: ['lifecycle_status'] },
    ]);
    await indexed(agg);
    expect(await found('Village 3')).toContain(after.get('F-3')!.participant_id);

    const jobsBefore = (await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM graphile_worker._private_jobs j
      JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = 'search-index-items'`)).rows[0].n;
    const again = await run(agg, first, { mode: 'upsert' });
    expect(again).toMatchObject({ status: 'completed', created: 0, updated: 0, unchanged: 10, passed: 10 });
    const same = await byExternalId(agg);
    for (const [id, p] of same) expect(p.updated_at, id).toEqual(after.get(id)!.updated_at);
    const jobsAfter = (await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM graphile_worker._private_jobs j
      JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = 'search-index-items'`)).rows[0].n;
    expect(jobsAfter).toBeLessThanOrEqual(jobsBefore);
  });

  it('keeps the fields a file has no column for, and clears a mapped field left empty', async () => {
    const job = await run(agg, [['F-5', 'Facility 5', 'Education', 'Kaithal', 'Haryana', '']],
      { mode: 'update', header: ['external_id', 'name', 'category', 'district', 'state', 'locality'] });
    expect(job).toMatchObject({ status: 'completed', updated: 1, unchanged: 0 });
    const f5 = (await byExternalId(agg)).get('F-5')!;
    expect(f5.profile).toMatchObject({ district: 'Kaithal', state: 'Haryana', latitude: 29.605, longitude: 76.405 });
    expect(f5.profile.locality).toBeUndefined();
    const { rows: [change] } = await platform.ctx.pool.query('SELECT changed_fields FROM aggregator.participant_changes WHERE upload_id = $1', [job.upload_id]);
    expect(change.changed_fields).toEqual(['locality']);
  });
});

describe('update uploads, and create uploads as before', () => {
  it('update changes existing participants only: an unknown external id is skipped with a reason', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    await run(agg, [facility(1), facility(2)]);
    const job = await run(agg, [facility(1, 'Kalayat'), facility(7)], { mode: 'update' });
    expect(job).toMatchObject({ status: 'completed', passed: 1, updated: 1, created: 0, skipped: 1 });
    const report = (await errorReport(platform, agg.token, job.upload_id)).body as string;
    expect(report).toContain('no participant with external_id ""F-7"" is registered with this aggregator');
    expect((await byExternalId(agg)).has('F-7')).toBe(false);
  });

  it('create skips a row whose participant exists, as before', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    await run(agg, [facility(1)]);
    const job = await run(agg, [facility(1, 'Elsewhere'), facility(2)]);
    expect(job).toMatchObject({ status: 'completed', mode: 'create', created: 1, skipped: 1, updated: 0 });
    expect((await byExternalId(agg)).get('F-1')!.profile.locality).toBe('Village 1');
  });

  it('refuses sync without upsert, and an unknown mode, naming the field', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    const sync = await createUpload(platform, agg.token, { participantType: 'provider', file: csv(HEADER, [facility(1)]), mode: 'update', sync: true });
    expect(sync.status).toBe(400);
    expect(sync.body.error.fields).toHaveProperty('sync');
    const mode = await createUpload(platform, agg.token, { participantType: 'provider', file: csv(HEADER, [facility(1)]), mode: 'merge' });
    expect(mode.status).toBe(400);
    expect(mode.body.error.fields).toHaveProperty('mode');
  });
});

describe('upsert by phone (a domain without an external id)', () => {
  const SEEKER = ['name', 'phone', 'email', 'age', 'education', 'skills', 'district', 'state'];
  const seeker = (name: string, phone: string, email: string, skills = 'electrician') => [name, phone, email, '24', 'iti', skills, 'Kaithal', 'Haryana'];

  it('matches on the phone, re-encrypts a changed e-mail with its blind index, and fails a row that would take another participant\'s e-mail', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const first = await run(agg, [seeker('Priya', '9876543210', 'priya@example.in'), seeker('Ravi', '9876500001', 'ravi@example.in')], { participantType: 'seeker', header: SEEKER });
    expect(first.created).toBe(2);
    const [priya, ravi] = await participantsOf(platform, agg.aggregatorId);
    const job = await run(agg, [
      seeker('Priya', '+91 98765 43210', 'priya.s@example.in', 'electrician|wiring'),
      seeker('Ravi', '9876500001', 'ravi@example.in'),
      seeker('Asha', '9876500002', 'ravi@example.in'),
    ], { participantType: 'seeker', header: SEEKER, mode: 'upsert' });
    expect(job).toMatchObject({ status: 'completed', updated: 1, unchanged: 1, failed: 0, skipped: 1, created: 0 });
    const stored = new Map((await participantsOf(platform, agg.aggregatorId)).map((p) => [p.participant_id, p]));
    expect(stored.size).toBe(2);
    const p = stored.get(priya.participant_id)!;
    expect(platform.ctx.pii.decrypt(p.email_encrypted)).toBe('priya.s@example.in');
    expect(p.email_index.equals(platform.ctx.pii.blindIndex('email', 'priya.s@example.in'))).toBe(true);
    expect(p.profile.skills).toEqual(['electrician', 'wiring']);
    // The name and phone the row leaves as they were keep their ciphertexts (not encrypted again).
    expect([p.name_encrypted, p.phone_encrypted]).toEqual([priya.name_encrypted, priya.phone_encrypted]);
    expect(stored.get(ravi.participant_id)!.updated_at).toEqual(ravi.updated_at);
    // Asha repeats Ravi's e-mail within the file: skipped, as in any upload.
    expect((await errorReport(platform, agg.token, job.upload_id)).body).toContain('email repeats row 3 of this file');

    // A new phone, found by the e-mail: the same participant with the phone changed (a list corrected after calls).
    const newPhone = await run(agg, [seeker('Ravi', '9876500009', 'ravi@example.in')], { participantType: 'seeker', header: SEEKER, mode: 'upsert' });
    expect(newPhone).toMatchObject({ status: 'completed', updated: 1, created: 0 });
    const moved = (await participantsOf(platform, agg.aggregatorId)).find((x) => x.participant_id === ravi.participant_id)!;
    expect(platform.ctx.pii.decrypt(moved.phone_encrypted)).toBe('+919876500009');
    expect(moved.phone_index.equals(platform.ctx.pii.blindIndex('phone', '+919876500009'))).toBe(true);

    // Priya's phone with Ravi's e-mail: Priya's row, taking what Ravi holds: failed, naming him.
    const taking = await run(agg, [seeker('Priya', '9876543210', 'ravi@example.in')], { participantType: 'seeker', header: SEEKER, mode: 'upsert' });
    expect(taking).toMatchObject({ status: 'completed', failed: 1, updated: 0, created: 0 });
    expect((await errorReport(platform, agg.token, taking.upload_id)).body)
      .toContain(`email is already held by participant ${ravi.participant_id} (row 3 of bulk upload ${first.upload_id})`);
  });
});

describe('the large-pause guard', () => {
  it('a sync file that would pause more than BULK_SYNC_MAX_PAUSE_FRACTION of the domain needs allow_large_pause', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    await run(agg, Array.from({ length: 10 }, (_, i) => facility(i + 1)));
    // A truncated file: 7 of the 10 left out.
    const id = await created(agg, [facility(1), facility(2), facility(3)], { mode: 'upsert', sync: true });
    const preview = await dryRun(agg, id);
    expect(preview.pause.count).toBe(7);
    const refused = await startUpload(platform, agg.token, id, { attestation: true, confirm_pause: 7 });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: 'large_pause_not_allowed', detail: expect.stringMatching(/7 of the 10/) });
    const started = await startUpload(platform, agg.token, id, { attestation: true, confirm_pause: 7, allow_large_pause: true });
    expect(started.status).toBe(200);
    expect(await waitForJob(platform, agg.token, id)).toMatchObject({ status: 'completed', unchanged: 3, paused: 7 });
    const statuses = (await participantsOf(platform, agg.aggregatorId)).map((p) => p.lifecycle_status);
    expect(statuses.filter((s) => s === 'paused')).toHaveLength(7);
  });
});

describe('ldp upload --mode upsert --sync', () => {
  it('--dry-run prints the diff and the count to pause; the real run needs that count and gives the same counts', async () => {
    const agg = await platform.aggregator({ types: ['provider'], roles: ['operator'] });
    await run(agg, Array.from({ length: 8 }, (_, i) => facility(i + 1)));
    const file = path.join(platform.dataDir, 'facilities-v2.csv');
    await writeFile(file, csv(HEADER, [facility(1, 'Rajaund'), ...Array.from({ length: 6 }, (_, i) => facility(i + 2)), facility(9)]));
    const env = { DATA_DIR: platform.dataDir, LDP_TOKEN: agg.token };
    const args = ['upload', file, '--type', 'provider', '--mode', 'upsert', '--sync', '--url', platform.url('aggregator')];

    const dry = await runLdp([...args, '--dry-run'], env);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/dry run of bulk upload [0-9a-f-]{36} \(facilities-v2\.csv, upsert, sync\): all 8 data rows; nothing was written/);
    expect(dry.stdout).toMatch(/^\s*2 {2}updated {2}locality: Village 1 → Rajaund$/m);
    expect(dry.stdout).toMatch(/^\s*9 {2}created/m);
    expect(dry.stdout).toContain('would be: 1 created, 1 updated, 6 unchanged, 0 failed, 0 skipped');
    expect(dry.stdout).toContain('to pause (no longer in the file): 1 — F-8');
    expect(dry.stdout).toContain('--mode upsert --sync --confirm-pause 1 --attest --wait');
    expect((await byExternalId(agg)).get('F-1')!.profile.locality).toBe('Village 1');

    const wrong = await runLdp([...args, '--confirm-pause', '3', '--attest', '--wait'], env);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/finds 1 participants to pause, not 3; nothing was started/);
    const real = await runLdp([...args, '--confirm-pause', '1', '--attest', '--wait', '--interval', '100'], env);
    expect(real.code, real.stderr).toBe(0);
    expect(real.stdout).toContain('completed: 8 rows — 8 passed, 0 failed, 0 skipped');
    expect(real.stdout).toContain('passed: 1 created, 1 updated, 6 unchanged; paused: 1');
    expect((await byExternalId(agg)).get('F-8')!.lifecycle_status).toBe('paused');
  });
});

describe('an update written over a participant that changed since it was compared', () => {
  it('is refused as a whole (the chunk rolls back and compares again), never written over the newer value', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    await run(agg, [facility(1)]);
    const stored = (await byExternalId(agg)).get('F-1')!;
    const domain = platform.ctx.network.domains.get('provider')!;
    const participant = participantOf(domain, { ...stored.profile, name: 'Facility 1', external_id: 'F-1', locality: 'Stale' });
    const update = {
      participantId: stored.participant_id, participant, keys: participantKeys(platform.ctx.pii, participant),
      contentHash: Buffer.alloc(32, 1), resume: false, expectedHash: stored.content_hash as Buffer,
    };
    // Another upload changed it meanwhile.
    const newer = await run(agg, [facility(1, 'Newer')], { mode: 'upsert' });
    expect(newer.updated).toBe(1);
    await expect(withTransaction(platform.ctx.pool, (client) => updateParticipants(client, platform.ctx.pii, { aggregatorId: agg.aggregatorId, domain }, [update])))
      .rejects.toThrow(ParticipantChangedError);
    expect((await byExternalId(agg)).get('F-1')!.profile.locality).toBe('Newer');
    // Compared with what is stored now, it is written.
    const current = (await byExternalId(agg)).get('F-1')!;
    await withTransaction(platform.ctx.pool, (client) => updateParticipants(client, platform.ctx.pii, { aggregatorId: agg.aggregatorId, domain },
      [{ ...update, expectedHash: current.content_hash }]));
    expect((await byExternalId(agg)).get('F-1')!.profile.locality).toBe('Stale');
  });
});

describe('an update signals refuses', () => {
  it('fails its row and writes the participant back as it was read; the other rows of the chunk are updated', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    await run(agg, [facility(1), facility(2)]);
    const before = (await byExternalId(agg)).get('F-1')!;
    // Signals holds item F-1 as another item type now: it answers `conflict` to the push of its update.
    await platform.ctx.pool.query(`UPDATE signals.items SET item_type = 'other' WHERE item_id = $1`, [before.participant_id]);
    const job = await run(agg, [facility(1, 'Moved'), facility(2, 'Moved')], { mode: 'upsert' });
    expect(job).toMatchObject({ status: 'completed', updated: 1, failed: 1, created: 0 });
    expect((await errorReport(platform, agg.token, job.upload_id)).body).toContain('signals refused the item');
    const after = await byExternalId(agg);
    const columns = ['name_encrypted', 'phone_encrypted', 'email_encrypted', 'phone_index', 'email_index', 'external_id', 'profile', 'locations', 'content_hash'];
    const pick = (p: Record<string, unknown>) => Object.fromEntries(columns.map((c) => [c, p[c]]));
    expect(pick(after.get('F-1')!)).toEqual(pick(before));
    expect(after.get('F-2')!.profile.locality).toBe('Moved');
  });
});
