/**
 * Logs never carry PII (issue 15): a whole onboarding — upload, staging, chunks with failed and
 * skipped rows, the push to signals, indexing, the error report — logged at `trace`, then every
 * line searched for the file's phone numbers (as typed and in E.164), e-mail addresses and names.
 */
import { Writable } from 'node:stream';
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
