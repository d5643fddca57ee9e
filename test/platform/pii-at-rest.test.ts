/**
 * PII at rest (issue 15): after an upload with failed and skipped rows (and a dry run of another),
 * a public registration, a signup and a support request, a dump of every table of every schema —
 * signals, search, aggregator, platform and graphile_worker (job payloads) — holds none of their
 * phones (as typed, in E.164, as 10 digits), e-mails or names in plaintext. The error report,
 * which decrypts the kept rows, still gives them back; once retention has run it answers 410.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../lib/platform/jobs.ts';
import { csv, createUpload, errorReport, onboard } from '../helpers/bulk-upload.ts';
import { startSmtpServer, type TestSmtpServer } from '../helpers/smtp.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let smtp: TestSmtpServer;
let agg: TestAggregator;

beforeAll(async () => {
  smtp = await startSmtpServer();
  platform = await startTestPlatform({ worker: true, env: { SMTP_URL: smtp.url, BULK_PREVIEW_WAIT_MS: '20000' } });
  agg = await platform.aggregator();
}, 60_000);
afterAll(async () => {
  await platform?.stop();
  await smtp?.close();
});

const fileRows = [
  { name: 'Bhagwati Prasad Rawat', phone: '9834567120', e164: '+919834567120', email: 'bhagwati.rawat@example.org', state: 'Uttarakhand' },
  // Fails: no state.
  { name: 'Champa Kumari Oraon', phone: '9834567121', e164: '+919834567121', email: 'champa.oraon@example.org', state: '' },
  // Skipped: the first row's phone.
  { name: 'Dhanraj Singh Chauhan', phone: '+91 98345 67120', e164: '+919834567120', email: 'dhanraj.chauhan@example.org', state: 'Haryana' },
  // Fails: an e-mail that is not one (quoted in the reason).
  { name: 'Ezhil Arasi Murugan', phone: '9834567123', e164: '+919834567123', email: 'ezhil.murugan@@example', state: 'Tamil Nadu' },
  // Fails: a phone that is not one (quoted in the reason).
  { name: 'Farida Begum Ansari', phone: '98345671', e164: '98345671', email: 'farida.ansari@example.org', state: 'Bihar' },
];
const previewed = { name: 'Gopika Ramesh Nair', phone: '9834567125', e164: '+919834567125', email: 'gopika.nair@example.org', state: '' };
const registrant = { name: 'Hemlata Kumari Sahu', phone: '98345 67126', e164: '+919834567126', email: 'Hemlata.Sahu@Example.in' };
const signup = { name: 'Indrajit Bhowmik', phone: '98345 67127', e164: '+919834567127', email: 'indrajit.bhowmik@example.in' };
const supporter = { name: 'Jasleen Kaur Gill', phone: '+919834567128', e164: '+919834567128', email: 'jasleen.gill@partner.test' };

const people = [...fileRows, previewed, registrant, signup, supporter];

/** Every row of every table of the platform's schemas, as text. */
async function dumpAll(): Promise<string> {
  const { rows: tables } = await platform.ctx.pool.query<{ schema: string; name: string }>(
    `SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
      WHERE table_type = 'BASE TABLE' AND table_schema IN ('signals', 'search', 'aggregator', 'platform', 'graphile_worker')`);
  expect(tables.map((t) => t.schema)).toEqual(expect.arrayContaining(['signals', 'search', 'aggregator', 'platform', 'graphile_worker']));
  let dump = '';
  for (const t of tables) {
    const { rows } = await platform.ctx.pool.query<{ row: string }>(`SELECT t::text AS row FROM "${t.schema}"."${t.name}" t`);
    for (const r of rows) dump += `${t.schema}.${t.name} ${r.row}\n`;
  }
  return dump;
}

function plaintextFound(dump: string): string[] {
  const lower = dump.toLowerCase();
  const found: string[] = [];
  for (const p of people) {
    const digits = p.phone.replace(/\D/g, '').slice(-10);
    for (const value of [p.name, p.phone, p.e164, p.email, digits, p.name.split(' ')[0] + ' ' + p.name.split(' ')[1]]) {
      if (lower.includes(value.toLowerCase())) found.push(`${value}: ${dump.split('\n').find((l) => l.toLowerCase().includes(value.toLowerCase()))?.slice(0, 200)}`);
    }
  }
  return found;
}

describe('PII at rest', () => {
  it('no table holds a phone, e-mail or name of the file, the registration, the signup or the support request', async () => {
    const aggregator = () => request(platform.url('aggregator'));
    const auth = `Bearer ${agg.token}`;
    // A completed upload with failed and skipped rows.
    const job = await onboard(platform, agg.token, {
      file: csv(['name', 'phone', 'email', 'state'], fileRows.map((p) => [p.name, p.phone, p.email, p.state])),
    });
    expect(job).toMatchObject({ passed: 1, failed: 3, skipped: 1 });
    // A dry run of a pending upload (its result quotes the rows).
    const pending = await createUpload(platform, agg.token, {
      participantType: 'seeker', file: csv(['name', 'phone', 'email', 'state'], [[previewed.name, previewed.phone, previewed.email, previewed.state]]),
    });
    expect(pending.status).toBe(201);
    const preview = await aggregator().post(`/v1/bulk-uploads/${pending.body.upload_id}/preview`).set('authorization', auth).send({ rows: 10 });
    expect(preview.status).toBe(200);
    expect(preview.body.rows[0]).toMatchObject({ outcome: 'failed' });
    // A public registration, pushed by its task.
    const link = await aggregator().post('/v1/links/create').set('authorization', auth).send({ domain: 'seeker', status: 'live' });
    expect(link.status).toBe(201);
    const registered = await aggregator().post(`/public/v1/aggregators/${agg.orgSlug}/registrations/${link.body.slug}`).send({
      name: registrant.name, phone: registrant.phone, email: registrant.email, gender: 'Female', age: 31,
      skills: ['tailoring'], languages: ['Hindi'], district: 'Raipur', state: 'Chhattisgarh', consent_terms: true, consent_privacy: true,
    });
    expect(registered.status).toBe(201);
    // A signup on signals, and a support request e-mailed by its task.
    const signalsKey = await platform.apiKey('signals');
    const signed = await request(platform.url('signals')).post('/api/v1/auth/signup').set('x-api-key', signalsKey)
      .send({ name: signup.name, email: signup.email, phoneNumber: signup.phone, age: 29, domain: 'seeker' });
    expect(signed.status).toBeLessThan(300);
    const support = await aggregator().post('/v1/support').set('authorization', auth).send({
      name: supporter.name, email: supporter.email, phone: supporter.phone, type: 'support_request', details: 'Row 3 failed', consent: true,
    });
    expect(support.status).toBeLessThan(300);
    await smtp.waitFor((m) => m.rcptTo.includes('support@localhost'), 30_000);

    // Let the queued tasks (pushes, indexing, e-mails) run, so their payloads and results are in the dump too.
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const { rows: [q] } = await platform.ctx.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE locked_at IS NULL AND attempts = 0 AND run_at <= now() AND task_identifier NOT LIKE '%reconcile%'`);
      if (q.n === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }

    const found = plaintextFound(await dumpAll());
    expect(found).toEqual([]);

    // The error report still decrypts the kept rows, for whoever downloads it.
    const report = await errorReport(platform, agg.token, job.upload_id);
    expect(report.status).toBe(200);
    for (const p of fileRows.slice(1)) expect(report.body).toContain(p.name);
    // ... and the dump test can fail: the report's rows are exactly what it looks for.
    expect(plaintextFound(report.body).length).toBeGreaterThan(0);
  }, 120_000);

  it('retention deletes the file, the error report and the rows, and the report then answers 410 saying why', async () => {
    const job = await onboard(platform, agg.token, {
      file: csv(['name', 'phone', 'email', 'state'], [['Kiran Bala Thakur', '9834567130', 'kiran.thakur@example.org', '']]),
    });
    expect(job).toMatchObject({ failed: 1, purged_at: null });
    const { rows: [stored] } = await platform.ctx.pool.query('SELECT file_object_key, errors_csv_object_key FROM aggregator.bulk_uploads WHERE upload_id = $1', [job.upload_id]);
    expect(await platform.ctx.storage.stat(stored.file_object_key)).not.toBeNull();
    expect(await platform.ctx.storage.stat(stored.errors_csv_object_key)).not.toBeNull();

    // Not yet due: the task leaves it alone.
    const runRetention = async () => {
      const { rows: [{ id }] } = await platform.ctx.pool.query<{ id: string }>(
        `SELECT id FROM graphile_worker.add_job('bulk-upload-retention', '{}'::json, job_key := $1)`, [`retention-${Math.random()}`]);
      for (const deadline = Date.now() + 30_000; Date.now() < deadline;) {
        const { rows } = await platform.ctx.pool.query('SELECT last_error FROM graphile_worker.jobs WHERE id = $1', [id]);
        if (!rows.length) return;
        if (rows[0].last_error) throw new Error(rows[0].last_error);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error('retention task did not run');
    };
    await runRetention();
    expect((await errorReport(platform, agg.token, job.upload_id)).status).toBe(200);

    // BULK_RETENTION_DAYS (30) after completion.
    await platform.ctx.pool.query(`UPDATE aggregator.bulk_uploads SET completed_at = now() - interval '31 days' WHERE upload_id = $1`, [job.upload_id]);
    await runRetention();
    expect(await platform.ctx.storage.stat(stored.file_object_key)).toBeNull();
    expect(await platform.ctx.storage.stat(stored.errors_csv_object_key)).toBeNull();
    const { rows: [left] } = await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.bulk_upload_rows WHERE upload_id = $1', [job.upload_id]);
    expect(left.n).toBe(0);

    const gone = await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${job.upload_id}/errors`).set('authorization', `Bearer ${agg.token}`);
    expect(gone.status).toBe(410);
    expect(gone.body).toEqual({ error: expect.objectContaining({ code: 'error_report_expired', title: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) }) });
    expect(gone.body.error.detail).toMatch(/deleted .*30 days after the job ended.*BULK_RETENTION_DAYS/);
    const after = await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${job.upload_id}`).set('authorization', `Bearer ${agg.token}`);
    expect(after.body).toMatchObject({ status: 'completed', failed: 1, purged_at: expect.any(String) });
  }, 120_000);

  it('a job never started is failed with the reason once its file is deleted', async () => {
    const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(['name'], [['Lalita Devi']]) });
    expect(created.status).toBe(201);
    await platform.ctx.pool.query(`UPDATE aggregator.bulk_uploads SET created_at = now() - interval '40 days' WHERE upload_id = $1`, [created.body.upload_id]);
    await enqueue(platform.ctx.pool, { task: 'bulk-upload-retention', payload: {}, jobKey: 'retention-unstarted' });
    let job: any;
    for (const deadline = Date.now() + 30_000; Date.now() < deadline;) {
      job = (await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${created.body.upload_id}`).set('authorization', `Bearer ${agg.token}`)).body;
      if (job.purged_at) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(job).toMatchObject({ status: 'failed', status_reason: expect.stringMatching(/not started within 30 days.*upload it again/) });
  }, 60_000);
});
