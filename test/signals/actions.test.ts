/**
 * POST /api/v1/action/perform and /api/v1/action/{id}/status (shape A), with items linked to
 * people through the item upsert's `person`, a minor's guardian code sent by the real worker to
 * the outbox, and every refusal asserted by status, shape and code.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFile } from 'node:fs/promises';
import { itemPerson } from '../../lib/clients/signals-client.ts';
import { NETWORKS_DIR, parseNetwork } from '../../lib/network/config.ts';
import { ActionError, performAction } from '../../lib/signals/actions.ts';
import { codeOf, readOutbox, waitForMessage } from '../helpers/messages.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
let agg: TestAggregator;
const base = () => platform.url('signals');
const INSTANCE = 'http://aggregator.example/participants';

const seeker = (id: string = randomUUID(), state: Record<string, unknown> = { skills: ['electrician'], district: 'Kaithal', state: 'Haryana' }) => ({
  item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', item_id: id, item_state: state,
});
const provider = (id: string = randomUUID()) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: id,
  item_state: { name: 'ITI Kaithal', category: 'Education', district: 'Kaithal', state: 'Haryana', latitude: 29.8, longitude: 76.4 },
});
type Item = ReturnType<typeof seeker> | ReturnType<typeof provider>;
const ref = (i: Item) => ({ item_network: i.item_network, item_domain: i.item_domain, item_type: i.item_type, item_id: i.item_id });

/** Stores `item` as onboarded by `agg`, linked to the person of `identity`; returns the user id. */
async function onboard(item: Item, identity: { name?: string; phone?: string; email?: string } | null, by = agg) {
  const res = await request(base()).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key)
    .send({ ...item, created_by: `aggregator:${by.aggregatorId}`, ...(identity ? { person: itemPerson(platform.ctx.pii, identity) } : {}) });
  expect(res.status).toBe(201);
  return res.body.user_id as string | undefined;
}

/** Performs with `headers`; by default as the aggregator that onboarded every item here (a source-side credential). */
const perform = (body: Record<string, unknown>, headers: Record<string, string> = { authorization: `Bearer ${agg.token}` }) =>
  request(base()).post('/api/v1/action/perform').set('x-api-key', key).set(headers).send(body);
const apply = (source: Item, target: Item, over: Record<string, unknown> = {}) => ({
  action_type: 'apply', source_item: ref(source), target_item: { ...ref(target), item_instance_url: INSTANCE },
  consent: { acknowledged: true, version: 1 }, requirements_snapshot: { message: 'I have 3 years of wiring experience' }, ...over,
});
const refused = (res: request.Response, status: number, code: string) => {
  expect(res.status).toBe(status);
  expect(res.body).toMatchObject({ error: code, message: expect.any(String) });
  if (res.body.results) expect(res.body).toMatchObject({ results: [{ index: 0, status: 'failed', error: code }], summary: { total: 1, succeeded: 0, failed: 1 } });
};
const move = (id: string, body: Record<string, unknown>, headers: Record<string, string>) =>
  request(base()).post(`/api/v1/action/${id}/status`).set('x-api-key', key).set(headers).send(body);

let asha: Item; let ashaUser: string;
let iti: Item; let itiUser: string;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true });
  key = await platform.apiKey('signals');
  agg = await platform.aggregator();
  asha = seeker();
  ashaUser = (await onboard(asha, { name: 'Asha Rani', phone: '+919812345678' }))!;
  iti = provider();
  itiUser = (await onboard(iti, { name: 'ITI Kaithal desk', email: 'desk@iti-kaithal.example' }))!;
});
afterAll(() => platform.stop());

describe('items linked to people', () => {
  it('links an item to the user found by blind index, or creates one, and never takes plaintext', async () => {
    const again = seeker();
    const res = await request(base()).put(`/api/v1/items/${again.item_id}`).set('x-api-key', key)
      .send({ ...again, person: itemPerson(platform.ctx.pii, { name: 'Asha R.', phone: '+919812345678', email: 'asha@example.in' }) });
    expect(res.body).toMatchObject({ outcome: 'created', user_id: ashaUser, user_created: false });
    const batch = await request(base()).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [
      { ...seeker(), person: { name_encrypted: 'Asha', phone_encrypted: '+919812345678', phone_index: 'ab'.repeat(32) } },
      { ...seeker(), person: { ...itemPerson(platform.ctx.pii, { phone: '+919800000000' }), phone_index: 'ab'.repeat(32) } },
      { ...seeker(), person: { name_encrypted: platform.ctx.pii.encrypt('Nobody') } },
      { ...seeker(), person: itemPerson(platform.ctx.pii, { email: 'new.person@example.in' }) },
    ] });
    expect(batch.status).toBe(200);
    expect(batch.body.results.map((r: { outcome: string }) => r.outcome)).toEqual(['invalid', 'invalid', 'invalid', 'created']);
    expect(batch.body.results[0].message).toMatch(/phone_encrypted: not a value encrypted/);
    expect(batch.body.results[1].message).toMatch(/phone_index: not the blind index/);
    expect(batch.body.results[2].message).toMatch(/phone_index or email_index is required/);
    expect(batch.body.results[3]).toMatchObject({ user_created: true, user_id: expect.any(String) });
    const { rows } = await platform.ctx.pool.query('SELECT count(*)::int AS n FROM signals.users');
    expect(rows[0].n).toBe(3);

    // Two items of one batch naming the same new person share one new user.
    const twins = await request(base()).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [
      { ...seeker(), person: itemPerson(platform.ctx.pii, { name: 'Twin', phone: '+919811111111' }) },
      { ...seeker(), person: itemPerson(platform.ctx.pii, { phone: '+919811111111', email: 'twin@example.in' }) },
    ] });
    expect(twins.body.results[0].user_id).toBe(twins.body.results[1].user_id);
    const { rows: [twin] } = await platform.ctx.pool.query('SELECT name_encrypted, created_by FROM signals.users WHERE user_id = $1', [twins.body.results[0].user_id]);
    expect(platform.ctx.pii.decrypt(twin.name_encrypted)).toBe('Twin');
    expect((await platform.ctx.pool.query('SELECT count(*)::int AS n FROM signals.users')).rows[0].n).toBe(4);
  });
});

describe('action/perform', () => {
  let actionId: string;

  it('records an apply action from a seeker to an onboarded provider with consent', async () => {
    const res = await perform(apply(asha, iti));
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      results: [{ index: 0, status: 'success', action_id: expect.any(String), action_type: 'apply', action_status: 'created', update_count: 0, source_item_id: asha.item_id, target_item_id: iti.item_id }],
      summary: { total: 1, succeeded: 1, failed: 0 },
    });
    actionId = res.body.results[0].action_id;
    const view = await request(base()).get(`/api/v1/action/${actionId}`).set('x-api-key', key);
    expect(view.body).toMatchObject({ action_status: 'created', pii_revealed: false, contacts: null, events: [{ from_status: null, to_status: 'created' }] });
  });

  it('refuses a second open action for the same pair (409), also under concurrent requests', async () => {
    refused(await perform(apply(asha, iti)), 409, 'action_already_open');
    const other = provider();
    await onboard(other, null);
    const both = await Promise.all([perform(apply(asha, other)), perform(apply(asha, other))]);
    expect(both.map((r) => r.status).sort()).toEqual([201, 409]);
  });

  it.each([
    ['without consent', { consent: undefined }, 400, 'consent_required'],
    ['with consent not acknowledged', { consent: { acknowledged: false, version: 1 } }, 400, 'consent_required'],
    ['with requirements outside the schema', { requirements_snapshot: { salary: 10 } }, 400, 'invalid_requirements'],
    ['for an unknown action type', { action_type: 'hire' }, 400, 'unknown_action_type'],
    ['for an action type that only relates items', { action_type: 'discover' }, 400, 'action_not_performable'],
  ])('refuses an action %s', async (_what, over, status, code) => {
    const target = provider();
    await onboard(target, null);
    refused(await perform(apply(asha, target, over)), status, code);
  });

  it('refuses a disallowed pair, a cross-network pair and a self-action', async () => {
    refused(await perform({ ...apply(iti, asha) }), 403, 'interaction_not_allowed');
    refused(await perform(apply(asha, { ...provider(), item_network: 'another-network' } as Item)), 403, 'interaction_not_allowed');
    refused(await perform(apply(asha, asha)), 400, 'self_action');
  });

  it('refuses unknown items (404) and a source that is not live (409)', async () => {
    refused(await perform(apply(asha, provider())), 404, 'item_not_found');
    refused(await perform(apply(seeker(), iti)), 404, 'item_not_found');
    refused(await perform(apply(asha, { ...iti, item_type: 'other' } as Item)), 404, 'item_not_found');
    const draft = seeker(randomUUID(), { district: 'Kaithal', state: 'Haryana' });
    await onboard(draft, null);
    refused(await perform(apply(draft, iti)), 409, 'source_not_live');
  });

  it.each([
    ['a missing target_item', { target_item: undefined }],
    ['a target without item_instance_url', { target_item: { ...ref(provider()) } }],
    ['a bad item_id', { source_item: { ...ref(seeker()), item_id: 'nope' } }],
    ['a guardian_otp of 5 characters', { guardian_otp: '12345' }],
    ['a consent version 0', { consent: { acknowledged: true, version: 0 } }],
    ['an unknown field', { extra: 1 }],
    ['an empty action_type', { action_type: '' }],
  ])('answers 400 invalid_request for %s', async (_what, over) => {
    refused(await perform({ ...apply(asha, iti), ...over }), 400, 'invalid_request');
  });

  it('answers malformed JSON with 400 and a missing key with 401 (shape A)', async () => {
    const bad = await request(base()).post('/api/v1/action/perform').set('x-api-key', key).set('content-type', 'application/json').send('{');
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ error: 'invalid_json', message: expect.any(String) });
    const nokey = await request(base()).post('/api/v1/action/perform').send(apply(asha, iti));
    expect(nokey.body).toEqual({ error: 'missing_api_key', message: expect.any(String) });
  });

  it('acts for an organisation only as its aggregator, for users it onboarded', async () => {
    const target = provider();
    await onboard(target, null);
    const body = apply(asha, target, { acting_as_user_id: ashaUser });
    refused(await perform(body, { 'x-acting-org-id': randomUUID() }), 404, 'organisation_not_found');
    refused(await perform(body, { 'x-acting-org-id': 'not-a-uuid' }), 400, 'invalid_request');
    // The organisation as the aggregator service pushes it: an item whose id is the org id.
    await onboard(provider(agg.orgId), null);
    refused(await perform(body, { 'x-acting-org-id': agg.orgId }), 403, 'not_allowed_for_organisation');
    const bearer = { authorization: `Bearer ${agg.token}`, 'x-acting-org-id': agg.orgId };
    refused(await perform(apply(asha, target), bearer), 400, 'acting_as_user_required');
    const other = await platform.aggregator();
    await onboard(provider(other.orgId), null);
    refused(await perform(body, { authorization: `Bearer ${other.token}`, 'x-acting-org-id': other.orgId }), 403, 'user_not_onboarded_by_aggregator');
    refused(await perform({ ...body, acting_as_user_id: randomUUID() }, bearer), 404, 'user_not_found');
    const ok = await perform(body, bearer);
    expect(ok.status).toBe(201);
    const { rows } = await platform.ctx.pool.query('SELECT actor, acting_org_id, acting_as_user_id FROM signals.actions WHERE action_id = $1', [ok.body.results[0].action_id]);
    expect(rows[0]).toEqual({ actor: `aggregator:${agg.aggregatorId}`, acting_org_id: agg.orgId, acting_as_user_id: ashaUser });
  });

  it('lets a signed-in user act only from their own item', async () => {
    const target = provider();
    await onboard(target, null);
    const itiToken = await platform.ctx.tokens.issueUser(itiUser, 300);
    refused(await perform(apply(asha, target), { authorization: `Bearer ${itiToken}` }), 403, 'source_not_owned');
    refused(await perform(apply(asha, target), { authorization: 'Bearer nonsense' }), 401, 'invalid_token');
    const ashaToken = await platform.ctx.tokens.issueUser(ashaUser, 300);
    expect((await perform(apply(asha, target), { authorization: `Bearer ${ashaToken}` })).status).toBe(201);
  });

  it('refuses a minor until the guardian code is given, with distinct codes for wrong and used codes', async () => {
    const signup = await request(base()).post('/api/v1/consent/u18/signup/guardian').set('x-api-key', key).send({
      network: 'local-discovery', domain: 'seeker', email: 'kiran@example.in', age: 15,
      guardianName: 'Lata Devi', guardianEmail: 'lata@example.in', guardianDeclarationAccepted: true,
    });
    expect(signup.status).toBe(201);
    const kiran = seeker();
    const kiranUser = await onboard(kiran, { email: 'kiran@example.in' });
    const { rows: [user] } = await platform.ctx.pool.query('SELECT status FROM signals.users WHERE user_id = $1', [kiranUser]);
    expect(user.status).toBe('pending_guardian');
    await waitForMessage(() => readOutbox(platform.dataDir), 'lata@example.in', 0);

    refused(await perform(apply(kiran, iti)), 403, 'GUARDIAN_OTP_REQUIRED');
    const code = codeOf(await waitForMessage(() => readOutbox(platform.dataDir), 'lata@example.in', 1));
    refused(await perform(apply(kiran, iti, { guardian_otp: code === '000000' ? '111111' : '000000' })), 403, 'GUARDIAN_OTP_INVALID');
    expect((await platform.ctx.pool.query('SELECT 1 FROM signals.actions WHERE source_item_id = $1', [kiran.item_id])).rowCount).toBe(0);

    const ok = await perform(apply(kiran, iti, { guardian_otp: code }));
    expect(ok.status).toBe(201);
    const { rows: [after] } = await platform.ctx.pool.query(
      'SELECT u.status, g.confirmed_at FROM signals.users u JOIN signals.guardians g ON g.ward_user_id = u.user_id WHERE u.user_id = $1', [kiranUser]);
    expect(after.status).toBe('active');
    expect(after.confirmed_at).not.toBeNull();

    const other = provider();
    await onboard(other, null);
    refused(await perform(apply(kiran, other, { guardian_otp: code })), 403, 'GUARDIAN_OTP_EXPIRED');
  });

  it('refuses a consent older than the network\'s current version (422)', async () => {
    const file = JSON.parse(await readFile(`${NETWORKS_DIR}/local-discovery.json`, 'utf8'));
    file.people.consent_version = 2;
    const network = parseNetwork(file);
    const target = provider();
    await onboard(target, null);
    const input = apply(asha, target) as unknown as Parameters<typeof performAction>[1];
    const err = await performAction({ pool: platform.ctx.pool, pii: platform.ctx.pii, network }, input, { kind: 'api_key', keyId: 'k' }, undefined).catch((e) => e);
    expect(err).toBeInstanceOf(ActionError);
    expect(err).toMatchObject({ status: 422, code: 'consent_outdated', message: expect.stringContaining('consent') });
  });

  it('refuses acting as another user, an aggregator without its organisation, a disabled user and a stale session cookie', async () => {
    const target = provider();
    await onboard(target, null);
    const ashaToken = await platform.ctx.tokens.issueUser(ashaUser, 300);
    refused(await perform(apply(asha, target, { acting_as_user_id: itiUser }), { authorization: `Bearer ${ashaToken}` }), 403, 'not_allowed_to_act_as');
    refused(await perform(apply(asha, target, { acting_as_user_id: ashaUser }), { authorization: `Bearer ${agg.token}` }), 400, 'acting_org_required');
    refused(await perform(apply(asha, target), { cookie: 'ldp_session=expired-or-unknown' }), 401, 'invalid_session');
    const gone = seeker();
    const goneUser = await onboard(gone, { phone: '+919800011111' });
    await platform.ctx.pool.query(`UPDATE signals.users SET status = 'disabled' WHERE user_id = $1`, [goneUser]);
    refused(await perform(apply(gone, target)), 403, 'user_disabled');
  });

  it('refuses a minor without a guardian record, and locks guardian codes after 5 wrong tries', async () => {
    // The user created for an onboarded participant takes the age of its item's public `age` field.
    const teen = seeker(randomUUID(), { skills: ['tailoring'], district: 'Kaithal', state: 'Haryana', age: 16 });
    const teenUser = await onboard(teen, { phone: '+919800022222' });
    expect((await platform.ctx.pool.query('SELECT age FROM signals.users WHERE user_id = $1', [teenUser])).rows[0].age).toBe(16);
    refused(await perform(apply(teen, iti)), 403, 'GUARDIAN_CONSENT_REQUIRED');

    const signup = await request(base()).post('/api/v1/consent/u18/signup/guardian').set('x-api-key', key).send({
      network: 'local-discovery', domain: 'seeker', phoneNumber: '+919800033333', age: 14,
      guardianName: 'Ram Lal', guardianPhone: '+919800044444', guardianDeclarationAccepted: true,
    });
    expect(signup.status).toBe(201);
    const young = seeker();
    await onboard(young, { phone: '+919800033333' });
    const code = codeOf(await waitForMessage(() => readOutbox(platform.dataDir), '+919800044444'));
    const wrong = code === '000000' ? '111111' : '000000';
    for (let i = 0; i < 5; i++) refused(await perform(apply(young, iti, { guardian_otp: wrong })), 403, 'GUARDIAN_OTP_INVALID');
    const locked = await perform(apply(young, iti, { guardian_otp: code }));
    refused(locked, 429, 'GUARDIAN_OTP_TOO_MANY_TRIES');
    expect(Number(locked.headers['retry-after'])).toBeGreaterThan(0);
  });

  describe('status', () => {
    it('moves along the declared statuses with optimistic concurrency and reveals contacts at accepted', async () => {
      const asTarget = { authorization: `Bearer ${await platform.ctx.tokens.issueUser(itiUser, 300)}` };
      refused(await move(actionId, { action_status: 'completed', update_count: 0 }, asTarget), 409, 'transition_not_allowed');
      refused(await move(actionId, { action_status: 'flying', update_count: 0 }, asTarget), 400, 'unknown_status');
      const accepted = await move(actionId, { action_status: 'accepted', update_count: 0, note: 'Come on Monday' }, asTarget);
      expect(accepted.status).toBe(200);
      expect(accepted.body).toMatchObject({
        action_status: 'accepted', update_count: 1, pii_revealed: true, next_statuses: ['completed'],
        contacts: {
          source: { user_id: ashaUser, name: 'Asha Rani', phone: '+919812345678' },
          target: { user_id: itiUser, email: 'desk@iti-kaithal.example' },
        },
      });
      refused(await move(actionId, { action_status: 'completed', update_count: 0 }, asTarget), 409, 'stale_update_count');
      const asSource = { authorization: `Bearer ${await platform.ctx.tokens.issueUser(ashaUser, 300)}` };
      refused(await move(actionId, { action_status: 'cancelled', update_count: 1 }, asSource), 409, 'cancel_too_late');
      const done = await move(actionId, { action_status: 'completed', update_count: 1 }, asSource);
      expect(done.body).toMatchObject({ action_status: 'completed', update_count: 2, terminal: true, next_statuses: [] });
      expect(done.body.events.map((e: { to_status: string }) => e.to_status)).toEqual(['created', 'accepted', 'completed']);
      refused(await move(actionId, { action_status: 'completed', update_count: 2 }, asSource), 409, 'action_terminal');
    });

    it('lets only the source side cancel, before any move; a cancelled pair can be acted on again', async () => {
      const target = provider();
      const targetUser = await onboard(target, { email: `owner${Math.random()}@example.in` });
      const created = await perform(apply(asha, target));
      const id = created.body.results[0].action_id;
      const targetToken = await platform.ctx.tokens.issueUser(targetUser!, 300);
      refused(await move(id, { action_status: 'cancelled', update_count: 0 }, { authorization: `Bearer ${targetToken}` }), 403, 'cancel_not_allowed');
      const strangerToken = await platform.ctx.tokens.issueUser(itiUser, 300);
      refused(await move(id, { action_status: 'rejected', update_count: 0 }, { authorization: `Bearer ${strangerToken}` }), 403, 'not_a_party');
      const cancelled = await move(id, { action_status: 'cancelled', update_count: 0 }, { authorization: `Bearer ${await platform.ctx.tokens.issueUser(ashaUser, 300)}` });
      expect(cancelled.body).toMatchObject({ action_status: 'cancelled', terminal: true, contacts: null });
      expect((await perform(apply(asha, target))).status).toBe(201);
    });

    it('answers 404 for an unknown action and 400 for a malformed body or id', async () => {
      refused(await move(randomUUID(), { action_status: 'accepted', update_count: 0 }, {}), 404, 'action_not_found');
      refused(await move('nope', { action_status: 'accepted', update_count: 0 }, {}), 400, 'invalid_request');
      refused(await move(actionId, { action_status: 'accepted' }, {}), 400, 'invalid_request');
      refused(await move(actionId, { action_status: 'accepted', update_count: -1 }, {}), 400, 'invalid_request');
      const missing = await request(base()).get(`/api/v1/action/${randomUUID()}`).set('x-api-key', key);
      expect(missing.body).toEqual({ error: 'action_not_found', message: expect.any(String) });
    });
  });
});
