/**
 * The actor policy of actions (issue 29, finding 2; docs/decisions.md, "The actor policy
 * (actions)"), as one matrix: each actor × each route of an `invite` (provider → seeker) against a
 * fresh pair of items, asserting the status, the error code, whether contacts are shown, and that a
 * refusal changed nothing. Then the finding's three calls with the API key alone.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { itemPerson } from '../../lib/clients/signals-client.ts';
import { createSession, SESSION_COOKIE } from '../../lib/signals/sessions.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
const base = () => platform.url('signals');

const PROVIDER_PERSON = { name: 'Sunrise Tailoring desk', email: 'desk@sunrise-tailoring.example' };
const SEEKER_PERSON = { name: 'Meena Kumari', phone: '+919876500001', email: 'meena.kumari@example.in' };
const THIRD_PERSON = { name: 'Third Person', phone: '+919876500002' };

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
const invite = (source: Item, target: Item, over: Record<string, unknown> = {}) => ({
  action_type: 'invite', source_item: ref(source), target_item: { ...ref(target), item_instance_url: 'http://aggregator.example/participants' },
  consent: { acknowledged: true, version: 1 }, requirements_snapshot: { role: 'Tailor' }, ...over,
});

/** Stores `item` as onboarded by `by`, linked to `person` (if any); returns the user id. */
async function onboard(item: Item, person: Record<string, string> | null, by: TestAggregator): Promise<string> {
  const res = await request(base()).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key)
    .send({ ...item, created_by: `aggregator:${by.aggregatorId}`, ...(person ? { person: itemPerson(platform.ctx.pii, person) } : {}) });
  expect(res.status, res.text).toBe(201);
  return res.body.user_id as string;
}

type Headers = Record<string, string>;
const perform = (body: object, headers: Headers) => request(base()).post('/api/v1/action/perform').set('x-api-key', key).set(headers).send(body);
const move = (id: string, action_status: string, update_count: number, headers: Headers) =>
  request(base()).post(`/api/v1/action/${id}/status`).set('x-api-key', key).set(headers).send({ action_status, update_count });
const read = (id: string, headers: Headers) => request(base()).get(`/api/v1/action/${id}`).set('x-api-key', key).set(headers);
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

const ACTORS = ['API key alone', '+ source user token', '+ source user session', '+ target user token', '+ third user token',
  '+ source onboarding aggregator', '+ target onboarding aggregator', '+ another aggregator'] as const;
type ActorName = typeof ACTORS[number];
const ROUTES = ['perform', 'accept (reveals)', 'reject', 'complete', 'cancel', 'read before reveal', 'read after reveal'] as const;
type Route = typeof ROUTES[number];

/**
 * The policy (docs/decisions.md): `201`/`200` with `contacts` shown or not, or `403 <code>`.
 * Columns in the order of ROUTES.
 */
const NO_KEY = '403 person_token_required';
const POLICY: Record<ActorName, string[]> = {
  'API key alone': [NO_KEY, NO_KEY, NO_KEY, NO_KEY, NO_KEY, '200 no contacts', '200 no contacts'],
  '+ source user token': ['201', '403 target_side_only', '200 no contacts', '200 contacts', '200 no contacts', '200 no contacts', '200 contacts'],
  '+ source user session': ['201', '403 target_side_only', '200 no contacts', '200 contacts', '200 no contacts', '200 no contacts', '200 contacts'],
  '+ target user token': ['403 source_not_owned', '200 contacts', '200 no contacts', '200 contacts', '403 cancel_not_allowed', '200 no contacts', '200 contacts'],
  '+ third user token': ['403 source_not_owned', '403 not_a_party', '403 not_a_party', '403 not_a_party', '403 not_a_party', '200 no contacts', '200 no contacts'],
  '+ source onboarding aggregator': ['201', '403 target_side_only', '200 no contacts', '200 contacts', '200 no contacts', '200 no contacts', '200 contacts'],
  '+ target onboarding aggregator': ['403 source_not_owned', '200 contacts', '200 no contacts', '200 contacts', '403 cancel_not_allowed', '200 no contacts', '200 contacts'],
  '+ another aggregator': ['403 source_not_owned', '403 not_a_party', '403 not_a_party', '403 not_a_party', '403 not_a_party', '200 no contacts', '200 no contacts'],
};

let sourceAgg: TestAggregator; let targetAgg: TestAggregator; let otherAgg: TestAggregator;
let providerUser: string; let seekerUser: string; let thirdUser: string;
const headersOf = {} as Record<ActorName, Headers>;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'] });
  key = await platform.apiKey('signals');
  [sourceAgg, targetAgg, otherAgg] = [await platform.aggregator(), await platform.aggregator(), await platform.aggregator()];
  providerUser = await onboard(provider(), PROVIDER_PERSON, sourceAgg);
  seekerUser = await onboard(seeker(), SEEKER_PERSON, targetAgg);
  thirdUser = await onboard(seeker(), THIRD_PERSON, otherAgg);
  const { token: session } = await createSession(platform.ctx.pool, providerUser, 'test', 600);
  Object.assign(headersOf, {
    'API key alone': {},
    '+ source user token': bearer(await platform.ctx.tokens.issueUser(providerUser, 600)),
    '+ source user session': { cookie: `${SESSION_COOKIE}=${session}` },
    '+ target user token': bearer(await platform.ctx.tokens.issueUser(seekerUser, 600)),
    '+ third user token': bearer(await platform.ctx.tokens.issueUser(thirdUser, 600)),
    '+ source onboarding aggregator': bearer(sourceAgg.token),
    '+ target onboarding aggregator': bearer(targetAgg.token),
    '+ another aggregator': bearer(otherAgg.token),
  });
});
afterAll(() => platform.stop());

/** A fresh provider (the source, onboarded by sourceAgg) and seeker (the target, by targetAgg), linked to the same two people. */
async function freshPair() {
  const source = provider();
  const target = seeker();
  expect(await onboard(source, PROVIDER_PERSON, sourceAgg)).toBe(providerUser);
  expect(await onboard(target, SEEKER_PERSON, targetAgg)).toBe(seekerUser);
  return { source, target };
}

/** An invite performed by the source user and, when `accepted`, accepted by the target user. */
async function setUp(accepted: boolean) {
  const pair = await freshPair();
  const created = await perform(invite(pair.source, pair.target), headersOf['+ source user token']);
  expect(created.status).toBe(201);
  const id = created.body.results[0].action_id as string;
  if (accepted) expect((await move(id, 'accepted', 0, headersOf['+ target user token'])).status).toBe(200);
  return { ...pair, id };
}

const stateOf = async (id: string) =>
  (await platform.ctx.pool.query('SELECT action_status, update_count FROM signals.actions WHERE action_id = $1', [id])).rows[0];

/** The outcome of a response as POLICY writes it; checks that shown contacts are the right ones and hidden ones appear nowhere. */
function outcomeOf(res: request.Response): string {
  if (res.status >= 400) {
    expect(res.body).toEqual(expect.objectContaining({ error: expect.any(String), message: expect.any(String) }));
    return `${res.status} ${res.body.error}`;
  }
  if (res.status === 201) return '201';
  if (res.body.contacts === null) {
    for (const secret of [SEEKER_PERSON.name, SEEKER_PERSON.phone, SEEKER_PERSON.email, PROVIDER_PERSON.email]) expect(res.text).not.toContain(secret);
    return `${res.status} no contacts`;
  }
  expect(res.body.contacts).toEqual({
    source: { user_id: providerUser, name: PROVIDER_PERSON.name, phone: null, email: PROVIDER_PERSON.email },
    target: { user_id: seekerUser, ...SEEKER_PERSON },
  });
  return `${res.status} contacts`;
}

const CASES = ACTORS.flatMap((actor) => ROUTES.map((route, i) => [actor, route, POLICY[actor][i]] as [ActorName, Route, string]));

describe('the actor policy of actions', () => {
  it.each(CASES)('%s: %s → %s', async (actor, route, expected) => {
    const headers = headersOf[actor];
    let res: request.Response;
    let before: { action_status: string; update_count: number } | undefined;
    let id: string | undefined;
    if (route === 'perform') {
      const { source, target } = await freshPair();
      res = await perform(invite(source, target), headers);
      const { rows } = await platform.ctx.pool.query('SELECT actor FROM signals.actions WHERE source_item_id = $1', [source.item_id]);
      expect(rows.length).toBe(res.status === 201 ? 1 : 0);
    } else {
      const revealed = route === 'complete' || route === 'read after reveal';
      ({ id } = await setUp(revealed));
      before = await stateOf(id);
      if (route === 'read before reveal' || route === 'read after reveal') res = await read(id, headers);
      else {
        const status = { 'accept (reveals)': 'accepted', reject: 'rejected', complete: 'completed', cancel: 'cancelled' }[route];
        res = await move(id, status, before!.update_count, headers);
        if (res.status === 200) expect(res.body.action_status).toBe(status);
      }
    }
    expect(outcomeOf(res)).toBe(expected);
    // A refusal writes nothing.
    if (id && res.status >= 400) expect(await stateOf(id)).toEqual(before);
  });

  it('refuses finding 2\'s three calls with the API key alone, for an adult and a minor: no contact is ever shown', async () => {
    for (const person of [{ ...SEEKER_PERSON, phone: '+919876500011', email: 'adult@example.in' }, { name: 'Kiran', phone: '+919876500012' }]) {
      const { source } = await freshPair();
      const target = seeker(person.name === 'Kiran' ? { age: 15 } : {});
      await onboard(target, person, targetAgg);
      // 1. An invite from a live provider to the seeker, consent acknowledged, with only x-api-key.
      const performed = await perform(invite(source, target), {});
      expect(outcomeOf(performed)).toBe(NO_KEY);
      expect((await platform.ctx.pool.query('SELECT 1 FROM signals.actions WHERE target_item_id = $1', [target.item_id])).rowCount).toBe(0);
      // Nor by naming a person to act as.
      const actingAs = await perform(invite(source, target, { acting_as_user_id: providerUser }), {});
      expect(outcomeOf(actingAs)).toBe(NO_KEY);
      // 2. and 3. on an invite its source did perform: the API key alone cannot accept it, nor read contacts.
      const created = await perform(invite(source, target), headersOf['+ source user token']);
      const id = created.body.results[0].action_id as string;
      expect(outcomeOf(await move(id, 'accepted', 0, {}))).toBe(NO_KEY);
      expect(await stateOf(id)).toEqual({ action_status: 'created', update_count: 0 });
      const view = await read(id, {});
      expect(view.body).toMatchObject({ action_status: 'created', pii_revealed: false, contacts: null });
      for (const value of Object.values(person)) expect(view.text).not.toContain(value);
    }
  });

  it('never lets the API key alone act as a person, nor an aggregator for a person it did not onboard', async () => {
    const { source, target } = await freshPair();
    // The source user's own token may name themselves; the API key alone may not name anyone.
    expect(outcomeOf(await perform(invite(source, target, { acting_as_user_id: providerUser }), {}))).toBe(NO_KEY);
    // The organisation as the aggregator service pushes it: an item whose id is the org id.
    await onboard({ ...provider(), item_id: otherAgg.orgId }, null, otherAgg);
    const asOther = { ...bearer(otherAgg.token), 'x-acting-org-id': otherAgg.orgId };
    expect(outcomeOf(await perform(invite(source, target, { acting_as_user_id: providerUser }), asOther))).toBe('403 user_not_onboarded_by_aggregator');
    expect(outcomeOf(await perform(invite(source, target, { acting_as_user_id: providerUser }), headersOf['+ source user token']))).toBe('201');
  });
});
