/**
 * Logs never carry PII (issue 15): a whole onboarding — upload, staging, chunks with failed and
 * skipped rows, the push to signals, indexing, the error report — logged at `trace`, then every
 * line searched for the file's phone numbers (as typed and in E.164), e-mail addresses and names.
 */
import { Writable } from 'node:stream';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../lib/platform/logger.ts';
import { csv, errorReport, onboard } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let agg: TestAggregator;
let log = '';

beforeAll(async () => {
  const sink = new Writable({ write(chunk, _encoding, done) { log += String(chunk); done(); } });
  platform = await startTestPlatform({ worker: true, logger: createLogger('trace', 'ldp', sink) });
  agg = await platform.aggregator();
});
afterAll(() => platform.stop());

const people = [
  { name: 'Kamla Bai Meena', phone: '9812345670', e164: '+919812345670', email: 'kamla.meena@example.org', state: 'Rajasthan' },
  { name: 'Gurpreet Singh Sandhu', phone: '98123 45671', e164: '+919812345671', email: 'gurpreet.sandhu@example.org', state: 'Punjab' },
  // Fails (no state), so its raw cells are kept for the error report.
  { name: 'Rekha Kumari Yadav', phone: '9812345672', e164: '+919812345672', email: 'rekha.yadav@example.org', state: '' },
  // Skipped: the same phone as the first row.
  { name: 'Savitri Devi Joshi', phone: '+91 98123 45670', e164: '+919812345670', email: 'savitri.joshi@example.org', state: 'Haryana' },
  // Fails: an e-mail that is not one.
  { name: 'Mohan Lal Verma', phone: '9812345673', e164: '+919812345673', email: 'mohan.verma@@example', state: 'Bihar' },
];

describe('request logs (Trust II)', () => {
  it('carry no query string value of any service: an e-mail or phone in a URL is redacted', async () => {
    const start = log.length;
    const email = 'query.person@example.org';
    const phone = '9812399999';
    const query = `?email=${encodeURIComponent(email)}&phoneNumber=%2B91${phone}&${encodeURIComponent(email)}`;
    // A login link (a route with a query), and a 404 of each service.
    const login = await request(platform.url('signals')).get(`/api/v1/auth/session/login${query}`).set('accept', 'application/json');
    expect(login.status).toBe(202);
    for (const service of ['signals', 'aggregator', 'search'] as const) {
      expect((await request(platform.url(service)).get(`/no-such-page${query}`)).status).toBe(404);
    }
    await new Promise((resolve) => setTimeout(resolve, 200)); // the response lines are written on finish
    const lines = log.slice(start);
    expect(lines).toContain('/no-such-page?email=[redacted]&phoneNumber=[redacted]&[redacted]');
    expect(lines).toContain('/api/v1/auth/session/login?email=[redacted]');
    for (const value of [email, encodeURIComponent(email), phone, 'query.person']) expect(lines.includes(value), `log contains ${value}`).toBe(false);
  });
});

describe('logs of a whole onboarding at trace level', () => {
  it('hold none of the file’s phones, e-mails or names', async () => {
    const job = await onboard(platform, agg.token, {
      file: csv(['name', 'phone', 'email', 'state'], people.map((p) => [p.name, p.phone, p.email, p.state])),
    });
    expect(job).toMatchObject({ passed: 2, failed: 2, skipped: 1 });
    expect((await errorReport(platform, agg.token, job.upload_id)).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 500)); // let the indexing job log its end
    expect(log).toMatch(/bulk-upload-finish/); // the run was logged at all
    for (const p of people) {
      for (const value of [p.name, p.phone, p.e164, p.email, p.phone.replace(/\D/g, '').slice(-10)]) {
        expect(log.includes(value), `log contains ${value}`).toBe(false);
      }
    }
  });
});
