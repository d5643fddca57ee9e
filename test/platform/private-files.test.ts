/**
 * Files holding personal data are readable by the platform's user alone (review of issue 29): the
 * e-mail and SMS outboxes (guardian codes, support requests) and the stored objects (an uploaded
 * file, a support attachment) — directories 0700, files 0600 — whatever the process's umask (here
 * 000, so nothing is narrowed by it). Written through the HTTP API and a real worker.
 */
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUpload, csv } from '../helpers/bulk-upload.ts';
import { readOutbox, waitForMessage } from '../helpers/messages.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let umask: number;

/** Every directory and file under `dir` (itself included), with its permission bits. */
async function modes(dir: string): Promise<{ dirs: Map<string, number>; files: Map<string, number> }> {
  const dirs = new Map<string, number>();
  const files = new Map<string, number>();
  const walk = async (d: string) => {
    dirs.set(d, (await stat(d)).mode & 0o777);
    for (const entry of await readdir(d, { withFileTypes: true })) {
      const p = path.join(d, entry.name);
      if (entry.isDirectory()) await walk(p);
      else files.set(p, (await stat(p)).mode & 0o777);
    }
  };
  await walk(dir);
  return { dirs, files };
}

beforeAll(async () => {
  umask = process.umask(0);
  platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true });
});
afterAll(async () => {
  await platform?.stop();
  process.umask(umask);
});

describe('private files', () => {
  it('writes outbox messages and stored objects owner-only (directories 0700, files 0600)', async () => {
    const key = await platform.apiKey('signals');
    const guardian = (over: Record<string, unknown>) => request(platform.url('signals')).post('/api/v1/consent/u18/signup/guardian').set('x-api-key', key)
      .send({ network: 'local-discovery', domain: 'seeker', age: 15, guardianName: 'Lata Devi', guardianDeclarationAccepted: true, ...over });
    expect((await guardian({ email: 'kiran@example.in', guardianEmail: 'lata@example.in' })).status).toBe(201);
    expect((await guardian({ email: 'mohan@example.in', guardianPhone: '+919812300000' })).status).toBe(201);
    const support = await request(platform.url('signals')).post('/api/v1/support/').set('x-api-key', key).send({
      name: 'Asha Devi', email: 'asha@partner.test', type: 'support_request', details: 'Row 3 failed', consent: true,
      attachments: [{ filename: 'rows.csv', contentType: 'text/csv', data: Buffer.from('name,phone\nAsha,+919876543210\n').toString('base64') }],
    });
    expect(support.status, JSON.stringify(support.body)).toBeLessThan(300);
    const agg = await platform.aggregator();
    const upload = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(['Full Name', 'Mobile'], [['Asha Rani', '9876543210']]) });
    expect(upload.status, JSON.stringify(upload.body)).toBe(201);

    const outbox = () => readOutbox(platform.dataDir);
    await waitForMessage(outbox, 'lata@example.in');
    await waitForMessage(outbox, '+919812300000');
    await waitForMessage(outbox, 'support@localhost');

    const sent = await modes(path.join(platform.dataDir, 'outbox'));
    const stored = await until('the uploaded file to be stored', async () => {
      const m = await modes(path.join(platform.dataDir, 'objects'));
      return m.files.size > 0 && m;
    });
    expect([...sent.files.keys()].filter((f) => f.endsWith('.eml'))).toHaveLength(2);
    expect([...sent.files.keys()].filter((f) => f.endsWith('.txt'))).toHaveLength(1);
    for (const { dirs, files } of [sent, stored]) {
      expect(Object.fromEntries([...dirs].map(([d, mode]) => [d, mode.toString(8)]))).toEqual(Object.fromEntries([...dirs.keys()].map((d) => [d, '700'])));
      expect(Object.fromEntries([...files].map(([f, mode]) => [f, mode.toString(8)]))).toEqual(Object.fromEntries([...files.keys()].map((f) => [f, '600'])));
    }
  });
});
