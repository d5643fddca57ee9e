/**
 * Organisation and aggregator registration with approval, against the real services, worker and
 * a real SMTP server: review e-mails with signed links, the review pages and decisions, the
 * signed-link rules (expired → renewable, reused, tampered, forged), approval by the command line,
 * the login exchange, the push of the organisation to signals, and the whole path from a new
 * aggregator to a participant registered through its link. Errors in shape C.
 */
import type { AddressInfo } from 'node:net';
import { SignJWT } from 'jose';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createReview, reviewLinkKey, signReviewToken } from '../../lib/aggregator/review-links.ts';
import { runLdp } from '../helpers/cli.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

const ADMIN = 'admin@network.test';
let platform: TestPlatform;
let smtp: SMTPServer;
const inbox: ParsedMail[] = [];

function expectShapeC(body: any, title: string, code?: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code: code ?? expect.any(String), title, detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) }) });
}

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

const api = () => request(platform.url('aggregator'));
const future = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString();
const orgBody = (email: string, over: Record<string, unknown> = {}) => ({
  display_name: 'Sahyog Foundation', state: 'Haryana',
  owner: { name: 'Anita Rao', email, phone: '98765 12345' },
  consent: { value: true, given_at: new Date(Date.now() - 60_000).toISOString(), valid_till: future(365) },
  website: 'https://sahyog.example.org', aggregator_type: ['seeker'], management_type: 'private',
  address: { addressLocality: 'Kaithal', addressRegion: 'Haryana', addressCountry: 'IN' },
  ...over,
});
const aggregatorBody = (over: Record<string, unknown> = {}) => ({
  name: 'Kaithal Skills Hub', type: 'seeker', url: 'https://hub.example.org',
  contact: { name: 'Vikram Singh', phone: '+91 98120 00001', email: 'Vikram@Hub.example.org' },
  locations: [{ geo: { type: 'Point', coordinates: [76.4, 29.8] }, address: { addressLocality: 'Kaithal', addressRegion: 'Haryana' } }],
  consent: { value: true, given_at: new Date(Date.now() - 60_000).toISOString(), valid_till: future(365) },
  ...over,
});

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
    },
  });
});
afterAll(async () => {
  await platform?.stop();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

describe('POST /v1/orgs/create', () => {
  it('is 404 when ORG_HIERARCHY_ENABLED is off', async () => {
    const off = await startTestPlatform({ services: ['aggregator'] });
    try {
      const res = await request(off.url('aggregator')).post('/v1/orgs/create').send(orgBody('x@example.org'));
      expect(res.status).toBe(404);
      expectShapeC(res.body, 'Not Found');
    } finally {
      await off.stop();
    }
  });

  it('registers a pending organisation, e-mails the admin a review link that approves it, and tells the owner', async () => {
    const res = await api().post('/v1/orgs/create').send(orgBody('Anita@Sahyog.example.org'));
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ org_id: expect.stringMatching(/^[0-9a-f-]{36}$/), slug: 'sahyog-foundation', status: 'pending', message: expect.any(String) });
    const orgId = res.body.org_id;
    const { rows: [org] } = await platform.ctx.pool.query('SELECT status, registration FROM aggregator.organisations WHERE org_id = $1', [orgId]);
    expect(org.status).toBe('pending');
    expect(org.registration).toMatchObject({ website: 'https://sahyog.example.org', aggregator_type: ['seeker'] });
    expect(JSON.stringify(org.registration)).not.toContain('Anita');
    const { rows: [owner] } = await platform.ctx.pool.query('SELECT enabled, email_encrypted, phone_encrypted FROM aggregator.users WHERE org_id = $1', [orgId]);
    expect(owner.enabled).toBe(false);
    expect(platform.ctx.pii.decrypt(owner.email_encrypted)).toBe('anita@sahyog.example.org');
    expect(platform.ctx.pii.decrypt(owner.phone_encrypted)).toBe('+919876512345');
    const { rows: groups } = await platform.ctx.pool.query('SELECT name FROM aggregator.identity_groups WHERE org_id = $1', [orgId]);
    expect(groups).toEqual([{ name: 'org:sahyog-foundation' }]);

    const review = await mailTo(ADMIN, 'Sahyog Foundation');
    expect(review.text).toContain('Anita Rao <anita@sahyog.example.org>');
    const links = reviewLinks(review);
    const page = await api().get(links.approve);
    expect(page.status).toBe(200);
    expect(page.text).toContain('Approve the organisation registration');
    // Opening the page decides nothing.
    expect((await platform.ctx.pool.query('SELECT status FROM aggregator.organisations WHERE org_id = $1', [orgId])).rows[0].status).toBe('pending');

    const decided = await api().post(links.approve).type('form').send({});
    expect(decided.status).toBe(200);
    expect(decided.text).toContain('Registration approved');
    expect((await platform.ctx.pool.query('SELECT status FROM aggregator.organisations WHERE org_id = $1', [orgId])).rows[0].status).toBe('approved');
    expect((await platform.ctx.pool.query('SELECT enabled FROM aggregator.users WHERE org_id = $1', [orgId])).rows[0].enabled).toBe(true);
    const told = await mailTo('anita@sahyog.example.org', 'approved');
    expect(told.text).toContain('Your login is enabled');

    // Single use: the same link, or the reject link of the same e-mail, cannot decide again.
    for (const path of [links.approve, links.reject]) {
      const again = await api().post(path).type('form').send({ reason: 'late' });
      expect(again.status).toBe(409);
      expect(again.text).toContain('already used');
    }
  });

  it('answers a duplicate pending registration (same owner e-mail) with the existing organisation and a fresh review e-mail', async () => {
    const first = await api().post('/v1/orgs/create').send(orgBody('dup@ngo.example.org', { display_name: 'Duplicate NGO' }));
    expect(first.status).toBe(201);
    await mailTo(ADMIN, 'Duplicate NGO');
    const second = await api().post('/v1/orgs/create').send(orgBody('DUP@ngo.example.org', { display_name: 'Duplicate NGO again' }));
    expect(second.status).toBe(200);
    expect(second.body).toMatchObject({ org_id: first.body.org_id, slug: first.body.slug, status: 'pending' });
    await mailTo(ADMIN, 'Duplicate NGO');
    const { rows } = await platform.ctx.pool.query(`SELECT 1 FROM aggregator.organisations WHERE display_name LIKE 'Duplicate NGO%'`);
    expect(rows).toHaveLength(1);
  });

  it('rejects through the reject link, with a reason, and tells the owner why', async () => {
    const res = await api().post('/v1/orgs/create').send(orgBody('reject@ngo.example.org', { display_name: 'Doubtful Trust' }));
    const { reject } = reviewLinks(await mailTo(ADMIN, 'Doubtful Trust'));
    expect((await api().get(reject)).text).toContain('name="reason"');
    const noReason = await api().post(reject).type('form').send({ reason: ' ' });
    expect(noReason.status).toBe(400);
    const done = await api().post(reject).type('form').send({ reason: 'Website does not exist' });
    expect(done.status).toBe(200);
    const { rows: [org] } = await platform.ctx.pool.query('SELECT status, status_reason FROM aggregator.organisations WHERE org_id = $1', [res.body.org_id]);
    expect(org).toEqual({ status: 'rejected', status_reason: 'Website does not exist' });
    expect((await mailTo('reject@ngo.example.org', 'rejected')).text).toContain('Reason: Website does not exist');
  });

  it('refuses tampered and forged links (400) and expired ones (410, renewable)', async () => {
    const res = await api().post('/v1/orgs/create').send(orgBody('links@ngo.example.org', { display_name: 'Link Rules Society' }));
    const { approve } = reviewLinks(await mailTo(ADMIN, 'Link Rules Society'));
    const token = approve.split('/').pop()!;
    const [header, payload, signature] = token.split('.');
    const flipped = `${signature.slice(0, 10)}${signature[10] === 'A' ? 'B' : 'A'}${signature.slice(11)}`;
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    const otherIntent = Buffer.from(JSON.stringify({ ...claims, intent: 'reject' })).toString('base64url');
    const forged = await new SignJWT({ intent: 'approve', kind: 'organisation' }).setProtectedHeader({ alg: 'HS256' })
      .setIssuer('ldp-aggregator').setAudience('ldp-registration-review').setSubject(res.body.org_id).setJti(claims.jti)
      .setExpirationTime('1h').sign(new TextEncoder().encode('x'.repeat(32)));
    const none = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${payload}.`;
    for (const bad of [`${header}.${payload}.${flipped}`, `${header}.${otherIntent}.${signature}`, forged, none, 'garbage']) {
      const get = await api().get(`/review/${bad}`);
      expect(get.status, bad).toBe(400);
      expect(get.text).toContain('Invalid review link');
      expect((await api().post(`/review/${bad}`).type('form').send({})).status).toBe(400);
    }
    expect((await platform.ctx.pool.query('SELECT status FROM aggregator.organisations WHERE org_id = $1', [res.body.org_id])).rows[0].status).toBe('pending');

    // An expired review of the same organisation.
    const reviewId = await createReview(platform.ctx.pool, 'organisation', res.body.org_id, -60);
    const expired = await signReviewToken(await reviewLinkKey(platform.config), { reviewId, kind: 'organisation', subjectId: res.body.org_id, intent: 'approve' }, new Date(Date.now() - 60_000));
    const page = await api().get(`/review/${expired}`);
    expect(page.status).toBe(410);
    expect(page.text).toContain('E-mail me a fresh review link');
    expect((await api().post(`/review/${expired}`).type('form').send({})).status).toBe(410);
    const renewed = await api().post(`/review/${expired}/renew`);
    expect(renewed.status).toBe(200);
    const fresh = reviewLinks(await mailTo(ADMIN, 'Link Rules Society'));
    expect((await api().post(fresh.approve).type('form').send({})).status).toBe(200);
    expect((await platform.ctx.pool.query('SELECT status FROM aggregator.organisations WHERE org_id = $1', [res.body.org_id])).rows[0].status).toBe('approved');
    // The first e-mail's link now finds the organisation decided.
    const late = await api().post(approve).type('form').send({});
    expect(late.status).toBe(409);
  });

  it.each([
    [{ consent: { value: true, given_at: future(1), valid_till: future(2) } }, 'consent.given_at'],
    [{ consent: { value: true, given_at: new Date().toISOString(), valid_till: new Date(Date.now() - 1000).toISOString() } }, 'consent.valid_till'],
    [{ consent: { value: false, given_at: new Date().toISOString(), valid_till: future(2) } }, 'consent.value'],
    [{ website: 'not a url' }, 'website'],
    [{ owner: { name: 'A', email: 'nope', phone: '9876512345' } }, 'owner.email'],
    [{ owner: { name: 'A', email: 'a@b.org', phone: '123' } }, 'owner.phone'],
    [{ aggregator_type: ['pets'] }, 'aggregator_type.0'],
    [{ display_name: undefined }, 'display_name'],
  ])('answers 400 in shape C for %j', async (over, field) => {
    const res = await api().post('/v1/orgs/create').send(orgBody('bad@ngo.example.org', over));
    expect(res.status).toBe(400);
    expectShapeC(res.body, 'Bad Request', 'invalid_request');
    expect(Object.keys(res.body.error.fields)).toContain(field);
  });
});

describe('POST /v1/aggregator-registrations/create', () => {
  it('registers with a user token, is approved by its review link, pushes the organisation, logs in and registers a participant through its link', async () => {
    const userToken = await platform.ctx.tokens.issueUser('user-vikram', 3600, { email: 'vikram@hub.example.org' });
    const pending = await api().post('/v1/aggregator-registrations/token').set('authorization', `Bearer ${userToken}`);
    expect(pending.status).toBe(404);
    const res = await api().post('/v1/aggregator-registrations/create').set('authorization', `Bearer ${userToken}`).send(aggregatorBody());
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ aggregator_id: expect.stringMatching(/^[0-9a-f-]{36}$/), org_slug: 'kaithal-skills-hub', status: 'pending', message: expect.any(String) });
    const aggregatorId = res.body.aggregator_id;
    const { rows: [user] } = await platform.ctx.pool.query('SELECT enabled, subject, email_encrypted FROM aggregator.users WHERE aggregator_id = $1', [aggregatorId]);
    expect(user).toMatchObject({ enabled: false, subject: 'user-vikram' });
    expect(platform.ctx.pii.decrypt(user.email_encrypted)).toBe('vikram@hub.example.org');

    const again = await api().post('/v1/aggregator-registrations/create').set('authorization', `Bearer ${userToken}`).send(aggregatorBody());
    expect(again.status).toBe(409);
    expectShapeC(again.body, 'Conflict', 'already_registered');
    const notYet = await api().post('/v1/aggregator-registrations/token').set('authorization', `Bearer ${userToken}`);
    expect(notYet.status).toBe(403);
    expectShapeC(notYet.body, 'Forbidden', 'aggregator_not_approved');

    const { approve } = reviewLinks(await mailTo(ADMIN, 'Kaithal Skills Hub'));
    expect((await api().post(approve).type('form').send({})).status).toBe(200);
    expect((await platform.ctx.pool.query('SELECT a.status, o.status AS org_status FROM aggregator.aggregators a JOIN aggregator.organisations o USING (org_id) WHERE aggregator_id = $1', [aggregatorId])).rows[0])
      .toEqual({ status: 'approved', org_status: 'approved' });
    await mailTo('vikram@hub.example.org', 'approved');

    const { rows: [orgRow] } = await platform.ctx.pool.query('SELECT org_id FROM aggregator.aggregators WHERE aggregator_id = $1', [aggregatorId]);
    const item = await until('the organisation in signals', async () => (await platform.ctx.pool.query('SELECT * FROM signals.items WHERE item_id = $1', [orgRow.org_id])).rows[0]);
    expect(item).toMatchObject({ item_domain: 'organisation', item_type: 'organisation' });
    expect(item.item_state).toEqual({ name: 'Kaithal Skills Hub', slug: 'kaithal-skills-hub', aggregator_types: ['seeker'], url: 'https://hub.example.org', addresses: [{ addressLocality: 'Kaithal', addressRegion: 'Haryana' }] });
    expect(JSON.stringify(item.item_state)).not.toContain('Vikram');

    const login = await api().post('/v1/aggregator-registrations/token').set('authorization', `Bearer ${userToken}`);
    expect(login.status).toBe(200);
    const token = login.body.access_token;
    const me = await api().get('/v1/me').set('authorization', `Bearer ${token}`);
    expect(me.body).toMatchObject({ aggregator_id: aggregatorId, org_slug: 'kaithal-skills-hub', aggregator_type: ['seeker'] });
    // An aggregator's token cannot register another aggregator.
    const asAggregator = await api().post('/v1/aggregator-registrations/create').set('authorization', `Bearer ${token}`).send(aggregatorBody());
    expect(asAggregator.status).toBe(409);
    expectShapeC(asAggregator.body, 'Conflict', 'already_aggregator');
    // Nor is it the person's login: the token handed out (same issuer and subject) buys no fresh one.
    const traded = await api().post('/v1/aggregator-registrations/token').set('authorization', `Bearer ${token}`);
    expect(traded.status).toBe(403);
    expectShapeC(traded.body, 'Forbidden', 'person_token_required');
    expect(traded.body.access_token).toBeUndefined();

    const { body: link } = await api().post('/v1/links/create').set('authorization', `Bearer ${token}`).send({ domain: 'seeker' });
    const live = await api().post(`/v1/links/${link.link_id}/activate`).set('authorization', `Bearer ${token}`);
    const publicPath = new URL(live.body.public_url).pathname;
    expect(publicPath).toBe(`/r/kaithal-skills-hub/${link.slug}`);
    const registered = await api().post(`/public/v1/aggregators/kaithal-skills-hub/registrations/${link.slug}`)
      .send({ name: 'Sunita', phone: '9812000002', skills: ['tailoring'], district: 'Kaithal', state: 'Haryana' });
    expect(registered.status).toBe(201);
  });

  it('is approved by `ldp aggregator approve ID`', async () => {
    const userToken = await platform.ctx.tokens.issueUser('user-cli', 3600);
    const res = await api().post('/v1/aggregator-registrations/create').set('authorization', `Bearer ${userToken}`)
      .send(aggregatorBody({ name: 'Ambala Care Network', type: 'provider', contact: { name: 'Ritu', phone: '9812000003', email: 'ritu@care.example.org' } }));
    expect(res.status).toBe(201);
    const env = { DATA_DIR: platform.dataDir, DATABASE_URL: platform.databaseUrl, LOG_LEVEL: 'silent' };
    const cli = await runLdp(['aggregator', 'approve', res.body.aggregator_id], env);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout)).toEqual({ aggregator_id: res.body.aggregator_id, status: 'approved' });
    expect((await platform.ctx.pool.query('SELECT status FROM aggregator.aggregators WHERE aggregator_id = $1', [res.body.aggregator_id])).rows[0].status).toBe('approved');
    const twice = await runLdp(['aggregator', 'approve', res.body.aggregator_id], env);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain('is approved, not pending');
    // Its review link now finds it decided.
    const { approve } = reviewLinks(await mailTo(ADMIN, 'Ambala Care Network'));
    expect((await api().post(approve).type('form').send({})).status).toBe(409);
  });

  it('answers 401 without a valid token, 400 naming fields, 404 for an unknown org_id, 422 for invites', async () => {
    const noToken = await api().post('/v1/aggregator-registrations/create').send(aggregatorBody());
    expect(noToken.status).toBe(401);
    expectShapeC(noToken.body, 'Unauthorized', 'missing_token');
    const badToken = await api().post('/v1/aggregator-registrations/create').set('authorization', 'Bearer abc.def.ghi').send(aggregatorBody());
    expect(badToken.status).toBe(401);
    const userToken = await platform.ctx.tokens.issueUser('user-bad', 3600);
    const auth = { authorization: `Bearer ${userToken}` };
    const bad = await api().post('/v1/aggregator-registrations/create').set(auth)
      .send(aggregatorBody({ type: 'pets', contact: { name: 'X', phone: '12' }, extra: 1 }));
    expect(bad.status).toBe(400);
    expectShapeC(bad.body, 'Bad Request');
    expect(Object.keys(bad.body.error.fields).sort()).toEqual(['contact.email', 'extra', 'type']);
    const badPhone = await api().post('/v1/aggregator-registrations/create').set(auth)
      .send(aggregatorBody({ contact: { name: 'X', phone: '12', email: 'x@y.org' }, consent: { value: true, given_at: new Date().toISOString(), valid_till: new Date(Date.now() - 1000).toISOString() } }));
    expect(badPhone.status).toBe(400);
    expect(Object.keys(badPhone.body.error.fields).sort()).toEqual(['consent.valid_till', 'contact.phone']);
    const unknownOrg = await api().post('/v1/aggregator-registrations/create').set(auth).send(aggregatorBody({ org_id: '00000000-0000-4000-8000-000000000000' }));
    expect(unknownOrg.status).toBe(404);
    expectShapeC(unknownOrg.body, 'Not Found', 'org_not_found');
    const invite = await api().post('/v1/aggregator-registrations/create').set(auth).send(aggregatorBody({ invite: 'abc' }));
    expect(invite.status).toBe(422);
    const { rows } = await platform.ctx.pool.query(`SELECT 1 FROM aggregator.users WHERE subject = 'user-bad'`);
    expect(rows).toHaveLength(0);
  });
});
