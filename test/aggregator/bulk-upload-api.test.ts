/**
 * Bulk-upload endpoints of the aggregator service: creating a job from a multipart upload, reading
 * and listing jobs, starting them (attestation, idempotency), scoping and roles. No worker runs
 * here: a started job stays running (processing is tested in bulk-upload-processing.test.ts).
 */
import { randomUUID } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUpload, csv, startUpload } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let agg: TestAggregator;

const FILE = csv(['name', 'phone', 'state'], [['Priya Sharma', '9876543210', 'Haryana']]);

/** Every object stored under DATA_DIR/objects (relative paths). */
async function storedObjects(p: TestPlatform): Promise<string[]> {
  const root = path.join(p.dataDir, 'objects');
  const entries = await readdir(root, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => path.relative(root, path.join(e.parentPath, e.name)));
}

function expectShapeC(body: any, status: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code: expect.any(String), title: status, detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) }) });
}

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['aggregator'] });
  agg = await platform.aggregator({ types: ['seeker'], roles: ['operator'] });
});
afterAll(() => platform.stop());

describe('POST /v1/bulk-uploads', () => {
  it('stores the file and answers 201 with a pending job', async () => {
    const res = await createUpload(platform, agg.token, { participantType: 'seeker', file: FILE, filename: 'seekers.csv' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      upload_id: expect.stringMatching(/^[0-9a-f-]{36}$/), status: 'pending', status_reason: null, participant_type: 'seeker',
      total_rows: null, passed: 0, failed: 0, skipped: 0, errors_csv_object_key: null,
      schema_id: 'urn:ldp:local-discovery:seeker', schema_version: '1.0.0', completed_at: null,
      file_name: 'seekers.csv', file_format: 'csv', file_size_bytes: FILE.length,
    });
    expect(Date.parse(res.body.created_at)).toBeGreaterThan(Date.now() - 60_000);
    expect(res.headers.location).toBe(`/v1/bulk-uploads/${res.body.upload_id}`);
    const { rows: [row] } = await platform.ctx.pool.query('SELECT file_object_key FROM aggregator.bulk_uploads WHERE upload_id = $1', [res.body.upload_id]);
    const stored = await platform.ctx.storage.get(row.file_object_key);
    const chunks: Buffer[] = [];
    for await (const chunk of stored) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(FILE)).toBe(true);
  });

  it('accepts the file before participant_type, and recognises XLSX by its content whatever the name', async () => {
    const res = await request(platform.url('aggregator')).post('/v1/bulk-uploads').set('authorization', `Bearer ${agg.token}`)
      .attach('file', FILE, 'seekers.xlsx').field('participant_type', 'seeker');
    expect(res.status).toBe(201);
    expect(res.body.file_format).toBe('csv');
  });

  it('validates column_map against the schema of participant_type', async () => {
    const ok = await createUpload(platform, agg.token, { file: FILE, participantType: 'seeker', columnMap: { 'Full Name': 'name', Remarks: null } });
    expect(ok.status).toBe(201);
    expect(ok.body.column_map).toEqual({ 'Full Name': 'name', Remarks: null });
    const unknown = await createUpload(platform, agg.token, { file: FILE, participantType: 'seeker', columnMap: { Mobile: 'mobile_number' } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.fields).toEqual({ column_map: [expect.stringMatching(/unknown seeker fields "mobile_number"/)] });
    const notJson = await request(platform.url('aggregator')).post('/v1/bulk-uploads').set('authorization', `Bearer ${agg.token}`)
      .field('participant_type', 'seeker').field('column_map', '{nope').attach('file', FILE, 'a.csv');
    expect(notJson.status).toBe(400);
    expect(Object.keys(notJson.body.error.fields)).toEqual(['column_map']);
  });

  it('answers 400 naming participant_type or file when missing or unknown, and leaves nothing behind', async () => {
    const before = await storedObjects(platform);
    const noType = await createUpload(platform, agg.token, { file: FILE });
    expect(noType.status).toBe(400);
    expectShapeC(noType.body, 'Bad Request');
    expect(Object.keys(noType.body.error.fields)).toEqual(['participant_type']);
    const badType = await createUpload(platform, agg.token, { file: FILE, participantType: 'volunteer' });
    expect(badType.status).toBe(400);
    expect(badType.body.error.detail).toMatch(/participant_type: must be one of seeker, provider/);
    const noFile = await request(platform.url('aggregator')).post('/v1/bulk-uploads').set('authorization', `Bearer ${agg.token}`)
      .field('participant_type', 'seeker');
    expect(noFile.status).toBe(400);
    expect(Object.keys(noFile.body.error.fields)).toEqual(['file']);
    expect(await storedObjects(platform)).toEqual(before);
  });

  it('answers 415 for content that is neither CSV nor XLSX (by content, not name) and for a JSON body', async () => {
    const before = await storedObjects(platform);
    const pdf = await createUpload(platform, agg.token, { participantType: 'seeker', file: Buffer.from('%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n', 'latin1'), filename: 'list.csv' });
    expect(pdf.status).toBe(415);
    expectShapeC(pdf.body, 'Unsupported Media Type');
    expect(pdf.body.error.detail).toMatch(/PDF/);
    expect(await storedObjects(platform)).toEqual(before);
    const json = await request(platform.url('aggregator')).post('/v1/bulk-uploads').set('authorization', `Bearer ${agg.token}`).send({ participant_type: 'seeker' });
    expect(json.status).toBe(415);
  });

  it('keeps nothing of an upload the client abandons halfway', async () => {
    const owner = await platform.aggregator({ types: ['seeker'] });
    const boundary = 'ldp-test-boundary';
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="participant_type"\r\n\r\nseeker\r\n`
      + `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\nContent-Type: text/csv\r\n\r\n`);
    const part = Buffer.from(`name,phone,state\r\n${'Priya Sharma,9876543210,Haryana\r\n'.repeat(2000)}`);
    const { port } = new URL(platform.url('aggregator'));
    const socket = net.connect(Number(port), '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(`POST /v1/bulk-uploads HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${owner.token}\r\n`
      + `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${head.length + part.length * 10}\r\n\r\n`);
    socket.write(head);
    socket.write(part);
    // Wait until the server is writing the object, then hang up.
    const writing = async () => (await readdir(path.join(platform.dataDir, 'objects'), { recursive: true }).catch(() => [])).some((f) => f.includes(owner.aggregatorId));
    for (let i = 0; i < 200 && !(await writing()); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await writing()).toBe(true);
    socket.destroy();
    for (let i = 0; ; i++) {
      const left = (await storedObjects(platform)).concat(
        (await readdir(path.join(platform.dataDir, 'objects'), { recursive: true }).catch(() => [])).filter((f) => f.endsWith('.partial')));
      if (!left.some((f) => f.includes(owner.aggregatorId))) break;
      if (i > 100) throw new Error(`left behind: ${left.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const { rows } = await platform.ctx.pool.query('SELECT 1 FROM aggregator.bulk_uploads WHERE aggregator_id = $1', [owner.aggregatorId]);
    expect(rows).toHaveLength(0);
  });

  it('answers 403 for a participant type the aggregator type does not allow and for a viewer', async () => {
    const provider = await createUpload(platform, agg.token, { participantType: 'provider', file: FILE });
    expect(provider.status).toBe(403);
    expect(provider.body.error.code).toBe('domain_not_allowed');
    const viewer = await platform.aggregator({ types: ['seeker'], roles: ['viewer'] });
    const res = await createUpload(platform, viewer.token, { participantType: 'seeker', file: FILE });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_role');
  });
});

describe('reading, listing and starting bulk uploads', () => {
  it('lists the caller\'s jobs newest first, page by page', async () => {
    const own = await platform.aggregator({ types: ['seeker'] });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await createUpload(platform, own.token, { participantType: 'seeker', file: FILE })).body.upload_id);
    const page1 = await request(platform.url('aggregator')).get('/v1/bulk-uploads?limit=2').set('authorization', `Bearer ${own.token}`);
    expect(page1.status).toBe(200);
    expect(page1.body).toMatchObject({ page: 1, limit: 2, total: 3, has_more: true });
    expect(page1.body.bulk_uploads.map((j: { upload_id: string }) => j.upload_id)).toEqual([ids[2], ids[1]]);
    const page2 = await request(platform.url('aggregator')).get('/v1/bulk-uploads?limit=2&page=2').set('authorization', `Bearer ${own.token}`);
    expect(page2.body.bulk_uploads.map((j: { upload_id: string }) => j.upload_id)).toEqual([ids[0]]);
    expect(page2.body.has_more).toBe(false);
    const bad = await request(platform.url('aggregator')).get('/v1/bulk-uploads?limit=500').set('authorization', `Bearer ${own.token}`);
    expect(bad.status).toBe(400);
    expect(Object.keys(bad.body.error.fields)).toEqual(['limit']);
  });

  it('starts a pending job only with attestation true, records who and when, and is idempotent', async () => {
    const { body: job } = await createUpload(platform, agg.token, { participantType: 'seeker', file: FILE });
    const missing = await startUpload(platform, agg.token, job.upload_id, {});
    expect(missing.status).toBe(400);
    expect(Object.keys(missing.body.error.fields)).toEqual(['attestation']);
    const no = await startUpload(platform, agg.token, job.upload_id, { attestation: false });
    expect(no.status).toBe(400);
    expect((await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${job.upload_id}`).set('authorization', `Bearer ${agg.token}`)).body.status).toBe('pending');

    const started = await startUpload(platform, agg.token, job.upload_id, { attestation: true, note: 'extra keys are allowed' });
    expect(started.status).toBe(200);
    expect(started.body).toMatchObject({ upload_id: job.upload_id, status: 'running', attested_by: `aggregator:${agg.aggregatorId}`, attested_at: expect.any(String) });
    const { rows: jobs } = await platform.ctx.pool.query(
      `SELECT j.payload FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = 'bulk-upload-stage'`);
    expect(jobs.map((j) => j.payload)).toContainEqual({ upload_id: job.upload_id, _request_id: started.headers['x-request-id'] });

    const again = await startUpload(platform, agg.token, job.upload_id);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(started.body);
    const { rows: [count] } = await platform.ctx.pool.query(
      `SELECT count(*)::int AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE t.identifier = 'bulk-upload-stage' AND j.payload->>'upload_id' = $1`, [job.upload_id]);
    expect(count.n).toBe(1);
  });

  it('answers 404 for another aggregator\'s job, an unknown id or a malformed one; 403 when a viewer starts', async () => {
    const { body: job } = await createUpload(platform, agg.token, { participantType: 'seeker', file: FILE });
    const other = await platform.aggregator({ types: ['seeker'] });
    for (const [method, suffix] of [['get', ''], ['post', '/start'], ['get', '/errors']] as const) {
      const res = await request(platform.url('aggregator'))[method](`/v1/bulk-uploads/${job.upload_id}${suffix}`)
        .set('authorization', `Bearer ${other.token}`).send(method === 'post' ? { attestation: true } : undefined);
      expect(res.status).toBe(404);
      expectShapeC(res.body, 'Not Found');
    }
    const unknown = await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${randomUUID()}`).set('authorization', `Bearer ${agg.token}`);
    expect(unknown.status).toBe(404);
    const malformed = await request(platform.url('aggregator')).get('/v1/bulk-uploads/not-a-uuid').set('authorization', `Bearer ${agg.token}`);
    expect(malformed.status).toBe(404);
    expectShapeC(malformed.body, 'Not Found');

    const viewer = await platform.aggregator({ types: ['seeker'], roles: ['viewer'] });
    const { body: viewersJob } = await createUpload(platform, (await platform.aggregator({ types: ['seeker'] })).token, { participantType: 'seeker', file: FILE });
    const start = await startUpload(platform, viewer.token, viewersJob.upload_id);
    expect(start.status).toBe(403);
  });

  it('answers 404 in shape C for the error report of a job that has none', async () => {
    const { body: job } = await createUpload(platform, agg.token, { participantType: 'seeker', file: FILE });
    const res = await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${job.upload_id}/errors`).set('authorization', `Bearer ${agg.token}`);
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: 'no_error_report', detail: expect.stringMatching(/status pending/) });
  });
});

describe('upload size limit', () => {
  let small: TestPlatform;
  beforeAll(async () => {
    small = await startTestPlatform({ services: ['aggregator'], env: { BULK_UPLOAD_MAX_BYTES: '2kb' } });
  });
  afterAll(() => small.stop());

  it('answers 413 for a file over BULK_UPLOAD_MAX_BYTES and leaves no job and no object behind', async () => {
    const owner = await small.aggregator({ types: ['seeker'] });
    const rows = Array.from({ length: 100 }, (_, i) => [`Seeker ${i}`, `98765${String(i).padStart(5, '0')}`, 'Haryana']);
    const big = csv(['name', 'phone', 'state'], rows);
    expect(big.length).toBeGreaterThan(2000);
    const res = await createUpload(small, owner.token, { participantType: 'seeker', file: big });
    expect(res.status).toBe(413);
    expectShapeC(res.body, 'Payload Too Large');
    expect(res.body.error.detail).toMatch(/2000 bytes/);
    const { rows: jobs } = await small.ctx.pool.query('SELECT 1 FROM aggregator.bulk_uploads WHERE aggregator_id = $1', [owner.aggregatorId]);
    expect(jobs).toHaveLength(0);
    expect(await storedObjects(small)).toEqual([]);

    const fits = await createUpload(small, owner.token, { participantType: 'seeker', file: csv(['name', 'phone', 'state'], rows.slice(0, 10)) });
    expect(fits.status).toBe(201);
  });
});
