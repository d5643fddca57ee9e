/**
 * Support requests on both services (lib/network/support.ts): the aggregator's POST /v1/support
 * (Bearer, shape C) and signals' POST /api/v1/support/ (x-api-key, shape A), e-mailed by the
 * support-send-email task of a real worker to a real SMTP server.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_ATTACHMENT_BYTES } from '../../lib/network/support.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { startSmtpServer, type TestSmtpServer } from '../helpers/smtp.ts';

const REFERENCE = /^SUP-\d{8}-[A-Z0-9]{6}$/;
const addresses = (a: unknown) => ((Array.isArray(a) ? a : a ? [a] : []) as { value: { address: string }[] }[])
  .flatMap((o) => o.value.map((v) => v.address));

const body = (over: Record<string, unknown> = {}) => ({
  name: 'Asha Devi', email: 'asha@partner.test', phone: '+919876543210', type: 'support_request',
  details: 'Rows 3 and 7 of our upload failed; what does "phone: not E.164" mean?', consent: true, ...over,
});
const b64 = (bytes: number, fill = 'a') => Buffer.alloc(bytes, fill).toString('base64');

describe('support requests', () => {
  let platform: TestPlatform;
  let smtp: TestSmtpServer;
  let agg: TestAggregator;
  let signalsKey: string;

  beforeAll(async () => {
    smtp = await startSmtpServer();
    platform = await startTestPlatform({
      services: ['signals', 'aggregator'], worker: true,
      env: { SMTP_URL: smtp.url, SUPPORT_EMAIL: 'help@ldp.test', SUPPORT_CC_EMAIL: 'ops@ldp.test', MAIL_FROM: 'LDP <no-reply@ldp.test>' },
    });
    agg = await platform.aggregator({ roles: ['viewer'] });
    signalsKey = await platform.apiKey('signals');
  }, 60_000);
  afterAll(async () => {
    await platform?.stop();
    await smtp?.close();
  });

  const aggregatorPost = (payload: unknown, token = agg.token) =>
    request(platform.url('aggregator')).post('/v1/support').set('authorization', `Bearer ${token}`).send(payload as object);
  const signalsPost = (payload: unknown) =>
    request(platform.url('signals')).post('/api/v1/support/').set('x-api-key', signalsKey).send(payload as object);

  it('files the request and e-mails it with its attachment, cc and Reply-To the submitter', async () => {
    const csv = 'row,error\n3,phone: not E.164\n';
    const res = await aggregatorPost(body({ attachments: [{ filename: 'errors.csv', contentType: 'text/csv', data: Buffer.from(csv).toString('base64') }] }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, reference: expect.stringMatching(REFERENCE) });
    const { reference } = res.body;
    expect(reference.slice(4, 12)).toBe(new Date().toISOString().slice(0, 10).replace(/-/g, ''));

    const mail = await smtp.waitFor((m) => m.parsed.subject?.includes(reference) ?? false);
    expect(mail.rcptTo).toEqual(['help@ldp.test', 'ops@ldp.test']);
    expect(addresses(mail.parsed.to)).toEqual(['help@ldp.test']);
    expect(addresses(mail.parsed.cc)).toEqual(['ops@ldp.test']);
    expect(addresses(mail.parsed.replyTo)).toEqual(['asha@partner.test']);
    expect(mail.parsed.subject).toBe(`[${reference}] Support request from Asha Devi`);
    expect(mail.parsed.text).toContain('what does "phone: not E.164" mean?');
    expect(mail.parsed.text).toContain('+919876543210');
    expect(mail.parsed.attachments).toHaveLength(1);
    expect(mail.parsed.attachments[0]).toMatchObject({ filename: 'errors.csv', contentType: 'text/csv' });
    expect(mail.parsed.attachments[0].content.toString()).toBe(csv);

    // Recorded as sent; the stored attachment is gone; the contacts are not stored in clear. The
    // task records the send after the SMTP server has the mail, so the row is read until it does.
    const sent = async () => (await platform.ctx.pool.query('SELECT * FROM platform.support_requests WHERE reference = $1', [reference])).rows[0];
    await expect.poll(async () => (await sent()).emailed_at, { timeout: 10_000 }).not.toBeNull();
    const row = await sent();
    expect(row).toMatchObject({ service: 'aggregator', type: 'support_request', message_id: mail.parsed.messageId });
    expect(row.emailed_at).not.toBeNull();
    expect(row.request_encrypted).not.toContain('asha');
    // Deleted right after the row is updated.
    await expect.poll(() => platform.ctx.storage.stat(row.attachments[0].object_key), { timeout: 10_000 }).toBeNull();
  });

  it('refuses invalid bodies with 400 naming each field, and stores nothing', async () => {
    const before = (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM platform.support_requests')).rows[0].n;
    const res = await aggregatorPost(body({ name: '', email: 'not-an-email', phone: '12', type: 'praise', details: 'x'.repeat(5001), consent: false }));
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'invalid_request', requestId: expect.any(String), timestamp: expect.any(String) });
    expect(Object.keys(res.body.error.fields).sort()).toEqual(['consent', 'details', 'email', 'name', 'phone', 'type']);
    const missing = await aggregatorPost({ attachments: [{ filename: '', contentType: 'text/plain' }] });
    expect(missing.status).toBe(400);
    expect(Object.keys(missing.body.error.fields)).toEqual(expect.arrayContaining(['name', 'type', 'details', 'consent', 'attachments.0.filename', 'attachments.0.data']));
    const notBase64 = await aggregatorPost(body({ attachments: [{ filename: 'a.txt', contentType: 'text/plain', data: 'not base64!' }] }));
    expect(notBase64.status).toBe(400);
    expect(notBase64.body.error.fields).toHaveProperty(['attachments.0.data']);
    const after = (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM platform.support_requests')).rows[0].n;
    expect(after).toBe(before);
  });

  it('answers 413, never 500, beyond 5 MiB per attachment, 10 MiB in all, 5 attachments or the body limit', async () => {
    const other = await platform.aggregator();
    const one = (bytes: number) => ({ filename: 'f.bin', contentType: 'application/octet-stream', data: b64(bytes) });
    const tooBig = await aggregatorPost(body({ attachments: [one(MAX_ATTACHMENT_BYTES + 1)] }), other.token);
    expect(tooBig.status).toBe(413);
    expect(tooBig.body.error).toMatchObject({ code: 'payload_too_large', fields: { 'attachments.0.data': [expect.stringContaining('5 MiB')] } });
    const tooMuch = await aggregatorPost(body({ attachments: [one(4_000_000), one(4_000_000), one(3_000_000)] }), other.token);
    expect(tooMuch.status).toBe(413);
    expect(tooMuch.body.error.detail).toContain('10 MiB');
    const tooMany = await aggregatorPost(body({ attachments: Array.from({ length: 6 }, () => one(10)) }), other.token);
    expect(tooMany.status).toBe(413);
    const hugeBody = await aggregatorPost(body({ attachments: [one(8_000_000), one(8_000_000)] }), other.token);
    expect(hugeBody.status).toBe(413);
    expect(hugeBody.body.error.code).toBe('payload_too_large');
    // Exactly at the limit is fine (and the general JSON limit of 1 MB does not apply here).
    const atLimit = await aggregatorPost(body({ attachments: [one(MAX_ATTACHMENT_BYTES), one(MAX_ATTACHMENT_BYTES)] }), other.token);
    expect(atLimit.status).toBe(200);
    // None of the refused ones took the caller's allowance or left a record.
    const { rows } = await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM platform.support_requests WHERE filed_by LIKE '%' || $1 || '%'`, [other.aggregatorId]);
    expect(rows[0].n).toBe(1);
  }, 60_000);

  it('allows 5 requests per hour per aggregator user, then 429 with Retry-After', async () => {
    const user = await platform.aggregator();
    for (let i = 0; i < 5; i++) expect((await aggregatorPost(body({ details: `request ${i}` }), user.token)).status).toBe(200);
    const limited = await aggregatorPost(body(), user.token);
    expect(limited.status).toBe(429);
    expect(limited.body.error.code).toBe('rate_limited');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(3500);
    expect(Number(limited.headers['retry-after'])).toBeLessThanOrEqual(3600);
    // Another user still may.
    expect((await aggregatorPost(body())).status).toBe(200);
  });

  it('signals: files with an API key (shape A errors), limited per submitter', async () => {
    const res = await signalsPost(body({ email: 'ravi@village.test', type: 'complaint', attachments: [{ filename: 'photo.png', contentType: 'image/png', data: b64(2048, '\u0089') }] }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, reference: expect.stringMatching(REFERENCE) });
    const mail = await smtp.waitFor((m) => m.parsed.subject?.includes(res.body.reference) ?? false);
    expect(mail.parsed.subject).toBe(`[${res.body.reference}] Complaint from Asha Devi`);
    expect(addresses(mail.parsed.replyTo)).toEqual(['ravi@village.test']);
    expect(mail.parsed.attachments[0]).toMatchObject({ filename: 'photo.png', size: 2048 });
    expect(mail.parsed.text).toContain('signals service');

    const bad = await signalsPost(body({ consent: false }));
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ error: 'invalid_request', message: expect.stringContaining('consent') });
    const big = await signalsPost(body({ attachments: [{ filename: 'f', contentType: 'x/y', data: b64(MAX_ATTACHMENT_BYTES + 3) }] }));
    expect(big.status).toBe(413);
    expect(big.body.error).toBe('payload_too_large');
    // The route's own body limit, not HTTP_BODY_LIMIT (1 MB), applies: 3 MiB goes through.
    const large = await signalsPost(body({ email: 'large@village.test', attachments: [{ filename: 'scan.pdf', contentType: 'application/pdf', data: b64(3 * 1024 * 1024) }] }));
    expect(large.status).toBe(200);
    const noKey = await request(platform.url('signals')).post('/api/v1/support/').send(body());
    expect(noKey.status).toBe(401);

    for (let i = 0; i < 4; i++) expect((await signalsPost(body({ email: 'RAVI@village.test' }))).status).toBe(200);
    const limited = await signalsPost(body({ email: 'ravi@village.test' }));
    expect(limited.status).toBe(429);
    expect(limited.body.error).toBe('rate_limited');
    expect(limited.headers['retry-after']).toMatch(/^\d+$/);
    expect((await signalsPost(body({ email: 'someone.else@village.test' }))).status).toBe(200);
  });
});
