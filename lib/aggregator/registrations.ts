/**
 * Aggregator registration (spec "POST /v1/aggregator-registrations/create", "Organisation and
 * aggregator registration"): a person with a non-aggregator token registers an aggregator. The body
 * is validated against the network's aggregator registration schema (version 1, Ajv); a `pending`
 * aggregator is created (in its own new pending organisation, or under an approved `org_id`) with
 * a disabled user for the token's subject; the network admin reviews it through signed links (or
 * `ldp aggregator approve`). Approval makes aggregator (and its own organisation) `approved`,
 * enables the user, and enqueues the push of the organisation to signals. A registration naming an
 * existing organisation is first reviewed by that organisation (a `join` review e-mailed to its
 * contact); only its approval sends the network admin's review (docs/decisions.md, "Trust II").
 */
import type { ErrorObject } from 'ajv';
import { parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js/max';
import type { Network } from '../network/config.ts';
import type { ItemInput } from '../network/items.ts';
import type { PiiCrypto } from '../platform/crypto.ts';
import type { PoolClient, Queryable } from '../platform/db.ts';
import { enqueue } from '../platform/jobs.ts';
import { slugify } from './aggregators.ts';
import { createIdentityGroup, requestReview, uniqueOrgSlug } from './organisations.ts';
import { DECISION_EMAIL_TASK, type ReviewIntent } from './review-links.ts';

/** Task pushing an approved aggregator's organisation to signals; payload `{aggregator_id}`. */
export const PUSH_ORGANISATION_TASK = 'aggregator-push-organisation';

export interface AggregatorRegistration {
  name: string;
  type: string;
  url?: string;
  sub_org_name?: string;
  contact: { name: string; phone: string; email: string; alternatePhone?: string; company?: string; gstNumber?: string };
  locations?: { geo: { type: string; coordinates?: unknown[]; geometries?: unknown[]; bbox?: number[] }; address?: Record<string, string> }[];
  consent: { value: true; given_at: string; valid_till: string };
  org_id?: string;
  invite?: string;
}

/** A problem with one field of a registration body (dotted path). */
export interface RegistrationProblem {
  field: string;
  message: string;
}

function ajvProblems(errors: ErrorObject[]): RegistrationProblem[] {
  return errors.map((e) => {
    const path = e.instancePath.split('/').slice(1);
    if (e.keyword === 'required') path.push((e.params as { missingProperty: string }).missingProperty);
    if (e.keyword === 'additionalProperties') path.push((e.params as { additionalProperty: string }).additionalProperty);
    const field = path.join('.') || '(body)';
    const message = e.keyword === 'enum' ? `${field} must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`
      : e.keyword === 'additionalProperties' ? `${field} is not a field of the aggregator registration`
        : `${field} ${e.message}`;
    return { field, message };
  });
}

/**
 * Validates `body` against the network's aggregator registration schema and the rules a schema
 * cannot say (consent `given_at ≤ now < valid_till`; phones valid, normalised to E.164; e-mail
 * lower-cased). Returns the normalised registration, or every problem.
 */
export function validateAggregatorRegistration(network: Network, body: unknown): { ok: true; value: AggregatorRegistration } | { ok: false; problems: RegistrationProblem[] } {
  const schema = network.aggregatorRegistration;
  if (!schema) return { ok: false, problems: [{ field: '(body)', message: `network ${network.id} declares no aggregator registration schema` }] };
  if (!schema.validate(body)) return { ok: false, problems: ajvProblems(schema.validate.errors ?? []) };
  const value = structuredClone(body) as AggregatorRegistration;
  const problems: RegistrationProblem[] = [];
  const now = Date.now();
  if (Date.parse(value.consent.given_at) > now + 60_000) problems.push({ field: 'consent.given_at', message: 'consent.given_at may not be in the future' });
  if (Date.parse(value.consent.valid_till) <= now) problems.push({ field: 'consent.valid_till', message: 'consent.valid_till must be in the future' });
  for (const key of ['phone', 'alternatePhone'] as const) {
    const raw = value.contact[key];
    if (raw === undefined) continue;
    const phone = parsePhoneNumberFromString(raw, network.defaultPhoneRegion as CountryCode);
    if (phone?.isValid()) value.contact[key] = phone.number;
    else problems.push({ field: `contact.${key}`, message: `contact.${key} is not a valid phone number (got "${raw.slice(0, 40)}")` });
  }
  value.contact.email = value.contact.email.toLowerCase();
  return problems.length ? { ok: false, problems } : { ok: true, value };
}

/**
 * Why a registration cannot be made (404 `org_not_found`, 409 the others), or approved yet
 * (`awaits_organisation`: it joins an organisation that has not approved it).
 */
export class RegistrationConflict extends Error {
  name = 'RegistrationConflict';
  constructor(readonly code: 'already_registered' | 'org_not_found' | 'org_not_approved' | 'awaits_organisation', message: string) {
    super(message);
  }
}

/**
 * Creates the pending aggregator of `registration` for the person `user` (token issuer and subject),
 * inside the caller's transaction, and enqueues the review e-mail: the network admin's, or, when it
 * joins an existing organisation, that organisation's (`awaits: 'organisation'`).
 * @throws RegistrationConflict
 */
export async function registerAggregator(client: PoolClient, pii: PiiCrypto, user: { issuer: string; subject: string }, registration: AggregatorRegistration):
Promise<{ aggregatorId: string; orgId: string; orgSlug: string; status: string; awaits: 'organisation' | 'network_admin' }> {
  await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 8))', [`${user.issuer} ${user.subject}`]);
  const { rows: [already] } = await client.query<{ aggregator_id: string; status: string }>(
    `SELECT a.aggregator_id, a.status FROM aggregator.users u JOIN aggregator.aggregators a USING (aggregator_id)
      WHERE u.issuer = $1 AND u.subject = $2`, [user.issuer, user.subject]);
  if (already) throw new RegistrationConflict('already_registered', `This identity already registered aggregator ${already.aggregator_id} (${already.status})`);
  const { contact, ...details } = registration;
  let org: { org_id: string; slug: string };
  if (registration.org_id) {
    const { rows: [found] } = await client.query<{ org_id: string; slug: string; status: string }>(
      'SELECT org_id, slug, status FROM aggregator.organisations WHERE org_id = $1', [registration.org_id]);
    if (!found) throw new RegistrationConflict('org_not_found', `No organisation ${registration.org_id}`);
    if (found.status !== 'approved') throw new RegistrationConflict('org_not_approved', `Organisation ${found.slug} is ${found.status}; aggregators join approved organisations`);
    org = found;
  } else {
    const orgName = registration.sub_org_name ?? registration.name;
    const slug = await uniqueOrgSlug(client, slugify(orgName));
    ({ rows: [org] } = await client.query<{ org_id: string; slug: string }>(
      `INSERT INTO aggregator.organisations (slug, display_name, status) VALUES ($1, $2, 'pending') RETURNING org_id, slug`, [slug, orgName]));
    await createIdentityGroup(client, org.org_id, slug);
  }
  const { rows: [agg] } = await client.query<{ aggregator_id: string }>(
    `INSERT INTO aggregator.aggregators (org_id, name, types, status, registration) VALUES ($1, $2, $3, 'pending', $4) RETURNING aggregator_id`,
    [org.org_id, registration.name, [registration.type], { ...details, contact: { company: contact.company, gstNumber: contact.gstNumber } }]);
  await client.query(
    `INSERT INTO aggregator.users (issuer, subject, org_id, aggregator_id, role, name_encrypted, email_encrypted, phone_encrypted, email_index, enabled)
     VALUES ($1, $2, $3, $4, 'aggregator_admin', $5, $6, $7, $8, false)`,
    [user.issuer, user.subject, org.org_id, agg.aggregator_id, pii.encrypt(contact.name), pii.encrypt(contact.email), pii.encrypt(contact.phone), pii.blindIndex('email', contact.email)]);
  const awaits = registration.org_id ? 'organisation' : 'network_admin';
  await requestReview(client, awaits === 'organisation' ? 'join' : 'aggregator', agg.aggregator_id);
  return { aggregatorId: agg.aggregator_id, orgId: org.org_id, orgSlug: org.slug, status: 'pending', awaits };
}

/**
 * Applies the decision of the organisation an aggregator asks to join (its `join` review), inside
 * the caller's transaction: approve → `org_approved_at` set and the network admin's review e-mail
 * enqueued (the aggregator stays pending until that decision); reject → the aggregator `rejected`
 * with `reason`, the registrant told. Returns false when the aggregator is not pending, does not
 * join an organisation, or its organisation already approved it.
 */
export async function decideJoin(client: PoolClient, aggregatorId: string, intent: ReviewIntent, reason: string | null): Promise<boolean> {
  const { rows: [agg] } = await client.query<{ aggregator_id: string }>(
    `SELECT aggregator_id FROM aggregator.aggregators
      WHERE aggregator_id::text = $1 AND status = 'pending' AND registration ? 'org_id' AND org_approved_at IS NULL FOR UPDATE`, [aggregatorId]);
  if (!agg) return false;
  if (intent === 'reject') return decideAggregator(client, aggregatorId, 'reject', reason);
  await client.query('UPDATE aggregator.aggregators SET org_approved_at = now(), updated_at = now() WHERE aggregator_id = $1', [agg.aggregator_id]);
  await requestReview(client, 'aggregator', agg.aggregator_id);
  return true;
}

/**
 * Applies a decision to a pending aggregator (inside the caller's transaction): approve → aggregator
 * `approved`, its still-pending organisation too, its users enabled, the organisation's push to
 * signals and the decision e-mail enqueued; reject → `rejected` with `reason`, e-mail enqueued.
 * Returns false when the aggregator is not pending (unknown, or decided already).
 * @throws RegistrationConflict `awaits_organisation` on approving one that joins an existing
 *   organisation which has not approved it (decideJoin).
 */
export async function decideAggregator(client: PoolClient, aggregatorId: string, intent: ReviewIntent, reason: string | null): Promise<boolean> {
  const status = intent === 'approve' ? 'approved' : 'rejected';
  if (intent === 'approve') {
    const { rows: [waiting] } = await client.query<{ slug: string }>(
      `SELECT o.slug FROM aggregator.aggregators a JOIN aggregator.organisations o USING (org_id)
        WHERE a.aggregator_id::text = $1 AND a.status = 'pending' AND a.registration ? 'org_id' AND a.org_approved_at IS NULL`, [aggregatorId]);
    if (waiting) throw new RegistrationConflict('awaits_organisation', `Aggregator ${aggregatorId} joins organisation ${waiting.slug}, which has not approved it yet (its review link was e-mailed to the organisation's contact)`);
  }
  const { rows: [agg] } = await client.query<{ org_id: string }>(
    `UPDATE aggregator.aggregators SET status = $2, status_reason = $3, decided_at = now(), updated_at = now()
      WHERE aggregator_id::text = $1 AND status = 'pending' RETURNING org_id`, [aggregatorId, status, reason]);
  if (!agg) return false;
  // The organisation made for this registration follows its aggregator; a registered organisation is reviewed on its own.
  await client.query(
    `UPDATE aggregator.organisations SET status = $2, status_reason = $3, decided_at = now(), updated_at = now()
      WHERE org_id = $1 AND status = 'pending' AND registration IS NULL`, [agg.org_id, status, reason]);
  if (intent === 'approve') {
    await client.query('UPDATE aggregator.users SET enabled = true, updated_at = now() WHERE aggregator_id = $1', [aggregatorId]);
    await enqueue(client, { task: PUSH_ORGANISATION_TASK, payload: { aggregator_id: aggregatorId }, jobKey: `${PUSH_ORGANISATION_TASK}:${aggregatorId}` });
  }
  await enqueue(client, { task: DECISION_EMAIL_TASK, payload: { kind: 'aggregator', subject_id: aggregatorId }, jobKey: `${DECISION_EMAIL_TASK}:${aggregatorId}` });
  return true;
}

/** What the review page and the e-mails show about an aggregator registration. */
export async function aggregatorForReview(db: Queryable, pii: PiiCrypto, aggregatorId: string) {
  const { rows: [a] } = await db.query<{
    name: string; types: string[]; status: string; status_reason: string | null; registration: Record<string, unknown> | null;
    org_id: string; org_slug: string; org_name: string; org_approved_at: Date | null; created_at: Date;
  }>(
    `SELECT a.name, a.types, a.status, a.status_reason, a.registration, a.org_id, o.slug AS org_slug, o.display_name AS org_name, a.org_approved_at, a.created_at
       FROM aggregator.aggregators a JOIN aggregator.organisations o USING (org_id) WHERE a.aggregator_id = $1`, [aggregatorId]);
  if (!a) return null;
  const { rows: [user] } = await db.query<{ name_encrypted: string; email_encrypted: string; phone_encrypted: string }>(
    'SELECT name_encrypted, email_encrypted, phone_encrypted FROM aggregator.users WHERE aggregator_id = $1 ORDER BY created_at LIMIT 1', [aggregatorId]);
  return {
    ...a,
    contact: user ? { name: pii.decrypt(user.name_encrypted), email: pii.decrypt(user.email_encrypted), phone: pii.decrypt(user.phone_encrypted) } : null,
  };
}

/**
 * The item signals holds for an approved aggregator's organisation (network `organisation` block):
 * id = org id; state = name, slug, aggregator types, sub-organisation, website, addresses (no
 * contact details); locations from the registration's GeoJSON points.
 */
export async function organisationItem(db: Queryable, network: Network, aggregatorId: string, instanceUrl: string): Promise<ItemInput | null> {
  if (!network.organisation) return null;
  const { rows: [r] } = await db.query<{ org_id: string; slug: string; display_name: string; registration: AggregatorRegistration | null; types: string[] }>(
    `SELECT o.org_id, o.slug, o.display_name, a.registration, a.types
       FROM aggregator.aggregators a JOIN aggregator.organisations o USING (org_id) WHERE a.aggregator_id = $1`, [aggregatorId]);
  if (!r) return null;
  const { rows: typeRows } = await db.query<{ type: string }>(
    `SELECT DISTINCT unnest(types) AS type FROM aggregator.aggregators WHERE org_id = $1 AND status = 'approved' ORDER BY 1`, [r.org_id]);
  const reg = r.registration;
  const locations = (reg?.locations ?? []).flatMap((l) => (l.geo.type === 'Point' && Array.isArray(l.geo.coordinates) && l.geo.coordinates.length >= 2
    ? [{ lat: Number(l.geo.coordinates[1]), lng: Number(l.geo.coordinates[0]), ...(l.address?.addressLocality ? { label: l.address.addressLocality } : {}) }]
    : []));
  const addresses = (reg?.locations ?? []).flatMap((l) => (l.address ? [l.address] : []));
  const state: Record<string, unknown> = {
    name: r.display_name, slug: r.slug, aggregator_types: typeRows.length ? typeRows.map((t) => t.type) : r.types,
    ...(reg?.sub_org_name ? { sub_org_name: reg.sub_org_name } : {}),
    ...(reg?.url ? { url: reg.url } : {}),
    ...(addresses.length ? { addresses } : {}),
  };
  return {
    item_network: network.id, item_domain: network.organisation.domain, item_type: network.organisation.itemType,
    item_id: r.org_id, item_state: state, item_locations: locations.filter((l) => Math.abs(l.lat) <= 90 && Math.abs(l.lng) <= 180),
    item_instance_url: instanceUrl, item_schema_url: network.organisation.schemaId, created_by: `aggregator:${aggregatorId}`,
  };
}
