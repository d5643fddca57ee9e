/**
 * Organisation sign-up and joining an organisation (Trust II, issue 29), against the real services,
 * worker and a real SMTP server:
 * - `POST /v1/orgs/create` is rate-limited per client IP and per owner e-mail (each call e-mails the
 *   network admin): 429 in shape C with Retry-After, nothing written, no e-mail;
 * - an aggregator registration naming an existing organisation waits for that organisation's
 *   approval — a review link e-mailed to the organisation's contact — before the network admin is
 *   asked; the network admin (link or `ldp aggregator approve`) cannot approve it before.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runLdp } from '../helpers/cli.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

const ADMIN = 'admin@network.test';
let platform: TestPlatform;
let smtp: SMTPServer;
const inbox: ParsedMail[] = [];

beforeAll(async () => {
  smtp = new SMTPServer({
    logger: false, disabledCommands: ['STARTTLS', 'AUTH'], authOptional: true,
    onData(stream, _session, callback) {
      simpleParser(stream).then((mail) => { inbox.push(mail); callback(); }, callback);
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
  platform = await startTestPlatform({
    worker: true,
    env: {
      EMBEDDING_PROVIDER: 'hashing', ORG_HIERARCHY_ENABLED: 'true', NETWORK_ADMIN_EMAIL: ADMIN,
      SMTP_URL: `smtp://127.0.0.1:${(smtp.server.address() as AddressInfo).port}`,
      ORG_SIGNUP_RATE_LIMIT_PER_IP: '4', ORG_SIGNUP_RATE_LIMIT_PER_EMAIL: '2',
    },
  });
});
afterAll(async () => {
  await platform?.stop();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

/** The next e-mail to `to` whose subject contains `subject` (each message is taken once). */
async function mailTo(to: string, subject: string): Promise<ParsedMail> {
  return until(`an e-mail to ${to} about "${subject}"`, () => {
    const i = inbox.findIndex((m) => (m.to as { text: string }).text.includes(to) && m.subject?.includes(subject));
    return i >= 0 ? inbox.splice(i, 1)[0] : undefined;
  });
}

/** The approve and reject links of a review e-mail, as paths of the aggregator service. */
function reviewLinks(mail: ParsedMail): { approve: string; reject: string } {
  const find = (word: string) => new URL(new RegExp(`${word}: (\\S+)`).exec(mail.text ?? '')![1]).pathname;
  return { approve: find('Approve'), reject: find('Reject') };
}

/** Whether the worker has sent every e-mail enqueued so far. */
async function mailsSent(): Promise<boolean> {
  const { rows } = await platform.ctx.pool.query(`SELECT 1 FROM graphile_worker.jobs WHERE task_identifier LIKE 'aggregator-send-%'`);
  return rows.length === 0;
}

const api = () => request(platform.url('aggregator'));
const future = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString();
const orgBody = (email: string, name: string) => ({
  display_name: name, owner: { name: 'Anita Rao', email, phone: '98765 12345' },
  consent: { value: true, given_at: new Date(Date.now() - 60_000).toISOString(), valid_till: future(365) },
});
const aggregatorBody = (name: string, email: string, over: Record<string, unknown> = {}) => ({
  name, type: 'seeker', contact: { name: 'Vikram Singh', phone: '+91 98120 00001', email },
  consent: { value: true, given_at: new Date(Date.now() - 60_000).toISOString(), valid_till: future(365) },
  ...over,
});

/** `POST /v1/orgs/create` from the client address `ip` (any of 127.0.0.0/8); status, body and headers. */
function createOrgFrom(ip: string, body: object): Promise<{ status: number; body: any; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${platform.url('aggregator')}/v1/orgs/create`, { method: 'POST', localAddress: ip, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text), headers: res.headers }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const orgsNamed = async (prefix: string) => (await platform.ctx.pool.query(`SELECT 1 FROM aggregator.organisations WHERE display_name LIKE $1 || '%'`, [prefix])).rowCount;

describe('POST /v1/orgs/create is rate-limited', () => {
  it('per owner e-mail: the third registration for one e-mail within the window is 429 with Retry-After, and e-mails nobody', async () => {
    for (const status of [201, 200]) expect((await createOrgFrom('127.0.0.11', orgBody('same@ngo.example.org', 'Same Owner Trust'))).status).toBe(status);
    await until('the review e-mails sent', mailsSent);
    const before = inbox.length;
    // From another address: the e-mail's own limit.
    const refused = await createOrgFrom('127.0.0.12', orgBody('SAME@ngo.example.org', 'Same Owner Trust'));
    expect(refused.status).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect(refused.body).toEqual({ error: expect.objectContaining({ code: 'rate_limited', title: 'Too Many Requests', detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) }) });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(await mailsSent()).toBe(true);
    expect(inbox.length).toBe(before);
    expect(await orgsNamed('Same Owner Trust')).toBe(1);
  });

  it('per client IP: the fifth registration from one address is 429; another address is still served', async () => {
    for (let i = 1; i <= 4; i++) expect((await createOrgFrom('127.0.0.21', orgBody(`ip${i}@ngo.example.org`, `Busy Address Society ${i}`))).status).toBe(201);
    const fifth = await createOrgFrom('127.0.0.21', orgBody('ip5@ngo.example.org', 'Busy Address Society 5'));
    expect(fifth.status).toBe(429);
    expect(fifth.body.error.code).toBe('rate_limited');
    expect(Number(fifth.headers['retry-after'])).toBeGreaterThan(0);
    expect(await orgsNamed('Busy Address Society 5')).toBe(0);
    expect((await createOrgFrom('127.0.0.22', orgBody('ip5@ngo.example.org', 'Busy Address Society 5'))).status).toBe(201);
  });

  it('an invalid body is not counted (it sends no e-mail): 400, not 429', async () => {
    for (let i = 0; i < 6; i++) expect((await createOrgFrom('127.0.0.31', { display_name: 'Broken' })).status).toBe(400);
    expect((await createOrgFrom('127.0.0.31', orgBody('valid@ngo.example.org', 'Valid After Broken'))).status).toBe(201);
  });
});

/** Registers an aggregator for a new person `sub`; the response. */
async function registerAggregator(sub: string, body: object) {
  const userToken = await platform.ctx.tokens.issueUser(sub, 3600);
  const res = await api().post('/v1/aggregator-registrations/create').set('authorization', `Bearer ${userToken}`).send(body);
  return { res, userToken };
}

const statusOf = async (aggregatorId: string) => (await platform.ctx.pool.query('SELECT status FROM aggregator.aggregators WHERE aggregator_id = $1', [aggregatorId])).rows[0].status;

describe('joining an existing organisation needs that organisation’s approval', () => {
  it('the organisation’s owner approves first, by its e-mailed link; only then is the network admin asked, who cannot approve before', async () => {
    const org = await createOrgFrom('127.0.0.41', orgBody('owner@joinme.example.org', 'Joinme Foundation'));
    expect(org.status).toBe(201);
    expect((await api().post(reviewLinks(await mailTo(ADMIN, 'Joinme Foundation')).approve).type('form').send({})).status).toBe(200);
    await mailTo('owner@joinme.example.org', 'approved');

    const { res, userToken } = await registerAggregator('user-joiner', aggregatorBody('Joiner Hub', 'joiner@hub.example.org', { org_id: org.body.org_id }));
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ status: 'pending', org_slug: 'joinme-foundation', message: expect.stringContaining('approval of organisation joinme-foundation') });
    const aggregatorId = res.body.aggregator_id;

    const ask = await mailTo('owner@joinme.example.org', 'Joiner Hub joining your organisation Joinme Foundation');
    expect(ask.text).toContain('Vikram Singh <joiner@hub.example.org>');
    await until('the e-mails sent', mailsSent);
    expect(inbox.some((m) => m.subject?.includes('Joiner Hub') && (m.to as { text: string }).text.includes(ADMIN)), 'the network admin asked first').toBe(false);

    // The network admin's command line cannot approve it before the organisation.
    const env = { DATA_DIR: platform.dataDir, DATABASE_URL: platform.databaseUrl, LOG_LEVEL: 'silent' };
    const early = await runLdp(['aggregator', 'approve', aggregatorId], env);
    expect(early.code).toBe(1);
    expect(early.stderr).toContain('has not approved it yet');
    expect(await statusOf(aggregatorId)).toBe('pending');
    expect((await api().post('/v1/aggregator-registrations/token').set('authorization', `Bearer ${userToken}`)).status).toBe(403);

    const links = reviewLinks(ask);
    const page = await api().get(links.approve);
    expect(page.status).toBe(200);
    expect(page.text).toContain('Approve the aggregator joining your organisation Joinme Foundation');
    const approved = await api().post(links.approve).type('form').send({});
    expect(approved.status).toBe(200);
    expect(approved.text).toContain('The network admin reviews it next');
    expect(await statusOf(aggregatorId)).toBe('pending');
    expect((await api().post(links.reject).type('form').send({ reason: 'changed my mind' })).status).toBe(409);

    // Now the network admin is asked, and decides.
    const review = await mailTo(ADMIN, 'Review the aggregator registration of Joiner Hub');
    expect(review.text).toContain('It joins the existing organisation Joinme Foundation, which approved it.');
    expect((await api().post(reviewLinks(review).approve).type('form').send({})).status).toBe(200);
    expect(await statusOf(aggregatorId)).toBe('approved');
    await mailTo('joiner@hub.example.org', 'approved');
    const login = await api().post('/v1/aggregator-registrations/token').set('authorization', `Bearer ${userToken}`);
    expect(login.status).toBe(200);
    const me = await api().get('/v1/me').set('authorization', `Bearer ${login.body.access_token}`);
    expect(me.body).toMatchObject({ aggregator_id: aggregatorId, org_id: org.body.org_id });
  });

  it('the organisation rejects by its link, with a reason: the registration is rejected and the network admin never asked', async () => {
    const org = await createOrgFrom('127.0.0.42', orgBody('owner@refuser.example.org', 'Refuser Trust'));
    expect((await api().post(reviewLinks(await mailTo(ADMIN, 'Refuser Trust')).approve).type('form').send({})).status).toBe(200);
    const { res } = await registerAggregator('user-stranger', aggregatorBody('Stranger Hub', 'stranger@hub.example.org', { org_id: org.body.org_id }));
    expect(res.status).toBe(201);
    const { reject } = reviewLinks(await mailTo('owner@refuser.example.org', 'Stranger Hub joining'));
    expect((await api().post(reject).type('form').send({ reason: 'Not one of ours' })).status).toBe(200);
    expect(await statusOf(res.body.aggregator_id)).toBe('rejected');
    expect((await mailTo('stranger@hub.example.org', 'rejected')).text).toContain('Reason: Not one of ours');
    await until('the e-mails sent', mailsSent);
    expect(inbox.some((m) => m.subject?.includes('Stranger Hub'))).toBe(false);
  });

  it('an organisation without an owner is asked through the registrant of its approved aggregator; one without either, through the network admin', async () => {
    const { res: founder } = await registerAggregator('user-founder', aggregatorBody('Founder Hub', 'founder@hub.example.org'));
    expect((await api().post(reviewLinks(await mailTo(ADMIN, 'Founder Hub')).approve).type('form').send({})).status).toBe(200);
    const { rows: [{ org_id: orgId }] } = await platform.ctx.pool.query('SELECT org_id FROM aggregator.aggregators WHERE aggregator_id = $1', [founder.body.aggregator_id]);
    const { res: second } = await registerAggregator('user-second', aggregatorBody('Second Hub', 'second@hub.example.org', { org_id: orgId }));
    expect(second.status).toBe(201);
    await mailTo('founder@hub.example.org', 'Second Hub joining your organisation Founder Hub');

    // Made from the command line (`ldp aggregator create`): no person on record.
    const bare = await platform.aggregator({ name: 'Bare Collective', types: ['seeker'] });
    const { res: third } = await registerAggregator('user-third', aggregatorBody('Third Hub', 'third@hub.example.org', { org_id: bare.orgId }));
    expect(third.status).toBe(201);
    await mailTo(ADMIN, 'Third Hub joining your organisation Bare Collective');
  });
});
