/**
 * A minor's contacts (issue 29 follow-up; docs/decisions.md, "Trust II", "A minor's contacts"):
 * they are revealed only with a code from that minor's guardian given for this very action — at
 * perform when the minor is the source, at the move into `accepted` when the minor is the target
 * (by their own token or by their onboarding aggregator). Guardian codes go out through the real
 * worker to the outbox; each refusal is asserted by status, code and an unchanged action.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { itemPerson } from '../../lib/clients/signals-client.ts';
import { codeOf, readOutbox, waitForMessage } from '../helpers/messages.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
const base = () => platform.url('signals');

const PROVIDER_PERSON = { name: 'Sunrise Tailoring desk', email: 'desk@sunrise-tailoring.example' };

type Item = { item_network: string; item_domain: string; item_type: string; item_id: string; item_state: Record<string, unknown> };
const seeker = (state: Record<string, unknown> = {}): Item => ({
  item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', item_id: randomUUID(),
  item_state: { skills: ['tailoring'], district: 'Kaithal', state: 'Haryana', ...state },
});
const provider = (): Item => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name: 'Sunrise Tailoring', category: 'Education', district: 'Kaithal', state: 'Haryana', latitude: 29.8, longitude: 76.4 },
});
const ref = (i: Item) => ({ item_network: i.item_network, item_domain: i.item_domain, item_type: i.item_type, item_id: i.item_id });
const action = (type: 'invite' | 'apply', source: Item, target: Item, over: Record<string, unknown> = {}) => ({
  action_type: type, source_item: ref(source), target_item: { ...ref(target), item_instance_url: 'http://aggregator.example/participants' },
  consent: { acknowledged: true, version: 1 }, requirements_snapshot: type === 'invite' ? { role: 'Tailor' } : { message: 'I can stitch' }, ...over,
});

/** Stores (or updates) `item` as onboarded by `by`, linked to `person`; returns the user id. */
async function onboard(item: Item, person: Record<string, string>, by: TestAggregator): Promise<string> {
  const res = await request(base()).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key)
    .send({ ...item, created_by: `aggregator:${by.aggregatorId}`, person: itemPerson(platform.ctx.pii, person) });
  expect([200, 201], res.text).toContain(res.status);
  return res.body.user_id as string;
}

/** A minor registered by a guardian (`pending_guardian` until the guardian's first code); the signup code is read, so later codes are the action's. */
async function minorWithGuardian(minorEmail: string, guardianEmail: string): Promise<void> {
  const res = await request(base()).post('/api/v1/consent/u18/signup/guardian').set('x-api-key', key).send({
    network: 'local-discovery', domain: 'seeker', email: minorEmail, age: 15,
    guardianName: 'Lata Devi', guardianEmail, guardianDeclarationAccepted: true,
  });
  expect(res.status, res.text).toBe(201);
  await waitForMessage(() => readOutbox(platform.dataDir), guardianEmail, 0);
}
/** The `n`-th (0-based) code the guardian at `email` received. */
const nthCode = async (email: string, n: number) => codeOf(await waitForMessage(() => readOutbox(platform.dataDir), email, n));
const wrongFor = (code: string) => (code === '000000' ? '111111' : '000000');

type Headers = Record<string, string>;
const perform = (body: object, headers: Headers) => request(base()).post('/api/v1/action/perform').set('x-api-key', key).set(headers).send(body);
const move = (id: string, body: Record<string, unknown>, headers: Headers) =>
  request(base()).post(`/api/v1/action/${id}/status`).set('x-api-key', key).set(headers).send(body);
const read = (id: string, headers: Headers) => request(base()).get(`/api/v1/action/${id}`).set('x-api-key', key).set(headers);
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const refused = (res: request.Response, status: number, code: string) => {
  expect(res.status, res.text).toBe(status);
  expect(res.body).toEqual(expect.objectContaining({ error: code, message: expect.any(String) }));
};
const stateOf = async (id: string) =>
  (await platform.ctx.pool.query('SELECT action_status, update_count, guardian_code_user_ids::text[] AS guardian FROM signals.actions WHERE action_id = $1', [id])).rows[0];

let sourceAgg: TestAggregator; let targetAgg: TestAggregator;
let providerUser: string; let asProvider: Headers;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true });
  key = await platform.apiKey('signals');
  [sourceAgg, targetAgg] = [await platform.aggregator(), await platform.aggregator()];
  providerUser = await onboard(provider(), PROVIDER_PERSON, sourceAgg);
  asProvider = bearer(await platform.ctx.tokens.issueUser(providerUser, 600));
});
afterAll(() => platform.stop());

/** An invite from a fresh provider item of the provider's person to `target`, performed by the provider; its id. */
async function inviteTo(target: Item): Promise<string> {
  const source = provider();
  await onboard(source, PROVIDER_PERSON, sourceAgg);
  const res = await perform(action('invite', source, target), asProvider);
  expect(res.status, res.text).toBe(201);
  return res.body.results[0].action_id as string;
}

describe('a minor target accepts only with their guardian\'s code', () => {
  it('by their own token or their onboarding aggregator: without the code one is sent to the guardian and nothing moves; with it, the contacts', async () => {
    await minorWithGuardian('kiran@example.in', 'lata@example.in');
    const target = seeker();
    const kiran = await onboard(target, { name: 'Kiran', email: 'kiran@example.in' }, targetAgg);
    const asKiran = bearer(await platform.ctx.tokens.issueUser(kiran, 600));
    const id = await inviteTo(target);

    // Without a code: refused, a code goes to the guardian, the action has not moved.
    refused(await move(id, { action_status: 'accepted', update_count: 0 }, asKiran), 403, 'GUARDIAN_OTP_REQUIRED');
    await nthCode('lata@example.in', 1);
    refused(await move(id, { action_status: 'accepted', update_count: 0 }, bearer(targetAgg.token)), 403, 'GUARDIAN_OTP_REQUIRED');
    const code = await nthCode('lata@example.in', 2);
    expect(await stateOf(id)).toEqual({ action_status: 'created', update_count: 0, guardian: [] });
    const before = await read(id, asProvider);
    expect(before.body).toMatchObject({ pii_revealed: false, contacts: null });
    expect(before.text).not.toContain('kiran@example.in');

    // A wrong code: refused, nothing moves.
    refused(await move(id, { action_status: 'accepted', update_count: 0, guardian_otp: wrongFor(code) }, asKiran), 403, 'GUARDIAN_OTP_INVALID');
    expect((await stateOf(id)).action_status).toBe('created');

    // The guardian's code, given to the onboarding aggregator: accepted, both sides' contacts.
    const accepted = await move(id, { action_status: 'accepted', update_count: 0, guardian_otp: code }, bearer(targetAgg.token));
    expect(accepted.status, accepted.text).toBe(200);
    expect(accepted.body).toMatchObject({ action_status: 'accepted', pii_revealed: true });
    expect(accepted.body.contacts.target).toMatchObject({ user_id: kiran, email: 'kiran@example.in' });
    expect(await stateOf(id)).toEqual({ action_status: 'accepted', update_count: 1, guardian: [kiran] });
    const seen = await read(id, asProvider);
    expect(seen.body.contacts).toMatchObject({ source: { user_id: providerUser }, target: { user_id: kiran, email: 'kiran@example.in' } });

    // A code is good for one action: the used one does not accept another invite.
    const other = await inviteTo(target);
    refused(await move(other, { action_status: 'accepted', update_count: 0, guardian_otp: code }, asKiran), 403, 'GUARDIAN_OTP_EXPIRED');
    expect(await stateOf(other)).toEqual({ action_status: 'created', update_count: 0, guardian: [] });
  });

  it('a minor without a guardian cannot accept (GUARDIAN_CONSENT_REQUIRED); rejecting needs no code', async () => {
    const target = seeker({ age: 16 });
    const teen = await onboard(target, { name: 'Teen', phone: '+919876500021' }, targetAgg);
    const id = await inviteTo(target);
    refused(await move(id, { action_status: 'accepted', update_count: 0 }, bearer(targetAgg.token)), 403, 'GUARDIAN_CONSENT_REQUIRED');
    const asTeen = bearer(await platform.ctx.tokens.issueUser(teen, 600));
    refused(await move(id, { action_status: 'accepted', update_count: 0, guardian_otp: '123456' }, asTeen), 403, 'GUARDIAN_CONSENT_REQUIRED');
    expect(await stateOf(id)).toEqual({ action_status: 'created', update_count: 0, guardian: [] });
    // Saying no reveals nothing: no code asked.
    const rejected = await move(id, { action_status: 'rejected', update_count: 0 }, asTeen);
    expect(rejected.status, rejected.text).toBe(200);
    expect(rejected.body).toMatchObject({ pii_revealed: false, contacts: null });
  });

  it('locks the guardian\'s codes after 5 wrong tries at the move, as at perform (429 with Retry-After)', async () => {
    await minorWithGuardian('ravi@example.in', 'ram@example.in');
    const target = seeker();
    const ravi = await onboard(target, { name: 'Ravi', email: 'ravi@example.in' }, targetAgg);
    const asRavi = bearer(await platform.ctx.tokens.issueUser(ravi, 600));
    const id = await inviteTo(target);
    refused(await move(id, { action_status: 'accepted', update_count: 0 }, asRavi), 403, 'GUARDIAN_OTP_REQUIRED');
    const code = await nthCode('ram@example.in', 1);
    for (let i = 0; i < 5; i++) refused(await move(id, { action_status: 'accepted', update_count: 0, guardian_otp: wrongFor(code) }, asRavi), 403, 'GUARDIAN_OTP_INVALID');
    const locked = await move(id, { action_status: 'accepted', update_count: 0, guardian_otp: code }, asRavi);
    refused(locked, 429, 'GUARDIAN_OTP_TOO_MANY_TRIES');
    expect(Number(locked.headers['retry-after'])).toBeGreaterThan(0);
    expect(await stateOf(id)).toEqual({ action_status: 'created', update_count: 0, guardian: [] });
  });
});

describe('a minor source: the guardian\'s code given at perform is the one for the reveal', () => {
  it('an adult target accepts with no further code and sees the minor\'s contacts', async () => {
    await minorWithGuardian('meera@example.in', 'geeta@example.in');
    const source = seeker();
    const meera = await onboard(source, { name: 'Meera', email: 'meera@example.in' }, targetAgg);
    const target = provider();
    await onboard(target, PROVIDER_PERSON, sourceAgg);
    const asMeera = bearer(await platform.ctx.tokens.issueUser(meera, 600));
    refused(await perform(action('apply', source, target), asMeera), 403, 'GUARDIAN_OTP_REQUIRED');
    const performed = await perform(action('apply', source, target, { guardian_otp: await nthCode('geeta@example.in', 1) }), asMeera);
    expect(performed.status, performed.text).toBe(201);
    const id = performed.body.results[0].action_id as string;
    expect((await stateOf(id)).guardian).toEqual([meera]);
    const accepted = await move(id, { action_status: 'accepted', update_count: 0 }, asProvider);
    expect(accepted.status, accepted.text).toBe(200);
    expect(accepted.body.contacts).toMatchObject({ source: { user_id: meera, email: 'meera@example.in' }, target: { user_id: providerUser } });
  });

  it('a minor linked to an item after its action was performed is never revealed by it (no code of their guardian for it)', async () => {
    await minorWithGuardian('anu@example.in', 'sita@example.in');
    // An adult's seeker item applies; then the aggregator's update links the item to a minor.
    const source = seeker();
    await onboard(source, { name: 'Adult Applicant', phone: '+919876500031' }, targetAgg);
    const target = provider();
    await onboard(target, PROVIDER_PERSON, sourceAgg);
    const performed = await perform(action('apply', source, target), bearer(targetAgg.token));
    expect(performed.status, performed.text).toBe(201);
    const id = performed.body.results[0].action_id as string;
    const anu = await onboard(source, { name: 'Anu', email: 'anu@example.in' }, targetAgg);
    expect((await platform.ctx.pool.query('SELECT user_id FROM signals.items WHERE item_id = $1', [source.item_id])).rows[0].user_id).toBe(anu);

    const accepted = await move(id, { action_status: 'accepted', update_count: 0 }, asProvider);
    expect(accepted.status, accepted.text).toBe(200);
    expect(accepted.body).toMatchObject({ pii_revealed: true, contacts: { source: null, target: { user_id: providerUser } } });
    for (const viewer of [asProvider, bearer(targetAgg.token), bearer(sourceAgg.token)]) {
      const seen = await read(id, viewer);
      expect(seen.text).not.toContain('anu@example.in');
    }
  });
});
