/**
 * The aggregator dashboard and profile export (GET /v1/dashboard, POST /v1/dashboard/export/profiles)
 * after onboarding the real medium facility file (../shared/data) and a generated seeker file
 * through the HTTP API with a real worker: totals against the database, cursor paging without gaps
 * or repeats, the stored rollup within the TTL and refresh=true, exports scoped to the caller.
 */
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { participantPageQuery, type PageRequest } from '../../lib/aggregator/dashboard.ts';
import { insertParticipants } from '../../lib/aggregator/participants.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { csv, onboard } from '../helpers/bulk-upload.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { absent, NEEDS_SHARED, titled } from '../helpers/requires.ts';

const MEDIUM = path.resolve(REPO_ROOT, '../shared/data/pmgsy-schools-clinics-haryana-punjab/pmgsy_education_medical_haryana_punjab.csv');
const COLUMN_MAP = path.join(REPO_ROOT, 'fixtures/column-maps/pmgsy-facilities.json');

const seekerFile = (count: number, seed: number) => {
  const rows = [...generateSeekers({ count, seed, errorRate: 0.05, duplicateRate: 0.03, places: BUILT_IN_PLACES })];
  return csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c])));
};

/** Reads a response body as text (CSV). */
const text = (req: request.Test) => req.buffer(true).parse((res, done) => {
  let body = '';
  res.setEncoding('utf8');
  res.on('data', (chunk: string) => { body += chunk; });
  res.on('end', () => done(null, body));
});

// The real medium file lives outside the repository (../shared/data).
const noData = absent([MEDIUM], NEEDS_SHARED);
describe.skipIf(noData !== '')(titled('dashboard and export after onboarding the real medium file and generated seekers', noData), () => {
  let platform: TestPlatform;
  let agg: TestAggregator;
  let other: TestAggregator;
  const get = (query: Record<string, string | number>, token = agg.token) =>
    request(platform.url('aggregator')).get('/v1/dashboard').query(query).set('authorization', `Bearer ${token}`);

  beforeAll(async () => {
    platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true, env: { DASHBOARD_TTL_SECONDS: '3600', BULK_UPLOAD_CHUNK_ROWS: '2000' } });
    agg = await platform.aggregator();
    other = await platform.aggregator();
    const columnMap = JSON.parse(await readFile(COLUMN_MAP, 'utf8'));
    const facilities = await onboard(platform, agg.token, { participantType: 'provider', file: await readFile(MEDIUM), filename: path.basename(MEDIUM), columnMap });
    expect(facilities).toMatchObject({ status: 'completed', total_rows: 19118 });
    const seekers = await onboard(platform, agg.token, { participantType: 'seeker', file: seekerFile(1500, 3), filename: 'seekers.csv' });
    expect(seekers.status).toBe('completed');
    expect(seekers.failed + seekers.skipped).toBeGreaterThan(0);
    expect((await onboard(platform, other.token, { participantType: 'seeker', file: seekerFile(600, 4), filename: 'theirs.csv' })).status).toBe('completed');
  }, 600_000);
  afterAll(() => platform?.stop());

  it('shows per domain the totals by lifecycle status, source and uploads that the database holds', async () => {
    const res = await get({ refresh: 'true', limit: 5 });
    expect(res.status).toBe(200);
    expect(res.body.metadata).toMatchObject({ ttl_seconds: 3600, refreshed: true, stale: false });
    const pool = platform.ctx.pool;
    const { rows: counts } = await pool.query(
      `SELECT domain, coalesce(lifecycle_status, 'pending') AS status, bulk_upload_id IS NULL AS link, count(*)::int AS n
         FROM aggregator.participants WHERE aggregator_id = $1 GROUP BY 1, 2, 3`, [agg.aggregatorId]);
    const { rows: uploads } = await pool.query(
      `SELECT participant_type AS domain, count(*)::int AS n, sum(passed)::int AS passed, sum(failed)::int AS failed, sum(skipped)::int AS skipped
         FROM aggregator.bulk_uploads WHERE aggregator_id = $1 GROUP BY 1`, [agg.aggregatorId]);
    expect(res.body.by_domain.map((d: { domain: string }) => d.domain).sort()).toEqual(['provider', 'seeker']);
    for (const slice of res.body.by_domain) {
      const mine = counts.filter((c) => c.domain === slice.domain);
      const total = mine.reduce((a, c) => a + c.n, 0);
      expect(total).toBeGreaterThan(1000);
      const { participants: p, uploads: u, live_share: liveShare } = slice.rollup;
      expect(p.total).toBe(total);
      expect(slice.total_matching).toBe(total);
      for (const status of ['draft', 'live', 'paused', 'retired', 'pending']) {
        expect(p.by_lifecycle_status[status]).toBe(mine.filter((c) => c.status === status).reduce((a, c) => a + c.n, 0));
      }
      expect(p.by_source).toEqual({ bulk_upload: total, registration_link: 0 });
      const up = uploads.find((x) => x.domain === slice.domain);
      expect(u).toMatchObject({ total: up.n, by_status: { completed: up.n }, rows: { passed: up.passed, failed: up.failed, skipped: up.skipped } });
      expect(up.passed).toBe(total);
      expect(liveShare).toBeCloseTo(p.by_lifecycle_status.live / total, 4);
      expect(Date.parse(slice.rollup.last_activity_at)).toBeGreaterThan(Date.now() - 3_600_000);
      expect(slice.participants).toHaveLength(5);
      expect(slice.participants[0]).toMatchObject({ source: 'bulk_upload', display_name: expect.any(String), lifecycle_status: expect.any(String) });
    }
    expect(res.body.by_domain.find((d: { domain: string }) => d.domain === 'provider').rollup.participants.total).toBe(19118);
  });

  it('pages through every participant with the cursor, without gaps or repeats, names decrypted', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const res = await get({ domain: 'provider', limit: 200, ...(cursor ? { cursor } : {}) });
      expect(res.status).toBe(200);
      const [slice] = res.body.by_domain;
      expect(slice.domain).toBe('provider');
      seen.push(...slice.participants.map((p: { participant_id: string }) => p.participant_id));
      cursor = slice.next_cursor ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBe(Math.ceil(19118 / 200));
    expect(new Set(seen).size).toBe(seen.length);
    const { rows } = await platform.ctx.pool.query(
      `SELECT participant_id, name_encrypted FROM aggregator.participants WHERE aggregator_id = $1 AND domain = 'provider'
        ORDER BY created_at DESC, participant_id DESC`, [agg.aggregatorId]);
    expect(seen).toEqual(rows.map((r) => r.participant_id));
    // Page numbers give the same rows as the cursor, and names are the caller's decrypted ones.
    const page3 = (await get({ domain: 'provider', limit: 50, page: 3 })).body.by_domain[0].participants;
    expect(page3.map((p: { participant_id: string }) => p.participant_id)).toEqual(seen.slice(100, 150));
    expect(page3[0].display_name).toBe(platform.ctx.pii.decrypt(rows[100].name_encrypted));
  });

  it('reads pages through the dashboard indexes, without sorting', async () => {
    await platform.ctx.pool.query('VACUUM (ANALYZE) aggregator.participants');
    const { rows: [mid] } = await platform.ctx.pool.query(
      `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS t, participant_id FROM aggregator.participants
        WHERE aggregator_id = $1 AND domain = 'provider' ORDER BY created_at DESC, participant_id DESC OFFSET 9000 LIMIT 1`, [agg.aggregatorId]);
    const page = { aggregatorId: agg.aggregatorId, domain: 'provider', offset: 0, limit: 50 };
    const cursor = { domain: 'provider', createdAt: mid.t, participantId: mid.participant_id };
    // With a status the planner may take either index (the general one, filtering, when most rows match).
    const inputs: PageRequest[] = [{ ...page, cursor }, { ...page, status: 'live' }, { ...page, status: 'live', cursor }, { ...page, status: 'draft' }, { ...page, offset: 5000 }, { ...page, status: 'live', offset: 5000 }];
    for (const input of inputs) {
      const query = participantPageQuery(input);
      const { rows } = await platform.ctx.pool.query({ text: `EXPLAIN ${query.text}`, values: query.values });
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toMatch(input.status ? /Index Scan using participants_dashboard(_status)?_idx/ : /Index Scan using participants_dashboard_idx/);
      expect(plan).not.toMatch(/Sort|Seq Scan/);
    }
  });

  it('filters by lifecycle and status, with totals from the rollup', async () => {
    const res = await get({ lifecycle: 'live', limit: 200 });
    for (const slice of res.body.by_domain) {
      expect(slice.total_matching).toBe(slice.rollup.participants.by_lifecycle_status.live);
      expect(slice.participants.every((p: { lifecycle_status: string }) => p.lifecycle_status === 'live')).toBe(true);
    }
    const none = await get({ lifecycle: 'live', status: 'draft' });
    expect(none.body.by_domain.every((d: { total_matching: number; participants: unknown[] }) => d.total_matching === 0 && d.participants.length === 0)).toBe(true);
  });

  it('answers from the stored rollup within the TTL and recomputes with refresh=true', async () => {
    await get({ refresh: 'true', limit: 1 });
    // No recomputation left pending from the uploads.
    for (let i = 0; i < 100; i++) {
      const { rows } = await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = 'aggregator-dashboard-refresh'`);
      if (rows[0].n === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const before = await get({ domain: 'seeker', limit: 1 });
    const seekersBefore = before.body.by_domain[0].rollup.participants;
    // A participant registered through a link (no bulk upload), its name a formula.
    const seeker = platform.ctx.network.domains.get('seeker')!;
    const registeredId = randomUUID();
    await withTransaction(platform.ctx.pool, (client) => insertParticipants(client, platform.ctx.pii, { aggregatorId: agg.aggregatorId, orgId: agg.orgId, domain: seeker }, [{
      participantId: registeredId, keys: {},
      participant: { identity: { name: '=HYPERLINK("http://evil.test","x")', phone: '+919812345678' }, profile: { state: 'Haryana', skills: ['tailoring', '-sewing'] }, locations: [] },
    }]));
    const cached = await get({ domain: 'seeker', limit: 1 });
    expect(cached.body.metadata).toMatchObject({ refreshed: false, computed_at: before.body.metadata.computed_at });
    expect(cached.body.by_domain[0].rollup.participants).toEqual(seekersBefore);
    // The page itself is read live.
    expect(cached.body.by_domain[0].participants[0].participant_id).toBe(registeredId);

    const fresh = await get({ domain: 'seeker', limit: 1, refresh: 'true' });
    expect(fresh.body.metadata.refreshed).toBe(true);
    expect(Date.parse(fresh.body.metadata.computed_at)).toBeGreaterThan(Date.parse(before.body.metadata.computed_at));
    const after = fresh.body.by_domain[0];
    expect(after.rollup.participants.total).toBe(seekersBefore.total + 1);
    expect(after.rollup.participants.by_source.registration_link).toBe(1);
    expect(after.rollup.participants.by_lifecycle_status.pending).toBe(seekersBefore.by_lifecycle_status.pending + 1);
    expect(after.participants[0]).toMatchObject({ participant_id: registeredId, source: 'registration_link', lifecycle_status: 'pending', display_name: '=HYPERLINK("http://evil.test","x")' });
  });

  it('validates the query (400 naming the field)', async () => {
    for (const [query, field] of [
      [{ limit: 201 }, 'limit'], [{ limit: 0 }, 'limit'], [{ page: 0 }, 'page'], [{ status: 'Live!' }, 'status'],
      [{ status: 'x'.repeat(33) }, 'status'], [{ lifecycle: 'paused' }, 'lifecycle'], [{ refresh: 'yes' }, 'refresh'],
      [{ domain: 'martian' }, 'domain'], [{ cursor: 'nonsense' }, 'cursor'],
    ] as const) {
      const res = await get(query);
      expect(res.status, JSON.stringify(query)).toBe(400);
      expect(res.body.error.fields).toHaveProperty([field]);
    }
  });

  it('exports exactly the caller’s profiles of 1,000 ids, decrypted, none of another aggregator', async () => {
    const pool = platform.ctx.pool;
    const mine = (await pool.query(
      `(SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 AND domain = 'provider' LIMIT 450)
       UNION ALL (SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 AND domain = 'seeker' ORDER BY created_at DESC LIMIT 150)`,
      [agg.aggregatorId])).rows.map((r) => r.participant_id);
    const theirs = (await pool.query('SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 LIMIT 400', [other.aggregatorId])).rows.map((r) => r.participant_id);
    expect(mine).toHaveLength(600);
    expect(theirs).toHaveLength(400);
    const ids = [...mine, ...theirs].sort();
    const res = await text(request(platform.url('aggregator')).post('/v1/dashboard/export/profiles').set('authorization', `Bearer ${agg.token}`).send({ item_ids: ids }));
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="?profiles-[a-z0-9-]+-\d{8}T\d{6}Z\.csv"?$/);
    expect(res.headers['x-absent-item-count']).toBe('400');
    expect(res.headers['x-exported-item-count']).toBe('600');
    expect(res.body.startsWith('\uFEFF')).toBe(true);
    const [header, ...rows] = parseCsv(res.body.slice(1)) as string[][];
    expect(header.slice(0, 5)).toEqual(['participant_id', 'domain', 'name', 'phone', 'email']);
    expect(header.slice(-4)).toEqual(['lifecycle_status', 'source', 'bulk_upload_id', 'created_at']);
    expect(rows).toHaveLength(600);
    const exported = rows.map((r) => r[0]);
    expect(exported).toEqual(ids.filter((id) => mine.includes(id)));
    expect(exported.some((id) => theirs.includes(id))).toBe(false);
    const { rows: stored } = await pool.query('SELECT participant_id, name_encrypted, phone_encrypted FROM aggregator.participants WHERE participant_id = ANY($1::uuid[])', [mine]);
    const byId = new Map(stored.map((s) => [s.participant_id, s]));
    for (const r of rows) {
      const s = byId.get(r[0])!;
      expect(protectFree(r[2])).toBe(platform.ctx.pii.decrypt(s.name_encrypted));
      if (s.phone_encrypted) expect(r[3]).toBe(platform.ctx.pii.decrypt(s.phone_encrypted));
    }
    const { rows: [audit] } = await pool.query('SELECT * FROM aggregator.profile_exports WHERE aggregator_id = $1 ORDER BY created_at DESC LIMIT 1', [agg.aggregatorId]);
    expect(audit).toMatchObject({ exported_by: `aggregator:${agg.aggregatorId}`, requested_count: 1000, exported_count: 600, absent_count: 400, domain: null });
    expect(audit.fields).toEqual(header);
  });

  it('protects cells against formulas, narrows to a domain, and refuses viewers and bad bodies', async () => {
    const { rows: [registered] } = await platform.ctx.pool.query(
      `SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 AND bulk_upload_id IS NULL`, [agg.aggregatorId]);
    const { rows: [provider] } = await platform.ctx.pool.query(
      `SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 AND domain = 'provider' LIMIT 1`, [agg.aggregatorId]);
    const post = (body: unknown, token = agg.token) => text(request(platform.url('aggregator')).post('/v1/dashboard/export/profiles').set('authorization', `Bearer ${token}`).send(body as object));
    const res = await post({ item_ids: [registered.participant_id, provider.participant_id, 'not-a-uuid', registered.participant_id], domain: 'seeker' });
    expect(res.status).toBe(200);
    expect(res.headers['x-absent-item-count']).toBe('2');
    const [header, row, ...rest] = parseCsv(res.body.slice(1)) as string[][];
    expect(rest).toHaveLength(0);
    expect(header).toEqual(['participant_id', 'domain', 'name', 'phone', 'email', ...platform.ctx.network.domains.get('seeker')!.fields.filter((f) => !f.identity).map((f) => f.name), 'lifecycle_status', 'source', 'bulk_upload_id', 'created_at']);
    const at = (c: string) => row[header.indexOf(c)];
    expect(at('name')).toBe(`'=HYPERLINK("http://evil.test","x")`);
    expect(at('phone')).toBe('+919812345678');
    expect(at('skills')).toBe('tailoring|-sewing');
    expect(at('source')).toBe('registration_link');

    const viewer = await platform.ctx.tokens.issue({ sub: 'viewer-1', aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker', 'provider'], roles: ['viewer'] }, 600);
    const refused = await post({ item_ids: [registered.participant_id] }, viewer);
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body).error.code).toBe('insufficient_role');
    expect((await get({ limit: 1 }, viewer)).status).toBe(200);
    for (const body of [{ item_ids: [] }, { item_ids: Array.from({ length: 1001 }, () => randomUUID()) }, {}, { item_ids: ['x'], domain: 'martian' }]) {
      const bad = await post(body);
      expect(bad.status).toBe(400);
      expect(Object.keys(JSON.parse(bad.body).error.fields)[0]).toMatch(/^(item_ids|domain)$/);
    }
  });
});

/** A cell as written, without the formula guard's leading apostrophe. */
function protectFree(cell: string): string {
  return /^'[=+\-@\t\r]/.test(cell) ? cell.slice(1) : cell;
}
