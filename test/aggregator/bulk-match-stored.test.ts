/**
 * `POST /v1/bulk-uploads/{id}/match` answers the suggestions the worker computed once when the file
 * came in (task bulk-upload-suggest, stored with the job): it never reads the file, nor does the
 * console's job page; admin and operator only; MATCH_RATE per aggregator (issue 29, Trust II).
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MATCH_RATE } from '../../api/aggregator/bulk-uploads.ts';
import { createConsoleSession } from '../../lib/aggregator/console/sessions.ts';
import { sourceObjectKey } from '../../lib/aggregator/bulk/upload-jobs.ts';
import { csv, createUpload } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let agg: TestAggregator;

const FILE = csv(['Full Name', 'Mobile No', 'State', 'District'], [['Asha Devi', '9812345670', 'Haryana', 'Kaithal']]);

beforeAll(async () => {
  // A short wait for suggestions not yet stored, so that the 409 comes quickly.
  platform = await startTestPlatform({ services: ['aggregator'], worker: true, env: { BULK_PREVIEW_WAIT_MS: '300' } });
  agg = await platform.aggregator({ types: ['seeker'] });
}, 60_000);
afterAll(() => platform?.stop());

const match = (uploadId: string, token = agg.token) =>
  request(platform.url('aggregator')).post(`/v1/bulk-uploads/${uploadId}/match`).set('authorization', `Bearer ${token}`);

/** A pending upload of `file` whose suggestions the worker has stored. */
async function uploaded(file = FILE, token = agg.token): Promise<string> {
  const created = await createUpload(platform, token, { participantType: 'seeker', file });
  expect(created.status).toBe(201);
  const id = created.body.upload_id as string;
  await until('the stored suggestions', async () => (await platform.ctx.pool.query(
    'SELECT 1 FROM aggregator.bulk_uploads WHERE upload_id = $1 AND match_suggestions IS NOT NULL', [id])).rowCount);
  return id;
}

describe('POST /v1/bulk-uploads/{id}/match: stored suggestions', () => {
  it('answers them with the stored file gone, and the console job page shows them too', async () => {
    const id = await uploaded();
    const before = await match(id);
    expect(before.status).toBe(200);
    await platform.ctx.storage.delete(sourceObjectKey(agg.aggregatorId, id));

    const res = await match(id);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual(before.body);
    expect(res.body).toMatchObject({ upload_id: id, participant_type: 'seeker', headers: ['Full Name', 'Mobile No', 'State', 'District'], sampled_rows: 1 });
    expect(res.body.suggested_mapping).toMatchObject({ phone: { column: 'Mobile No' } });

    const session = await createConsoleSession(platform.ctx.pool, {
      sub: 'console:operator', aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker'], roles: ['operator'],
    }, 600);
    const page = await request(platform.url('aggregator')).get(`/console/uploads/${id}`).set('cookie', `ldp_console=${session}`).set('accept', 'text/html');
    expect(page.status).toBe(200);
    expect(page.text).toContain('id="match-fields"');
    expect(page.text).toContain('Mobile No');
  });

  it('answers 409 with Retry-After while the worker has not stored them, 422 for a file it could not read', async () => {
    const id = await uploaded();
    await platform.ctx.pool.query('UPDATE aggregator.bulk_uploads SET match_suggestions = NULL WHERE upload_id = $1', [id]);
    const pending = await match(id);
    expect(pending.status).toBe(409);
    expect(pending.body.error.code).toBe('suggestions_not_ready');
    expect(Number(pending.headers['retry-after'])).toBeGreaterThan(0);

    const empty = await uploaded(Buffer.from(''));
    const unreadable = await match(empty);
    expect(unreadable.status).toBe(422);
    expect(unreadable.body.error).toMatchObject({ code: 'unreadable_file', detail: expect.stringContaining('The file cannot be read') });
  });

  it('refuses a viewer (403 insufficient_role)', async () => {
    const id = await uploaded();
    const viewer = await platform.ctx.tokens.issue({
      sub: 'viewer', aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker'], roles: ['viewer'],
    }, 600);
    const res = await match(id, viewer);
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_role');
  });

  it(`answers 429 with Retry-After beyond ${MATCH_RATE.points} calls per aggregator per minute`, async () => {
    const busy = await platform.aggregator({ types: ['seeker'] });
    const id = await uploaded(FILE, busy.token);
    for (let i = 0; i < MATCH_RATE.points; i++) expect((await match(id, busy.token)).status).toBe(200);
    const limited = await match(id, busy.token);
    expect(limited.status).toBe(429);
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    // Another aggregator has its own allowance.
    expect((await match(await uploaded())).status).toBe(200);
  });
});
