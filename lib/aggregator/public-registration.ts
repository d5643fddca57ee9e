/**
 * Public registration through a registration link (spec "POST /public/v1/aggregators/{orgSlug}/
 * registrations/{slug}"): what the form needs, and one submission — validated against the link
 * domain's participant schema (Ajv, through the bulk path's row coercion so that a form and a
 * spreadsheet accept the same spellings), stored with its identity encrypted, counted on the link,
 * and pushed to signals by the task `aggregator-push-participant` enqueued in the same transaction.
 *
 * Registration modes: `account_only` accepts only the identity fields and the consent fields
 * (`consent_terms` and `consent_privacy` required, true); any other mode accepts the whole profile,
 * with the consent fields optional.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { createAjv, goLiveStatus, type Domain, type FieldInfo, type Network } from '../network/config.ts';
import { itemLocationSchema, type LifecycleStatus } from '../network/items.ts';
import type { PiiCrypto } from '../platform/crypto.ts';
import { withTransaction, type Pool, type Queryable } from '../platform/db.ts';
import { enqueue, JOB_PRIORITY } from '../platform/jobs.ts';
import { createRowCoercer, type CoercedParticipant, type FieldError } from './bulk/row-coercion.ts';
import { countSubmission, type LinkRow } from './links.ts';
import { findRegistered, insertParticipants, participantItem, participantKeys } from './participants.ts';

/** Task pushing one registered participant to signals; payload `{participant_id}`. */
export const PUSH_PARTICIPANT_TASK = 'aggregator-push-participant';

export const ACCOUNT_ONLY_MODE = 'account_only';
export const CONSENT_FIELDS = ['consent_terms', 'consent_privacy'] as const;
type ConsentField = (typeof CONSENT_FIELDS)[number];
const ITEM_LOCATIONS = 'item_locations';

/** The consent statements shown beside the consent checkboxes (and returned to API clients). */
export function consentTexts(network: Network, orgName: string): Record<ConsentField, string> {
  return {
    consent_terms: `I agree to the terms of use of the ${network.name} and to ${orgName} registering me on it.`,
    consent_privacy: `I agree that ${orgName} stores my name, phone number and e-mail (encrypted) to contact me about opportunities, and that my profile without them is shared on the network.`,
  };
}

const modeDomains = new WeakMap<Domain, Map<string, Domain>>();

/**
 * The domain as a link of `mode` presents it: the whole schema, or for `account_only` the identity
 * fields alone (a schema with only those properties, compiled once with Ajv).
 */
export function domainForMode(domain: Domain, mode: string): Domain {
  if (mode !== ACCOUNT_ONLY_MODE) return domain;
  let byMode = modeDomains.get(domain);
  if (!byMode) modeDomains.set(domain, byMode = new Map());
  let view = byMode.get(mode);
  if (!view) {
    const fields = domain.fields.filter((f) => f.identity);
    const names = new Set(fields.map((f) => f.name));
    const schema = domain.schema as Record<string, any>;
    const reduced = {
      ...schema,
      $id: `${domain.schemaId}:${mode}`,
      properties: Object.fromEntries(Object.entries<unknown>(schema.properties ?? {}).filter(([k]) => names.has(k))),
      required: (schema.required ?? []).filter((k: string) => names.has(k)),
    };
    view = { ...domain, schema: reduced, validate: createAjv().compile(reduced), fields };
    byMode.set(mode, view);
  }
  return view;
}

/** What a form needs to register people through `link` (the public GET). */
export function registrationForm(network: Network, link: LinkRow) {
  const domain = domainForMode(network.domains.get(link.domain)!, link.registration_mode);
  return {
    link: {
      org_slug: link.org_slug, org_name: link.org_name, slug: link.slug, domain: link.domain, domain_label: domain.label,
      registration_mode: link.registration_mode, status: link.status, expires_at: link.expires_at?.toISOString() ?? null, context: link.context,
    },
    schema: domain.schema,
    fields: domain.fields.map((f: FieldInfo) => ({
      name: f.name, label: f.label, description: f.description ?? null, kind: f.kind, item_kind: f.itemKind ?? null,
      enum: f.enum ?? null, required: f.required, identity: f.identity ?? null, minimum: f.minimum ?? null, maximum: f.maximum ?? null,
    })),
    consent: {
      required: link.registration_mode === ACCOUNT_ONLY_MODE,
      texts: consentTexts(network, link.org_name),
    },
  };
}

/** A submission turned into a participant, or every field problem. */
export type CoercedSubmission =
  | { ok: true; participant: CoercedParticipant; consent: Partial<Record<ConsentField, { value: true; given_at: string }>> }
  | { ok: false; errors: FieldError[] };

const locationsSchema = z.array(itemLocationSchema).max(20);
const TRUE_WORDS = new Set([true, 'true', 'on', 'yes', '1']);

/**
 * Coerces and validates a submitted body (JSON, or a form's strings) for `domain` as presented by
 * `mode`. Values are turned into cells (arrays joined by the network's `csv_array_delimiter`) and
 * go through `createRowCoercer`, so phones become E.164, enums their canonical spelling, and every
 * problem names its field. Keys that are not fields of the form are errors.
 */
export function coerceSubmission(network: Network, fullDomain: Domain, mode: string, body: unknown): CoercedSubmission {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { ok: false, errors: [{ field: '(body)', message: 'body must be a JSON object' }] };
  const domain = domainForMode(fullDomain, mode);
  const input = body as Record<string, unknown>;
  const errors: FieldError[] = [];
  const cells = domain.fields.map((f) => {
    const value = input[f.name];
    if (value === undefined || value === null) return '';
    if (Array.isArray(value)) {
      if (f.kind !== 'array') {
        errors.push({ field: f.name, message: `${f.name} takes one value, not a list` });
        return '';
      }
      const parts = value.filter((v) => v !== '' && v !== null).map(String);
      if (parts.some((p) => p.includes(network.csvArrayDelimiter))) {
        errors.push({ field: f.name, message: `values of ${f.name} may not contain "${network.csvArrayDelimiter}"` });
        return '';
      }
      return parts.join(network.csvArrayDelimiter);
    }
    if (typeof value === 'object') {
      errors.push({ field: f.name, message: `${f.name} must be a ${f.kind === 'array' ? 'list' : f.kind}, not an object` });
      return '';
    }
    return String(value).trim();
  });
  const known = new Set([...domain.fields.map((f) => f.name), ...CONSENT_FIELDS, ITEM_LOCATIONS]);
  for (const key of Object.keys(input)) {
    if (!known.has(key)) errors.push({ field: key, message: `${key} is not a field of this ${mode === ACCOUNT_ONLY_MODE ? 'account-only ' : ''}registration form` });
  }
  const now = new Date().toISOString();
  const consent: Partial<Record<ConsentField, { value: true; given_at: string }>> = {};
  for (const field of CONSENT_FIELDS) {
    const value = input[field];
    if (value !== undefined && value !== '' && !TRUE_WORDS.has(value as string | boolean)) {
      errors.push({ field, message: `${field} must be true when given` });
    } else if (value !== undefined && value !== '') {
      consent[field] = { value: true, given_at: now };
    } else if (mode === ACCOUNT_ONLY_MODE) {
      errors.push({ field, message: `${field} is required: tick the box to agree` });
    }
  }
  let extraLocations: { lat: number; lng: number; label?: string }[] = [];
  if (input[ITEM_LOCATIONS] !== undefined) {
    const parsed = locationsSchema.safeParse(input[ITEM_LOCATIONS]);
    if (parsed.success) extraLocations = parsed.data;
    else errors.push({ field: ITEM_LOCATIONS, message: `${ITEM_LOCATIONS} must be a list of at most 20 {lat, lng, label?} points: ${parsed.error.issues[0].message}` });
  }
  const coerce = createRowCoercer(network, domain, { columns: domain.fields.map((f, index) => ({ index, header: f.name, field: f.name })), ignored: [] });
  const outcome = coerce(cells);
  if (!outcome.ok) errors.push(...outcome.errors.filter((e) => !errors.some((x) => x.field === e.field)));
  if (errors.length || !outcome.ok) return { ok: false, errors };
  outcome.participant.locations.push(...extraLocations);
  return { ok: true, participant: outcome.participant, consent };
}

/** The answer to a submission: the spec's outcome bodies (201, 409), or field errors (400). */
export type SubmissionResult =
  | { status: 201 | 409; body: Record<string, unknown> }
  | { status: 400; errors: FieldError[] };

/**
 * Whether another aggregator already holds a participant with this phone or e-mail (blind indexes),
 * i.e. the person is owned elsewhere (docs/decisions.md, "Registration, links and approval").
 */
async function ownedElsewhere(db: Queryable, aggregatorId: string, keys: { phoneIndex?: Buffer; emailIndex?: Buffer }): Promise<boolean> {
  if (!keys.phoneIndex && !keys.emailIndex) return false;
  const { rows } = await db.query(
    `SELECT 1 FROM aggregator.participants
      WHERE aggregator_id <> $1 AND (phone_index = $2 OR email_index = $3) LIMIT 1`,
    [aggregatorId, keys.phoneIndex ?? null, keys.emailIndex ?? null]);
  return rows.length > 0;
}

/**
 * Registers one submission through a live, unexpired `link` (the caller checked both): validates,
 * then in one transaction stores the participant (identity encrypted, consent recorded), bumps the
 * link's counter and enqueues its push to signals. A phone or e-mail already registered with the
 * link's aggregator is `skipped` (409) with nothing created; invalid input is `failed` (400).
 */
export async function submitRegistration(
  deps: { pool: Pool; pii: PiiCrypto; network: Network; instanceUrl: string },
  link: LinkRow,
  body: unknown,
): Promise<SubmissionResult> {
  const domain = deps.network.domains.get(link.domain)!;
  const mode = link.registration_mode;
  const shape = { registration_mode: mode, submission_shape: mode === ACCOUNT_ONLY_MODE ? 'account' : 'account_and_profile' };
  const coerced = coerceSubmission(deps.network, domain, mode, body);
  if (!coerced.ok) {
    await countSubmission(deps.pool, link.link_id, 'failed');
    return { status: 400, errors: coerced.errors };
  }
  const { participant, consent } = coerced;
  const keys = participantKeys(deps.pii, participant);
  return withTransaction(deps.pool, async (client) => {
    const elsewhere = await ownedElsewhere(client, link.aggregator_id, keys);
    const registered = await findRegistered(client, link.aggregator_id, domain.name, [keys]);
    const existing = (keys.phoneIndex && registered.phone.get(keys.phoneIndex.toString('hex')))
      || (keys.emailIndex && registered.email.get(keys.emailIndex.toString('hex'))) || undefined;
    const skipped = async (what: string, lifecycle: LifecycleStatus | null) => {
      await countSubmission(client, link.link_id, 'skipped');
      return {
        status: 409 as const,
        body: { outcome: 'skipped', message: `This ${what} is already registered with ${link.org_slug}; nothing was changed.`, ...shape, lifecycle_status: lifecycle, owned_elsewhere: elsewhere },
      };
    };
    if (existing) {
      const what = keys.phoneIndex && registered.phone.has(keys.phoneIndex.toString('hex')) ? 'phone number' : 'e-mail address';
      const { rows: [row] } = await client.query<{ lifecycle_status: LifecycleStatus | null }>(
        'SELECT lifecycle_status FROM aggregator.participants WHERE participant_id = $1', [existing.participant_id]);
      return skipped(what, row?.lifecycle_status ?? null);
    }
    const participantId = randomUUID();
    const inserted = await insertParticipants(client, deps.pii, { aggregatorId: link.aggregator_id, orgId: link.org_id, domain },
      [{ participantId, participant, keys }]);
    // Taken by a concurrent submission between the lookup and the insert (unique indexes).
    if (!inserted.has(participantId)) return skipped('phone number or e-mail address', null);
    await client.query('UPDATE aggregator.participants SET registration_link_id = $2, consent = $3 WHERE participant_id = $1',
      [participantId, link.link_id, consent]);
    await countSubmission(client, link.link_id, 'passed');
    await enqueue(client, {
      task: PUSH_PARTICIPANT_TASK, payload: { participant_id: participantId }, jobKey: `${PUSH_PARTICIPANT_TASK}:${participantId}`,
      // Ahead of any upload's queued chunks: the person is found while they still run.
      priority: JOB_PRIORITY.person,
    });
    const item = participantItem(deps.network, domain, participantId, participant, { createdBy: `aggregator:${link.aggregator_id}`, instanceUrl: deps.instanceUrl });
    return {
      status: 201 as const,
      body: { outcome: 'passed', submission_id: participantId, ...shape, lifecycle_status: goLiveStatus(domain, item.item_state), owned_elsewhere: elsewhere },
    };
  });
}
