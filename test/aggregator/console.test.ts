/**
 * The operator console over HTTP (api/console): console links are single-use and give an
 * HttpOnly SameSite=Lax session; every form needs its CSRF token; roles are enforced server-side;
 * the upload form onboards through the API's receiver and the job streams its progress over SSE
 * (also `GET /v1/bulk-uploads/{id}/events`); the catalogues are in step; `ldp console` prints a link.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { catalogueKeys } from '../../api/console/render.ts';
import { csv, createUpload, startUpload } from '../helpers/bulk-upload.ts';
import { runLdp } from '../helpers/cli.ts';
import { ConsoleClient, consoleLinkFor } from '../helpers/console.ts';
import { createVoiceJob, phones, seedSeekers } from '../helpers/voice.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

describe('operator console over HTTP', () => {
  let platform: TestPlatform;
  let agg: TestAggregator;
  let base: string;

  beforeAll(async () => {
    platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true });
    agg = await platform.aggregator({ name: 'Sahyog Foundation', types: ['seeker'] });
    base = platform.url('aggregator');
  }, 60_000);
  afterAll(() => platform?.stop());

  it('sends a visitor without a session to the sign-in page', async () => {
    const res = await request(base).get('/console/uploads').set('accept', 'text/html');
    expect(res.status).toBe(303);
    expect(res.headers.location).toBe('/console/login');
  });

  it('exchanges a console link once for an HttpOnly, SameSite=Lax session, and signs out', async () => {
    const link = await consoleLinkFor(platform, agg);
    const client = new ConsoleClient(base);
    const res = await client.signIn(link);
    expect(res.status).toBe(303);
    expect(res.headers.location).toBe('/console/uploads');
    const session = (res.headers['set-cookie'] as unknown as string[]).find((c) => c.startsWith('ldp_console='))!;
    expect(session).toMatch(/HttpOnly/);
    expect(session).toMatch(/SameSite=Lax/);
    expect(session).not.toMatch(/Secure/); // served on loopback over http
    const stored = await platform.ctx.pool.query('SELECT aggregator_id FROM aggregator.console_sessions');
    expect(stored.rows).toContainEqual({ aggregator_id: agg.aggregatorId });
    const page = await client.get('/console/uploads');
    expect(page.status).toBe(200);
    expect(page.text).toContain('<h1>Uploads</h1>');

    // The same link again: refused.
    const again = await new ConsoleClient(base).signIn(link);
    expect(again.status).toBe(401);
    expect(again.text).toContain('already been used');

    const out = await client.post('/console/logout', { _csrf: await client.csrf() });
    expect(out.status).toBe(303);
    expect((await client.get('/console/uploads')).status).toBe(303);
  });

  it('refuses an ordinary API token and a forged one as a console link', async () => {
    for (const token of [agg.token, 'not-a-jwt']) {
      const client = new ConsoleClient(base);
      const page = await client.get(`/console/login?token=${encodeURIComponent(token)}`);
      const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)![1];
      const res = await client.post('/console/login', { _csrf: csrf, token });
      expect(res.status).toBe(401);
      expect(res.text).toContain('invalid or has expired');
    }
  });

  it('refuses a form without its CSRF token, and with another session\'s', async () => {
    const a = new ConsoleClient(base);
    await a.signIn(await consoleLinkFor(platform, agg));
    const b = new ConsoleClient(base);
    await b.signIn(await consoleLinkFor(platform, agg));
    const missing = await a.post('/console/links', { domain: 'seeker' });
    expect(missing.status).toBe(403);
    expect(missing.text).toContain('did not come from this console');
    const foreign = await a.post('/console/links', { domain: 'seeker', _csrf: await b.csrf() });
    expect(foreign.status).toBe(403);
    const ok = await a.post('/console/links', { domain: 'seeker', _csrf: await a.csrf('/console/links') });
    expect(ok.status).toBe(303);
    expect(ok.headers.location).toMatch(/^\/console\/links\/[0-9a-f-]{36}$/);
  });

  it('lets a viewer read but not change anything', async () => {
    const viewer = new ConsoleClient(base);
    await viewer.signIn(await consoleLinkFor(platform, agg, 'viewer'));
    const list = await viewer.get('/console/links');
    expect(list.status).toBe(200);
    expect(list.text).not.toContain('action="/console/links"');
    const csrf = await viewer.csrf('/console/links');
    const create = await viewer.post('/console/links', { domain: 'seeker', _csrf: csrf });
    expect(create.status).toBe(403);
    expect(create.text).toContain('needs one of the roles admin, operator');
    const upload = await request(base).post(`/console/uploads?_csrf=${encodeURIComponent(csrf)}`).set('cookie', viewer.cookieHeader())
      .field('participant_type', 'seeker').attach('file', csv(['name', 'phone'], [['Asha', '9812345670']]), 'one.csv');
    expect(upload.status).toBe(403);
    const { rows } = await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.bulk_uploads WHERE aggregator_id = $1', [agg.aggregatorId]);
    expect(rows[0].n).toBe(0);
  });

  it('uploads through the form, starts with the attestation, streams progress and pages the failed rows', async () => {
    const client = new ConsoleClient(base);
    await client.signIn(await consoleLinkFor(platform, agg, 'operator'));
    const csrf = await client.csrf();
    const rows = Array.from({ length: 60 }, (_, i) => [`Person ${i}`, i % 2 === 0 ? `98123${String(45000 + i).padStart(5, '0')}` : 'not a phone', 'Haryana', 'Kaithal']);
    const created = await request(base).post(`/console/uploads?_csrf=${encodeURIComponent(csrf)}`).set('cookie', client.cookieHeader())
      .field('participant_type', 'seeker').attach('file', csv(['name', 'phone', 'state', 'district'], rows), 'camp.csv');
    expect(created.status).toBe(303);
    const jobPath = created.headers.location as string;
    const uploadId = jobPath.split('/').pop()!;
    const pending = await client.get(jobPath);
    expect(pending.text).toContain('name="attestation"');

    const unattested = await client.post(`${jobPath}/start`, { _csrf: csrf });
    expect(unattested.status).toBe(400);
    const started = await client.post(`${jobPath}/start`, { _csrf: csrf, attestation: 'true' });
    expect(started.status).toBe(303);

    const events = await request(base).get(`${jobPath}/events`).set('cookie', client.cookieHeader()).buffer(true).parse((res, done) => {
      let text = '';
      res.on('data', (chunk: Buffer) => { text += chunk.toString(); });
      res.on('end', () => done(null, text));
    });
    expect(events.headers['content-type']).toMatch(/^text\/event-stream/);
    const body = events.body as string;
    const done = body.split('\n\n').find((e) => e.includes('event: done'))!;
    const final = JSON.parse(done.split('\ndata: ')[1]);
    expect(final).toMatchObject({ upload_id: uploadId, status: 'completed', total_rows: 60, processed_rows: 60 });
    expect(final.failed + final.skipped).toBeGreaterThan(0);

    const page = await client.get(jobPath);
    expect(page.text).toContain('errors.csv');
    expect(page.text).toMatch(/<td class="num">3<\/td><td>Failed<\/td>/);
    const report = await client.get(`${jobPath}/errors.csv`);
    expect(report.status).toBe(200);
    expect(report.headers['content-type']).toMatch(/^text\/csv/);
    expect(report.text.split('\n')[0]).toContain('row_number');
  });

  it('shows an upsert\'s whole-file diff before the start button, and starts a sync upload only with the dry run\'s pause count', async () => {
    // Its own aggregator: a sync upload pauses every participant of the domain the file does not hold.
    const own = await platform.aggregator({ types: ['seeker'] });
    const client = new ConsoleClient(base);
    await client.signIn(await consoleLinkFor(platform, own, 'operator'));
    const csrf = await client.csrf();
    const header = ['name', 'phone', 'state', 'district', 'skills'];
    const person = (i: number, skills = 'tailoring') => [`Person ${i}`, `98765${String(10000 + i)}`, 'Haryana', 'Kaithal', skills];
    const upload = (rows: string[][], fields: Record<string, string>) => {
      let req = request(base).post(`/console/uploads?_csrf=${encodeURIComponent(csrf)}`).set('cookie', client.cookieHeader()).field('participant_type', 'seeker');
      for (const [k, v] of Object.entries(fields)) req = req.field(k, v);
      return req.attach('file', csv(header, rows), 'list.csv');
    };
    const first = await upload([person(1), person(2), person(3)], {});
    await client.post(`${first.headers.location}/start`, { _csrf: csrf, attestation: 'true' });
    await until('the first upload', async () => (await client.get(first.headers.location)).text.includes(`data-field="status"`)
      && !(await client.get(first.headers.location)).text.includes('data-events='), 30_000);

    // Person 2 changes skills, person 3 leaves the list, person 4 is new.
    const second = await upload([person(1), person(2, 'welding'), person(4)], { mode: 'upsert', sync: 'true' });
    expect(second.status).toBe(303);
    const jobPath = second.headers.location as string;
    const before = await client.get(jobPath);
    expect(before.text).toContain('Upsert: create, and update the participants the file already holds');
    expect(before.text).toMatch(/<button type="submit" disabled>/);
    const dry = await client.post(`${jobPath}/preview`, { _csrf: csrf });
    expect(dry.status).toBe(303);
    const page = await until('the dry run', async () => {
      const p = await client.get(dry.headers.location as string);
      return p.text.includes('id="pause-count"') ? p : undefined;
    }, 20_000);
    expect(page.text).toContain('Of all 3 rows, 1 would be created, 1 updated, 1 unchanged, 0 would fail and 0 would be skipped.');
    expect(page.text).toMatch(/<strong>[^<]*<\/strong>: tailoring → welding/);
    expect(page.text).toContain('>1 participants are no longer in the file and would be paused once the upload completes.');
    // The diff comes before the start button.
    expect(page.text.indexOf('id="pause-count"')).toBeLessThan(page.text.indexOf('id="start-title"'));
    expect(page.text).toContain('name="confirm_pause" value="1"');
    const wrong = await client.post(`${jobPath}/start`, { _csrf: csrf, attestation: 'true', confirm_pause: '2', pause_confirmed: 'true' });
    expect(wrong.status).toBe(409);
    expect(wrong.text).toContain('found 1 participants to pause, not 2');
    // 1 of the 3 is more than BULK_SYNC_MAX_PAUSE_FRACTION: the large-pause box too.
    const large = await client.post(`${jobPath}/start`, { _csrf: csrf, attestation: 'true', confirm_pause: '1', pause_confirmed: 'true' });
    expect(large.status).toBe(409);
    expect(large.text).toContain('pause 1 of the 3 participants');
    const started = await client.post(`${jobPath}/start`, { _csrf: csrf, attestation: 'true', confirm_pause: '1', pause_confirmed: 'true', allow_large_pause: 'true' });
    expect(started.status).toBe(303);
    const done = await until('the sync upload', async () => {
      const p = await client.get(jobPath);
      return p.text.includes('data-field="paused">1<') ? p : undefined;
    }, 30_000);
    expect(done.text).toMatch(/data-field="updated">1</);
    expect(done.text).toMatch(/data-field="created">1</);
  });

  it('edits a saved mapping as a new version, refuses a bad one naming the field, and retires it', async () => {
    const saved = await request(base).post('/v1/bulk-uploads/mappings').set('authorization', `Bearer ${agg.token}`)
      .send({ name: 'Camp sheet', participant_type: 'seeker', mapping: { 'Full name': 'name', Mobile: 'phone' } });
    expect(saved.status).toBe(201);
    const viewer = new ConsoleClient(base);
    await viewer.signIn(await consoleLinkFor(platform, agg, 'viewer'));
    const readOnly = await viewer.get(`/console/mappings/${saved.body.id}`);
    expect(readOnly.text).not.toContain('<textarea');
    expect((await viewer.post(`/console/mappings/${saved.body.id}`, { _csrf: await viewer.csrf(), mapping: '{}' })).status).toBe(403);

    const client = new ConsoleClient(base);
    await client.signIn(await consoleLinkFor(platform, agg, 'operator'));
    const csrf = await client.csrf(`/console/mappings/${saved.body.id}`);
    const bad = await client.post(`/console/mappings/${saved.body.id}`, { _csrf: csrf, mapping: JSON.stringify({ 'Full name': 'no_such_field' }) });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('mapping');
    const good = await client.post(`/console/mappings/${saved.body.id}`, { _csrf: csrf, name: 'Camp sheet 2', mapping: JSON.stringify({ 'Full name': 'name', Phone: 'phone' }) });
    expect(good.status).toBe(303);
    const v2 = await request(base).get(`/v1/bulk-uploads/mappings/${saved.body.id}`).set('authorization', `Bearer ${agg.token}`);
    expect(v2.body).toMatchObject({ version: 2, name: 'Camp sheet 2', mapping: { 'Full name': 'name', Phone: 'phone' } });
    expect((await client.post(`/console/mappings/${saved.body.id}/retire`, { _csrf: csrf })).status).toBe(303);
    const retired = await request(base).get(`/v1/bulk-uploads/mappings/${saved.body.id}`).set('authorization', `Bearer ${agg.token}`);
    expect(retired.body.retired_at).not.toBeNull();
    expect((await client.post(`/console/mappings/${saved.body.id}`, { _csrf: csrf, mapping: JSON.stringify({ 'Full name': 'name' }) })).status).toBe(409);
  });

  it('shows how a pending file\'s columns match and saves the reviewed suggestion as a mapping to upload with', async () => {
    const client = new ConsoleClient(base);
    await client.signIn(await consoleLinkFor(platform, agg, 'operator'));
    const csrf = await client.csrf();
    const created = await request(base).post(`/console/uploads?_csrf=${encodeURIComponent(csrf)}`).set('cookie', client.cookieHeader())
      .field('participant_type', 'seeker').attach('file', csv(['Full Name', 'Mobile No', 'State', 'District'], [['Asha Devi', '9812345670', 'Haryana', 'Kaithal']]), 'camp sheet.csv');
    // The worker stores the suggestions moments after the upload; until then the page says so.
    const page = await until('the stored suggestions on the page', async () => {
      const res = await client.get(created.headers.location as string);
      return res.text.includes('id="match-fields"') ? res : null;
    });
    const unescape = (html: string) => html.replace(/&quot;|&#34;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
    const suggested = JSON.parse(unescape(/<textarea id="mapping-json"[^>]*>([\s\S]*?)<\/textarea>/.exec(page.text)![1]));
    const api = await request(base).post(`/v1/bulk-uploads/${created.headers.location!.split('/').pop()}/match`).set('authorization', `Bearer ${agg.token}`);
    expect(suggested).toEqual(api.body.suggested_mapping);
    const saved = await client.post('/console/mappings', { _csrf: csrf, participant_type: 'seeker', name: 'Camp sheet', mapping: JSON.stringify(suggested) });
    expect(saved.status).toBe(303);
    const id = /mapping=([0-9a-f-]{36})/.exec(saved.headers.location as string)![1];
    const stored = await request(base).get(`/v1/bulk-uploads/mappings/${id}`).set('authorization', `Bearer ${agg.token}`);
    expect(stored.body).toMatchObject({ name: 'Camp sheet', participant_type: 'seeker', mapping: suggested });
    const form = await client.get(saved.headers.location as string);
    expect(form.text).toContain(`<option value="${id}" selected>`);
    const bad = await client.post('/console/mappings', { _csrf: csrf, participant_type: 'seeker', name: 'Bad', mapping: 'not json' });
    expect(bad.status).toBe(400);
  });

  it('serves the same progress stream on the API with a bearer token', async () => {
    const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(['name', 'phone', 'state', 'district'], [['Asha', '9812345670', 'Haryana', 'Kaithal']]) });
    await startUpload(platform, agg.token, created.body.upload_id);
    const res = await request(base).get(`/v1/bulk-uploads/${created.body.upload_id}/events`).set('authorization', `Bearer ${agg.token}`)
      .buffer(true).parse((r, done) => {
        let text = '';
        r.on('data', (c: Buffer) => { text += c.toString(); });
        r.on('end', () => done(null, text));
      });
    expect(res.status).toBe(200);
    expect(res.body).toMatch(/event: done\ndata: \{"upload_id":"[^"]+","status":"completed"/);
    const missing = await request(base).get('/v1/bulk-uploads/00000000-0000-4000-8000-000000000000/events').set('authorization', `Bearer ${agg.token}`);
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBeDefined();
  });

  it('shows a voice job with its counts per status, live over SSE until it is final', async () => {
    const ids = await seedSeekers(platform, agg, phones(3));
    const job = await createVoiceJob(platform, agg.token, { channel: 'export', item_ids: ids });
    expect(job.status).toBe(202);
    const client = new ConsoleClient(base);
    await client.signIn(await consoleLinkFor(platform, agg, 'viewer'));
    const list = await client.get('/console/voice');
    expect(list.text).toContain(`/console/voice/${job.body.job_id}`);
    const events = await request(base).get(`/console/voice/${job.body.job_id}/events`).set('cookie', client.cookieHeader()).buffer(true)
      .parse((r, done) => {
        let text = '';
        r.on('data', (c: Buffer) => { text += c.toString(); });
        r.on('end', () => done(null, text));
      });
    const done = (events.body as string).split('\n\n').find((e) => e.includes('event: done'))!;
    expect(JSON.parse(done.split('\ndata: ')[1])).toMatchObject({ job_id: job.body.job_id, status: 'completed', total: 3 });
    const page = await client.get(`/console/voice/${job.body.job_id}`);
    expect(page.text).toMatch(/data-field="total">3</);
    expect(page.text).not.toContain('data-events');
    const other = await platform.aggregator();
    const stranger = new ConsoleClient(base);
    await stranger.signIn(await consoleLinkFor(platform, other));
    expect((await stranger.get(`/console/voice/${job.body.job_id}`)).status).toBe(404);
  });

  it('answers in Hindi from Accept-Language or the switch', async () => {
    const client = new ConsoleClient(base);
    await client.signIn(await consoleLinkFor(platform, agg));
    const hindi = await request(base).get('/console/uploads').set('cookie', client.cookieHeader()).set('accept-language', 'hi-IN,hi;q=0.9');
    expect(hindi.text).toContain('<html lang="hi">');
    expect(hindi.text).toContain('<h1>अपलोड</h1>');
    await client.post('/console/lang', { _csrf: await client.csrf(), lang: 'hi', back: '/console/links' });
    expect((await client.get('/console/links')).text).toContain('<h1>पंजीकरण लिंक</h1>');
    const { en, hi } = catalogueKeys();
    expect(hi.sort()).toEqual(en.sort());
  });

  it('ldp console prints a link that signs in', async () => {
    const res = await runLdp(['console', '--aggregator', agg.aggregatorId, '--role', 'operator', '--url', base],
      { DATA_DIR: platform.dataDir, DATABASE_URL: platform.databaseUrl });
    expect(res.stderr).toBe('');
    const link = res.stdout.trim();
    expect(link).toMatch(new RegExp(`^${base}/console/login\\?token=`));
    const client = new ConsoleClient(base);
    expect((await client.signIn(link)).status).toBe(303);
    expect((await client.get('/console/uploads')).text).toContain('Roles: operator');
  });
});
