/**
 * Bulk-upload test helpers: create, start and wait for jobs through the aggregator's HTTP API,
 * read back what was stored (participants, signals items, row outcomes), write small CSV files.
 */
import { stringify } from 'csv-stringify/sync';
import request from 'supertest';
import type { BulkUploadJson } from '../../lib/aggregator/bulk/upload-jobs.ts';
import type { TestPlatform } from './platform.ts';

/** A CSV (RFC 4180, CRLF) of `rows` under `header`. */
export function csv(header: string[], rows: (string | number)[][]): Buffer {
  return Buffer.from(stringify([header, ...rows.map((r) => r.map(String))], { record_delimiter: 'windows' }));
}

export interface CreateOptions {
  participantType?: string;
  file: Buffer;
  filename?: string;
  columnMap?: Record<string, string | null>;
  /** create (the default), upsert or update (issue 30). */
  mode?: string;
  sync?: boolean;
}

/** `POST /v1/bulk-uploads` (multipart); returns the supertest response. */
export function createUpload(platform: TestPlatform, token: string, options: CreateOptions) {
  let req = request(platform.url('aggregator')).post('/v1/bulk-uploads').set('authorization', `Bearer ${token}`);
  if (options.participantType !== undefined) req = req.field('participant_type', options.participantType);
  if (options.columnMap) req = req.field('column_map', JSON.stringify(options.columnMap));
  if (options.mode) req = req.field('mode', options.mode);
  if (options.sync !== undefined) req = req.field('sync', String(options.sync));
  return req.attach('file', options.file, options.filename ?? 'upload.csv');
}

/** `POST /v1/bulk-uploads/{id}/start` with the attestation. */
export function startUpload(platform: TestPlatform, token: string, uploadId: string, body: unknown = { attestation: true }) {
  return request(platform.url('aggregator')).post(`/v1/bulk-uploads/${uploadId}/start`).set('authorization', `Bearer ${token}`).send(body as object);
}

/** Polls `GET /v1/bulk-uploads/{id}` until the job is completed or failed. */
export async function waitForJob(platform: TestPlatform, token: string, uploadId: string, timeoutMs = 60_000): Promise<BulkUploadJson> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${uploadId}`).set('authorization', `Bearer ${token}`);
    if (res.status !== 200) throw new Error(`GET bulk upload answered ${res.status}: ${JSON.stringify(res.body)}`);
    if (res.body.status === 'completed' || res.body.status === 'failed') return res.body;
    if (Date.now() > deadline) throw new Error(`bulk upload ${uploadId} still ${res.body.status} after ${timeoutMs} ms: ${JSON.stringify(res.body)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Creates, starts and waits for a job; fails the test on an unexpected status. */
export async function onboard(platform: TestPlatform, token: string, options: CreateOptions): Promise<BulkUploadJson> {
  const created = await createUpload(platform, token, { participantType: 'seeker', ...options });
  if (created.status !== 201) throw new Error(`create answered ${created.status}: ${JSON.stringify(created.body)}`);
  const started = await startUpload(platform, token, created.body.upload_id);
  if (started.status !== 200) throw new Error(`start answered ${started.status}: ${JSON.stringify(started.body)}`);
  return waitForJob(platform, token, created.body.upload_id);
}

/** `GET /v1/bulk-uploads/{id}/errors` as text (status checked by the caller). */
export function errorReport(platform: TestPlatform, token: string, uploadId: string) {
  return request(platform.url('aggregator')).get(`/v1/bulk-uploads/${uploadId}/errors`).set('authorization', `Bearer ${token}`)
    .buffer(true).parse((res, done) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => { text += chunk; });
      res.on('end', () => done(null, text));
    });
}

/** Participants of `aggregatorId` as stored (raw columns). */
export async function participantsOf(platform: TestPlatform, aggregatorId: string) {
  const { rows } = await platform.ctx.pool.query(
    'SELECT * FROM aggregator.participants WHERE aggregator_id = $1 ORDER BY bulk_upload_id, row_number', [aggregatorId]);
  return rows;
}

/** Signals items created by `aggregatorId` (read straight from the signals schema, as a check). */
export async function itemsOf(platform: TestPlatform, aggregatorId: string) {
  const { rows } = await platform.ctx.pool.query(
    'SELECT * FROM signals.items WHERE created_by = $1 ORDER BY item_id', [`aggregator:${aggregatorId}`]);
  return rows;
}
