/**
 * Authentication before large bodies (Trust II, issue 29): the routes whose body limit is above
 * HTTP_BODY_LIMIT — support on both services (~15 MB), voice jobs (8 MB), voice callbacks (4 MB,
 * raw) — answer a caller without credentials (or without the role, or with a stale signature)
 * before reading its body, and close the connection instead of reading the rest. Each request
 * announces a 15 MB body and sends only its first 64 KB: a server that parses before it
 * authenticates never answers.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signBody } from '../../lib/aggregator/voice/signature.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { PROVIDER_SECRET } from '../helpers/voice.ts';

let platform: TestPlatform;
let viewerToken: string;
let adminToken: string;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['aggregator', 'signals'], env: { VOICE_PROVIDER_SECRET: PROVIDER_SECRET } });
  viewerToken = (await platform.aggregator({ types: ['seeker'], roles: ['viewer'] })).token;
  adminToken = (await platform.aggregator({ types: ['seeker'] })).token;
});
afterAll(async () => {
  await platform?.stop();
});

const ANNOUNCED = 15 * 1000 * 1000;
const SENT = 64 * 1024;

/**
 * POSTs to `url` announcing an ANNOUNCED-byte JSON body and writing only its first SENT bytes; the
 * status, error body and Connection header of the answer, or null when none came within 5 s.
 */
function partialPost(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any; connection?: string } | null> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': String(ANNOUNCED), ...headers } });
    const timer = setTimeout(() => {
      req.destroy();
      resolve(null);
    }, 5000);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => {
        clearTimeout(timer);
        req.destroy();
        resolve({ status: res.statusCode!, body: JSON.parse(text), connection: res.headers.connection });
      });
    });
    req.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.write(`{"message": "${'x'.repeat(SENT)}`);
  });
}

describe('routes with a large body limit authenticate before they read the body', () => {
  it.each([
    ['aggregator', '/v1/support', {}, 401],
    ['aggregator', '/v1/support', { authorization: 'Bearer not.a.token' }, 401],
    ['aggregator', '/v1/campaign/voice', {}, 401],
    ['aggregator', '/v1/campaign/voice/callbacks', {}, 401],
    ['aggregator', '/v1/campaign/voice/callbacks', { 'x-voice-signature': signBody(PROVIDER_SECRET, 'other bytes', Date.now() - 3_600_000) }, 401],
    ['signals', '/api/v1/support', {}, 401],
    ['signals', '/api/v1/support/', { 'x-api-key': 'ldp_unknown_key' }, 401],
  ] as const)('%s POST %s %j: %d before the body, connection closed', async (service, path, headers, status) => {
    const answer = await partialPost(`${platform.url(service)}${path}`, headers);
    expect(answer, 'no answer before the body was sent whole').not.toBeNull();
    expect(answer!.status).toBe(status);
    expect(answer!.connection).toBe('close');
  });

  it('a voice job from a viewer is refused (403) before its body is read', async () => {
    const answer = await partialPost(`${platform.url('aggregator')}/v1/campaign/voice`, { authorization: `Bearer ${viewerToken}`, 'idempotency-key': 'k1' });
    expect(answer).toMatchObject({ status: 403, body: { error: expect.objectContaining({ code: 'insufficient_role' }) } });
  });

  it('an authenticated caller still gets its body read and checked', async () => {
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) => fetch(`${platform.url('aggregator')}${path}`, {
      method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body),
    });
    const job = await post('/v1/campaign/voice', { channel: 'export', item_ids: [crypto.randomUUID()] }, { 'idempotency-key': 'k2' });
    expect(job.status).toBe(202);
    const nul = await post('/v1/support', { name: 'Asha Verma', message: 'A NUL here: \u0000', consent: true });
    expect(nul.status).toBe(400);
    expect(((await nul.json()) as any).error.detail).toContain('NUL');
  });
});
