/**
 * POST /api/v1/auth/signup, /api/v1/consent/u18/signup/guardian (errors in shape B) and
 * /api/v1/auth/u18-precheck (shape A), against a real worker sending e-mail to a real SMTP server
 * and SMS to the outbox.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeOf, readOutbox, startSmtpSink, waitForMessage } from '../helpers/messages.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let smtp: Awaited<ReturnType<typeof startSmtpSink>>;
let key: string;

const post = (path: string, body: unknown) => request(platform.url('signals')).post(path).set('x-api-key', key).send(body as object);
const shapeB = (res: request.Response, status: number, code: string) => {
  expect(res.status).toBe(status);
  expect(res.body).toEqual({ code, error: expect.any(String), message: expect.any(String) });
};
const minor = (over: Record<string, unknown> = {}) => ({
  network: 'local-discovery', domain: 'seeker', email: `kid${Math.random()}@example.in`, age: 15,
  guardianName: 'Sunita Devi', guardianEmail: `parent${Math.random()}@example.in`, guardianDeclarationAccepted: true, ...over,
});

beforeAll(async () => {
  smtp = await startSmtpSink();
  platform = await startTestPlatform({
    services: ['signals'], worker: true,
    env: { SMTP_URL: smtp.url, SIGNUP_LIMIT_PER_IDENTIFIER: '4', SIGNUP_LIMIT_PER_IP: '1000', GUARDIAN_MAX_WARDS: '2' },
  });
  key = await platform.apiKey('signals');
});
afterAll(async () => {
  await platform.stop();
  await smtp.close();
});

describe('signup', () => {
  it('creates an adult, sends the welcome e-mail by a task, and answers alreadyRegistered for a known e-mail or phone', async () => {
    const res = await post('/api/v1/auth/signup', { name: 'Priya Sharma', email: 'Priya@Example.in', phoneNumber: '98765 43210', age: 24, domain: 'seeker' });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ ok: true, alreadyRegistered: false });
    const welcome = await waitForMessage(() => smtp.messages, 'priya@example.in');
    expect(welcome.subject).toMatch(/Welcome/);
    expect(welcome.text).toContain('Priya Sharma');

    const { rows } = await platform.ctx.pool.query('SELECT status, age, domain, email_encrypted, phone_encrypted FROM signals.users');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 'active', age: 24, domain: 'seeker' });
    expect(rows[0].email_encrypted).not.toContain('priya');
    expect(platform.ctx.pii.decrypt(rows[0].phone_encrypted)).toBe('+919876543210');

    const again = await post('/api/v1/auth/signup', { name: 'Someone Else', phoneNumber: '+919876543210' });
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ ok: true, alreadyRegistered: true });
    expect((await platform.ctx.pool.query('SELECT 1 FROM signals.users')).rowCount).toBe(1);
  });

  it('sends a minor to the guardian route with 409 GUARDIAN_CONSENT_REQUIRED and creates nothing', async () => {
    const res = await post('/api/v1/auth/signup', { name: 'Kid', email: 'kid@example.in', age: 15 });
    shapeB(res, 409, 'GUARDIAN_CONSENT_REQUIRED');
    expect(res.body.message).toContain('/api/v1/consent/u18/signup/guardian');
    expect((await platform.ctx.pool.query(`SELECT 1 FROM signals.users WHERE created_by = 'signup' AND age = 15`)).rowCount).toBe(0);
  });

  it.each([
    ['no e-mail or phone', { name: 'A' }, 'email'],
    ['an empty name', { name: '', email: 'a@example.in' }, 'name'],
    ['a name over 200 characters', { name: 'x'.repeat(201), email: 'a@example.in' }, 'name'],
    ['a bad e-mail', { name: 'A', email: 'not-an-email' }, 'email'],
    ['a bad phone', { name: 'A', phoneNumber: '12' }, 'phoneNumber'],
    ['a phone that is no number', { name: 'A', phoneNumber: 'abcdefgh' }, 'phoneNumber'],
    ['an age over 120', { name: 'A', email: 'a@example.in', age: 121 }, 'age'],
    ['a fractional age', { name: 'A', email: 'a@example.in', age: 20.5 }, 'age'],
    ['an unknown domain', { name: 'A', email: 'a@example.in', domain: 'martian' }, 'domain'],
    ['an unknown field', { name: 'A', email: 'a@example.in', nickname: 'a' }, 'nickname'],
    ['a body that is an array', [1, 2], '(root)'],
  ])('refuses %s with 400 in shape B naming the field', async (_what, body, field) => {
    const res = await post('/api/v1/auth/signup', body);
    shapeB(res, 400, 'invalid_request');
    expect(res.body.message).toContain(field === '(root)' ? 'expected object' : field);
  });

  it('answers malformed JSON, a wrong content type and a missing API key in shape B', async () => {
    const bad = await request(platform.url('signals')).post('/api/v1/auth/signup').set('x-api-key', key).set('content-type', 'application/json').send('{"name":');
    shapeB(bad, 400, 'invalid_json');
    const text = await request(platform.url('signals')).post('/api/v1/auth/signup').set('x-api-key', key).set('content-type', 'text/plain').send('name=a');
    shapeB(text, 415, 'unsupported_media_type');
    const nokey = await request(platform.url('signals')).post('/api/v1/auth/signup').send({ name: 'A', email: 'a@example.in' });
    shapeB(nokey, 401, 'missing_api_key');
  });

  it('limits signups per identifier (4 per hour here) with 429 and Retry-After', async () => {
    const body = { name: 'Repeat', email: 'repeat@example.in', age: 30 };
    for (let i = 0; i < 4; i++) expect((await post('/api/v1/auth/signup', body)).status).toBeLessThan(300);
    const limited = await post('/api/v1/auth/signup', body);
    shapeB(limited, 429, 'RATE_LIMITED');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
  });
});

describe('guardian signup', () => {
  it('creates the minor pending_guardian and e-mails the guardian a 6-digit code', async () => {
    const body = minor({ email: 'asha@example.in', guardianEmail: 'meena@example.in' });
    const res = await post('/api/v1/consent/u18/signup/guardian', body);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ otpSent: true });
    const mail = await waitForMessage(() => smtp.messages, 'meena@example.in');
    expect(codeOf(mail)).toMatch(/^\d{6}$/);
    expect(mail.text).toContain('Sunita Devi');
    const { rows } = await platform.ctx.pool.query(
      `SELECT u.status, u.age, g.declaration_accepted_at IS NOT NULL AS declared, c.code_hash
         FROM signals.users u JOIN signals.guardians g ON g.ward_user_id = u.user_id
         JOIN signals.one_time_codes c ON c.scope = 'guardian:' || u.user_id`);
    expect(rows).toEqual([expect.objectContaining({ status: 'pending_guardian', age: 15, declared: true })]);
    expect(rows[0].code_hash.toString()).not.toContain(codeOf(mail));
  });

  it('sends the code by SMS (outbox) when the guardian gave only a phone', async () => {
    const res = await post('/api/v1/consent/u18/signup/guardian', minor({ guardianEmail: undefined, guardianPhone: '+91 91234 56789' }));
    expect(res.status).toBe(201);
    const sms = await waitForMessage(() => readOutbox(platform.dataDir), '+919123456789');
    expect(codeOf(sms)).toMatch(/^\d{6}$/);
  });

  it('sends at most 3 codes per hour for one minor (429 OTP_SEND_LIMIT)', async () => {
    const body = minor({ email: 'again@example.in' });
    for (let i = 0; i < 3; i++) expect((await post('/api/v1/consent/u18/signup/guardian', body)).status).toBe(201);
    const res = await post('/api/v1/consent/u18/signup/guardian', body);
    shapeB(res, 429, 'OTP_SEND_LIMIT');
    expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
    expect((await platform.ctx.pool.query(`SELECT 1 FROM signals.users u JOIN signals.one_time_codes c ON c.scope = 'guardian:' || u.user_id
      WHERE u.email_index = $1`, [platform.ctx.pii.blindIndex('email', 'again@example.in')])).rowCount).toBe(3);
  });

  it.each([
    ['an adult', { age: 18 }, 409, 'NOT_A_MINOR'],
    ['the same e-mail for guardian and minor', { email: 'same@example.in', guardianEmail: 'same@example.in' }, 409, 'SAME_CONTACT_NOT_ALLOWED'],
    ['a declaration not accepted', { guardianDeclarationAccepted: false }, 400, 'GUARDIAN_DECLARATION_REQUIRED'],
    ['no guardian contact', { guardianEmail: undefined }, 400, 'invalid_request'],
    ['no age', { age: undefined }, 400, 'invalid_request'],
    ['another network', { network: 'elsewhere' }, 400, 'invalid_request'],
    ['an unknown domain', { domain: 'martian' }, 400, 'invalid_request'],
    ['an unknown field', { guardianAge: 40 }, 400, 'invalid_request'],
    ['a string age', { age: '15' }, 400, 'invalid_request'],
  ])('refuses %s (%i %s) in shape B', async (_what, over, status, code) => {
    shapeB(await post('/api/v1/consent/u18/signup/guardian', minor(over)), status, code);
  });

  it('accepts the same contact when acknowledged, and refuses a guardian over GUARDIAN_MAX_WARDS (2)', async () => {
    const same = await post('/api/v1/consent/u18/signup/guardian', minor({ phoneNumber: '+919000000001', email: undefined, guardianEmail: undefined, guardianPhone: '+919000000001', sameContactAcknowledged: true }));
    expect(same.status).toBe(201);
    const guardianEmail = 'busy@example.in';
    for (let i = 0; i < 2; i++) expect((await post('/api/v1/consent/u18/signup/guardian', minor({ guardianEmail }))).status).toBe(201);
    shapeB(await post('/api/v1/consent/u18/signup/guardian', minor({ guardianEmail })), 409, 'TOO_MANY_WARDS');
  });
});

describe('guardian signup of a minor already pending (Trust II)', () => {
  const guardianOf = async (email: string) => {
    const { rows } = await platform.ctx.pool.query(
      `SELECT g.name_encrypted, g.email_encrypted, g.phone_encrypted, g.ward_user_id FROM signals.guardians g JOIN signals.users u ON u.user_id = g.ward_user_id
        WHERE u.email_index = $1`, [platform.ctx.pii.blindIndex('email', email)]);
    const d = (v: string | null) => (v ? platform.ctx.pii.decrypt(v) : null);
    return rows.map((r) => ({ name: d(r.name_encrypted), email: d(r.email_encrypted), phone: d(r.phone_encrypted), ward: r.ward_user_id }));
  };
  const guardianRoute = '/api/v1/consent/u18/signup/guardian';

  it('never replaces the guardian without a code the guardian on record got, nor sends a code to another guardian', async () => {
    // The minor's e-mail and phone: each request below names one, to stay under the per-identifier limit (4).
    const kid = { email: 'ravi.kid@example.in', phoneNumber: '+919811100001' };
    const first = await post(guardianRoute, minor({ ...kid, guardianName: 'Kamla Devi', guardianEmail: 'kamla@example.in' }));
    expect(first.status).toBe(201);
    const firstCode = codeOf(await waitForMessage(() => smtp.messages, 'kamla@example.in'));
    const record = await guardianOf(kid.email);
    expect(record).toEqual([expect.objectContaining({ name: 'Kamla Devi', email: 'kamla@example.in', phone: null })]);

    // Someone who knows the minor's e-mail names themselves: refused, nothing sent to them.
    const stranger = await post(guardianRoute, minor({ email: kid.email, guardianName: 'Stranger', guardianEmail: 'stranger@example.in' }));
    shapeB(stranger, 409, 'GUARDIAN_ALREADY_SET');
    // The guardian's e-mail plus a phone of theirs (SMS would not reach the guardian on record): refused too.
    shapeB(await post(guardianRoute, minor({ phoneNumber: kid.phoneNumber, guardianEmail: 'kamla@example.in', guardianPhone: '+919822200002' })), 409, 'GUARDIAN_ALREADY_SET');
    // A wrong code of the guardian on record: refused, and the wrong try counted.
    const wrong = String((Number(firstCode) + 1) % 1_000_000).padStart(6, '0');
    shapeB(await post(guardianRoute, minor({ email: kid.email, guardianEmail: 'stranger@example.in', currentGuardianOtp: wrong })), 403, 'GUARDIAN_OTP_INVALID');
    expect((await platform.ctx.pool.query('SELECT 1 FROM signals.one_time_code_failures WHERE scope = $1', [`guardian:${record[0].ward}`])).rowCount).toBe(1);
    shapeB(await post(guardianRoute, minor({ email: kid.email, guardianEmail: 'stranger@example.in', currentGuardianOtp: 'abc' })), 400, 'invalid_request');
    expect(await guardianOf(kid.email)).toEqual(record);

    // The guardian on record (another name given changes nothing): a new code, to them.
    const again = await post(guardianRoute, minor({ phoneNumber: kid.phoneNumber, guardianName: 'K. Devi', guardianEmail: 'kamla@example.in' }));
    expect(again.status).toBe(201);
    const secondCode = codeOf(await waitForMessage(() => smtp.messages, 'kamla@example.in', 1));
    expect(await guardianOf(kid.email)).toEqual(record);

    // With a code the guardian on record got: replaced, and the new guardian gets a code.
    const replaced = await post(guardianRoute, minor({ email: kid.email, guardianName: 'Mohan Lal', guardianEmail: 'mohan@example.in', currentGuardianOtp: secondCode }));
    expect(replaced.status).toBe(201);
    expect(await guardianOf(kid.email)).toEqual([expect.objectContaining({ name: 'Mohan Lal', email: 'mohan@example.in' })]);
    expect(codeOf(await waitForMessage(() => smtp.messages, 'mohan@example.in'))).toMatch(/^\d{6}$/);
    // The replaced guardian's codes are spent; the stranger never got anything.
    const { rows: live } = await platform.ctx.pool.query('SELECT 1 FROM signals.one_time_codes WHERE scope = $1 AND used_at IS NULL', [`guardian:${record[0].ward}`]);
    expect(live).toHaveLength(1);
    expect(smtp.messages.filter((m) => m.to === 'stranger@example.in')).toEqual([]);
  });
});

describe('u18 precheck', () => {
  it('requires the date of birth unless a user with a known age holds the contact', async () => {
    const unknown = await post('/api/v1/auth/u18-precheck', { network: 'local-discovery', email: 'nobody@example.in' });
    expect(unknown.status).toBe(200);
    expect(unknown.body).toEqual({ requiresDob: true });
    const known = await post('/api/v1/auth/u18-precheck', { network: 'local-discovery', phoneNumber: '9876543210' });
    expect(known.body).toEqual({ requiresDob: false });
  });

  it.each([
    [{ network: 'local-discovery' }],
    [{ network: 'other', email: 'a@example.in' }],
    [{ network: 'local-discovery', email: 'bad' }],
  ])('refuses %j with 400 in shape A', async (body) => {
    const res = await post('/api/v1/auth/u18-precheck', body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'invalid_request', message: expect.any(String) });
  });
});
