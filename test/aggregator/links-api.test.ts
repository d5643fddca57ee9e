/**
 * Registration-link endpoints: creation rules (domain, mode, slug, expiry), defaults, minting of
 * the public URL, draft-only changes, activation and retirement moves, scoping, metrics, shape C.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let seekerAgg: TestAggregator;
let otherAgg: TestAggregator;
let viewer: TestAggregator;

function expectShapeC(body: any, title: string, code?: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code: code ?? expect.any(String), title, detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) }) });
}

const api = () => request(platform.url('aggregator'));
const create = (agg: TestAggregator, body: unknown) => api().post('/v1/links/create').set('authorization', `Bearer ${agg.token}`).send(body as object);

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['aggregator'] });
  seekerAgg = await platform.aggregator({ types: ['seeker'], roles: ['operator'] });
  otherAgg = await platform.aggregator({ types: ['seeker', 'provider'] });
  viewer = await platform.aggregator({ types: ['seeker'], roles: ['viewer'] });
});
afterAll(() => platform.stop());

describe('POST /v1/links/create', () => {
  it('creates a draft link by default, with the network default mode and a generated slug', async () => {
    const res = await create(seekerAgg, { domain: 'seeker', context: { camp: 'Karnal' } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      link_id: expect.stringMatching(/^[0-9a-f-]{36}$/), slug: expect.stringMatching(/^seeker-[0-9a-f]{8}$/), domain: 'seeker',
      status: 'draft', registration_mode: 'account_and_profile', context: { camp: 'Karnal' }, expires_at: null,
      public_url: null, qr_url: null, qr_expires_at: null, metrics: { total: 0, passed: 0, failed: 0, skipped: 0 },
      created_at: expect.any(String), updated_at: expect.any(String),
    });
    expect(res.headers.location).toBe(`/v1/links/${res.body.link_id}`);
  });

  it('mints the public URL of a live link', async () => {
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const res = await create(seekerAgg, { domain: 'seeker', slug: 'karnal-camp', status: 'live', registration_mode: 'account_only', expires_at: expires });
    expect(res.status).toBe(201);
    const base = platform.url('aggregator');
    expect(res.body).toMatchObject({
      slug: 'karnal-camp', status: 'live', registration_mode: 'account_only', expires_at: expires,
      public_url: `${base}/r/${seekerAgg.orgSlug}/karnal-camp`, qr_url: `${base}/r/${seekerAgg.orgSlug}/karnal-camp/qr.svg`, qr_expires_at: expires,
    });
  });

  it('answers 409 when the slug is taken in the organisation', async () => {
    await create(seekerAgg, { domain: 'seeker', slug: 'taken-slug' }).expect(201);
    const res = await create(seekerAgg, { domain: 'seeker', slug: 'taken-slug' });
    expect(res.status).toBe(409);
    expectShapeC(res.body, 'Conflict', 'slug_taken');
    // Another organisation may use the same slug.
    await create(otherAgg, { domain: 'seeker', slug: 'taken-slug' }).expect(201);
  });

  it('answers 403 for a domain the aggregator type may not onboard', async () => {
    const res = await create(seekerAgg, { domain: 'provider' });
    expect(res.status).toBe(403);
    expectShapeC(res.body, 'Forbidden', 'domain_not_allowed');
  });

  it.each([
    [{ domain: 'pets' }, 'domain'],
    [{ domain: 'seeker', registration_mode: 'express' }, 'registration_mode'],
    [{ domain: 'seeker', slug: 'Bad Slug' }, 'slug'],
    [{ domain: 'seeker', slug: 'ab' }, 'slug'],
    [{ domain: 'seeker', slug: 'a--b' }, 'slug'],
    [{ domain: 'seeker', expires_at: '2001-01-01T00:00:00Z' }, 'expires_at'],
    [{ domain: 'seeker', expires_at: 'tomorrow' }, 'expires_at'],
    [{ domain: 'seeker', status: 'retired' }, 'status'],
    [{}, 'domain'],
  ])('answers 400 naming the field for %j', async (body, field) => {
    const res = await create(seekerAgg, body);
    expect(res.status).toBe(400);
    expectShapeC(res.body, 'Bad Request');
    expect(Object.keys(res.body.error.fields)).toContain(field);
  });

  it('answers 401 without a token and 403 for a viewer', async () => {
    const anonymous = await api().post('/v1/links/create').send({ domain: 'seeker' });
    expect(anonymous.status).toBe(401);
    expectShapeC(anonymous.body, 'Unauthorized');
    const res = await create(viewer, { domain: 'seeker' });
    expect(res.status).toBe(403);
    expectShapeC(res.body, 'Forbidden', 'insufficient_role');
  });
});

describe('link moves and reads', () => {
  it('activates a draft (idempotent when live), retires it, and refuses to activate it again (409)', async () => {
    const { body: link } = await create(seekerAgg, { domain: 'seeker' }).expect(201);
    const auth = { authorization: `Bearer ${seekerAgg.token}` };
    const first = await api().post(`/v1/links/${link.link_id}/activate`).set(auth);
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ status: 'live', public_url: expect.stringContaining(`/r/${seekerAgg.orgSlug}/${link.slug}`) });
    const again = await api().post(`/v1/links/${link.link_id}/activate`).set(auth);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);

    const patch = await api().patch(`/v1/links/${link.link_id}`).set(auth).send({ context: { x: 1 } });
    expect(patch.status).toBe(409);
    expectShapeC(patch.body, 'Conflict', 'link_not_draft');

    const retired = await api().post(`/v1/links/${link.link_id}/retire`).set(auth);
    expect(retired.status).toBe(200);
    expect(retired.body.status).toBe('retired');
    const refused = await api().post(`/v1/links/${link.link_id}/activate`).set(auth);
    expect(refused.status).toBe(409);
    expectShapeC(refused.body, 'Conflict', 'link_retired');
    const { rows: [row] } = await platform.ctx.pool.query('SELECT status FROM aggregator.registration_links WHERE link_id = $1', [link.link_id]);
    expect(row.status).toBe('retired');
  });

  it('changes a draft with PATCH', async () => {
    const { body: link } = await create(seekerAgg, { domain: 'seeker' }).expect(201);
    const res = await api().patch(`/v1/links/${link.link_id}`).set('authorization', `Bearer ${seekerAgg.token}`)
      .send({ slug: 'renamed-draft', registration_mode: 'account_only', context: { a: 'b' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ slug: 'renamed-draft', registration_mode: 'account_only', context: { a: 'b' }, status: 'draft' });
    const bad = await api().patch(`/v1/links/${link.link_id}`).set('authorization', `Bearer ${seekerAgg.token}`).send({ status: 'live' });
    expect(bad.status).toBe(400);
    expectShapeC(bad.body, 'Bad Request');
  });

  it('answers 404 for another aggregator’s link and for unknown ids', async () => {
    const { body: link } = await create(seekerAgg, { domain: 'seeker' }).expect(201);
    for (const path of [`/v1/links/${link.link_id}`, '/v1/links/not-a-uuid', '/v1/links/00000000-0000-4000-8000-000000000000']) {
      const res = await api().get(path).set('authorization', `Bearer ${otherAgg.token}`);
      expect(res.status).toBe(404);
      expectShapeC(res.body, 'Not Found', 'link_not_found');
    }
    const activate = await api().post(`/v1/links/${link.link_id}/activate`).set('authorization', `Bearer ${otherAgg.token}`);
    expect(activate.status).toBe(404);
  });

  it('lists the caller’s links newest first, paginated', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    for (const slug of ['list-one', 'list-two', 'list-three']) await create(agg, { domain: 'seeker', slug }).expect(201);
    const res = await api().get('/v1/links?limit=2').set('authorization', `Bearer ${agg.token}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ page: 1, limit: 2, total: 3, has_more: true });
    expect(res.body.links.map((l: any) => l.slug)).toEqual(['list-three', 'list-two']);
    const page2 = await api().get('/v1/links?limit=2&page=2').set('authorization', `Bearer ${agg.token}`);
    expect(page2.body.links.map((l: any) => l.slug)).toEqual(['list-one']);
    expect(page2.body.has_more).toBe(false);
  });
});
