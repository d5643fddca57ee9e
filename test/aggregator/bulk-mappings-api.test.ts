/**
 * Saved bulk-upload mappings through the aggregator's HTTP API (issue 17): create, list, read,
 * new versions, retire; uploads created with a mapping_id record it; every mapping error is a 400
 * naming the field. No worker runs here.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let agg: TestAggregator;
let other: TestAggregator;

const MAPPING = {
  INSTNM: 'name',
  category: { column: 'SECTOR', map: { 1: 'Education', 2: 'Medical' }, default: 'Agro' },
  services: { column: 'PROGRAMS', split: ';' },
  state: { value: 'Kerala' },
};
const FILE = csv(['INSTNM', 'SECTOR', 'PROGRAMS', 'district'], [['School', '1', 'a;b', 'Ernakulam']]);

const api = (method: 'get' | 'post' | 'put' | 'delete', path: string, token = agg.token) =>
  request(platform.url('aggregator'))[method](path).set('authorization', `Bearer ${token}`);

beforeAll(async () => {
  // The worker computes a file's match suggestions when it is received (tasks/bulk-upload-suggest.ts).
  platform = await startTestPlatform({ services: ['aggregator'], worker: true });
  agg = await platform.aggregator({ types: ['provider'], roles: ['operator'] });
  other = await platform.aggregator({ types: ['provider'], roles: ['admin'] });
});
afterAll(() => platform.stop());

describe('saved mappings', () => {
  let id: string;

  it('saves a mapping as version 1 and reads it back', async () => {
    const res = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'Kerala schools', participant_type: 'provider', mapping: MAPPING });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ id: expect.stringMatching(/^[0-9a-f-]{36}$/), version: 1, latest_version: 1, name: 'Kerala schools', participant_type: 'provider', retired_at: null });
    expect(res.body.mapping).toEqual({ ...MAPPING, category: { column: 'SECTOR', map: { 1: 'Education', 2: 'Medical' }, default: 'Agro' } });
    expect(res.headers.location).toBe(`/v1/bulk-uploads/mappings/${res.body.id}`);
    id = res.body.id;
    const one = await api('get', `/v1/bulk-uploads/mappings/${id}`);
    expect(one.status).toBe(200);
    expect(one.body).toEqual(res.body);
  });

  it('lists the newest version of each mapping of the caller only', async () => {
    const list = await api('get', '/v1/bulk-uploads/mappings');
    expect(list.status).toBe(200);
    expect(list.body.mappings.map((m: any) => m.id)).toEqual([id]);
    const theirs = await api('get', '/v1/bulk-uploads/mappings', other.token);
    expect(theirs.body.mappings).toEqual([]);
    expect((await api('get', `/v1/bulk-uploads/mappings/${id}`, other.token)).status).toBe(404);
  });

  it('makes a new version with PUT and keeps the old one readable; uploads record id and version', async () => {
    const v1Upload = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', id).attach('file', FILE, 'a.csv');
    expect(v1Upload.status).toBe(201);
    expect(v1Upload.body).toMatchObject({ mapping_id: id, mapping_version: 1, column_map: MAPPING });

    const put = await api('put', `/v1/bulk-uploads/mappings/${id}`).send({ mapping: { ...MAPPING, state: { value: 'Tamil Nadu' } } });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ id, version: 2, latest_version: 2, name: 'Kerala schools', mapping: { state: { value: 'Tamil Nadu' } } });
    const v1 = await api('get', `/v1/bulk-uploads/mappings/${id}?version=1`);
    expect(v1.body).toMatchObject({ version: 1, latest_version: 2, mapping: { state: { value: 'Kerala' } } });
    const list = await api('get', '/v1/bulk-uploads/mappings');
    expect(list.body.mappings.map((m: any) => [m.id, m.version])).toEqual([[id, 2]]);

    const v2Upload = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', id).attach('file', FILE, 'a.csv');
    expect(v2Upload.body).toMatchObject({ mapping_id: id, mapping_version: 2, column_map: { state: { value: 'Tamil Nadu' } } });
    const pinned = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', id).field('mapping_version', '1').attach('file', FILE, 'a.csv');
    expect(pinned.body).toMatchObject({ mapping_id: id, mapping_version: 1 });
    const job = await api('get', `/v1/bulk-uploads/${v2Upload.body.upload_id}`);
    expect(job.body).toMatchObject({ mapping_id: id, mapping_version: 2 });
  });

  it('refuses uploads with a mapping of another type, of another aggregator, or with both column_map and mapping_id', async () => {
    const seekers = await platform.aggregator({ types: ['seeker', 'provider'] });
    const theirs = await api('post', '/v1/bulk-uploads', seekers.token).field('participant_type', 'seeker').field('mapping_id', id).attach('file', FILE, 'a.csv');
    expect(theirs.status).toBe(400);
    expect(Object.keys(theirs.body.error.fields)).toEqual(['mapping_id']);
    const wrongType = await api('post', '/v1/bulk-uploads/mappings', seekers.token).send({ name: 's', participant_type: 'seeker', mapping: { Mobile: 'phone' } });
    const mismatch = await api('post', '/v1/bulk-uploads', seekers.token).field('participant_type', 'provider').field('mapping_id', wrongType.body.id).attach('file', FILE, 'a.csv');
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.error.detail).toMatch(/is for seeker participants, not provider/);
    const both = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', id)
      .field('column_map', JSON.stringify(MAPPING)).attach('file', FILE, 'a.csv');
    expect(both.status).toBe(400);
    expect(Object.keys(both.body.error.fields)).toEqual(['mapping_id']);
  });

  it('retires with DELETE: gone from the list and from new uploads, still readable', async () => {
    expect((await api('delete', `/v1/bulk-uploads/mappings/${id}`)).status).toBe(204);
    expect((await api('get', '/v1/bulk-uploads/mappings')).body.mappings).toEqual([]);
    const one = await api('get', `/v1/bulk-uploads/mappings/${id}`);
    expect(one.body.retired_at).toEqual(expect.any(String));
    const upload = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', id).attach('file', FILE, 'a.csv');
    expect(upload.status).toBe(400);
    expect(upload.body.error.detail).toMatch(/is retired/);
    const put = await api('put', `/v1/bulk-uploads/mappings/${id}`).send({ mapping: MAPPING });
    expect(put.status).toBe(409);
    expect((await api('delete', '/v1/bulk-uploads/mappings/00000000-0000-4000-8000-000000000000')).status).toBe(404);
  });
});

describe('mapping errors are 400 naming the field', () => {
  it.each([
    [{ category: { value: 'Schools' } }, 'mapping.category', /category: value "Schools" is not a valid value/],
    [{ category: { column: 'SECTOR', map: { 1: 'Edu' } } }, 'mapping.category', /"Edu" is not a valid value/],
    [{ name: { column: 'N', split: ';' } }, 'mapping.name', /split is for list fields/],
    [{ SECTOR: 'sector' }, 'mapping', /unknown provider fields "sector"/],
    [{ sector: { column: 'S' } }, 'mapping', /"sector" is not a provider field/],
  ])('POST /v1/bulk-uploads/mappings %j', async (mapping, field, message) => {
    const res = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'x', participant_type: 'provider', mapping });
    expect(res.status).toBe(400);
    expect(res.body.error.fields).toEqual({ [field]: [expect.stringMatching(message)] });
  });

  it('in column_map at upload creation too, leaving no job behind', async () => {
    const res = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider')
      .field('column_map', JSON.stringify({ capacity: { value: 'many' } })).attach('file', FILE, 'a.csv');
    expect(res.status).toBe(400);
    expect(res.body.error.fields).toEqual({ 'column_map.capacity': [expect.stringMatching(/capacity must be a whole number/)] });
    const { rows } = await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.bulk_uploads WHERE aggregator_id = $1', [agg.aggregatorId]);
    expect(rows[0].n).toBe(3);
  });

  it('and for the body of a saved mapping', async () => {
    const res = await api('post', '/v1/bulk-uploads/mappings').send({ participant_type: 'nope', mapping: [] });
    expect(res.status).toBe(400);
    expect(Object.keys(res.body.error.fields).sort()).toEqual(['mapping', 'name']);
    const type = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'x', participant_type: 'nope', mapping: {} });
    expect(type.body.error.fields).toEqual({ participant_type: [expect.any(String)] });
  });
});

describe('POST /v1/bulk-uploads/{id}/match', () => {
  // Our provider template with its headers renamed as an operator's own sheet would have them.
  const renamed = csv(
    ['Facility Name', 'Type', 'Dist', 'State Name', 'Village', 'Mobile No', 'Seats', 'Remarks'],
    [
      ['Govt School Kaithal', 'Education', 'Kaithal', 'Haryana', 'Siwan', '9876543210', '120', 'new building'],
      ['PHC Siwan', 'Medical', 'Kaithal', 'Haryana', 'Siwan', '9876543211', '', ''],
      ['Bus depot', 'transport/admin', 'Hisar', 'haryana', 'Barwala', '', '40', 'open 24h'],
    ]);

  it('suggests the right columns for renamed headers, with scores, and names what is left', async () => {
    const created = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').attach('file', renamed, 'renamed.csv');
    expect(created.status).toBe(201);
    const res = await api('post', `/v1/bulk-uploads/${created.body.upload_id}/match`);
    expect(res.status).toBe(200);
    const byField = Object.fromEntries(res.body.fields.map((f: any) => [f.field, f]));
    expect(byField.phone.matched).toEqual({ column: 'Mobile No', by: 'header' });
    for (const [field, column] of [['name', 'Facility Name'], ['category', 'Type'], ['district', 'Dist'], ['state', 'State Name'], ['locality', 'Village'], ['capacity', 'Seats']]) {
      expect(byField[field].matched, field).toBeNull();
      expect(byField[field].candidates[0], field).toMatchObject({ column, score: expect.any(Number) });
      expect(byField[field].candidates.length).toBeLessThanOrEqual(3);
    }
    expect(byField.category.candidates[0]).toMatchObject({ value_score: 1 });
    expect(res.body.suggested_mapping).toEqual({
      phone: { column: 'Mobile No' }, name: { column: 'Facility Name' }, category: { column: 'Type' }, district: { column: 'Dist' },
      state: { column: 'State Name' }, locality: { column: 'Village' }, capacity: { column: 'Seats' },
    });
    expect(res.body.required_unmatched.sort()).toEqual(['category', 'district', 'name', 'state']);
    expect(res.body.unmatched_columns).toEqual(['Facility Name', 'Type', 'Dist', 'State Name', 'Village', 'Seats', 'Remarks']);
    expect(res.body.sampled_rows).toBe(3);

    // The suggested mapping, saved, onboards the file's header.
    const saved = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'renamed', participant_type: 'provider', mapping: res.body.suggested_mapping });
    expect(saved.status).toBe(201);
    const again = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', saved.body.id).attach('file', renamed, 'renamed.csv');
    const matched = await api('post', `/v1/bulk-uploads/${again.body.upload_id}/match`);
    expect(matched.body.required_unmatched).toEqual([]);
    expect(matched.body.unmatched_columns).toEqual(['Remarks']);
  });

  it('is 404 for a job of another aggregator', async () => {
    const created = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').attach('file', renamed, 'renamed.csv');
    expect((await api('post', `/v1/bulk-uploads/${created.body.upload_id}/match`, other.token)).status).toBe(404);
  });
});
