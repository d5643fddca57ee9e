/**
 * Organisation registration (spec "POST /v1/orgs/create", "Organisation and aggregator
 * registration"): a `pending` organisation with a unique slug, its mirrored identity group and a
 * disabled owner user (identity encrypted), reviewed by the network admin through signed links;
 * approval makes it `approved` and enables the owner, rejection makes it `rejected` with a reason.
 */
import type { PiiCrypto } from '../platform/crypto.ts';
import type { PoolClient, Queryable } from '../platform/db.ts';
import { enqueue } from '../platform/jobs.ts';
import { slugify } from './aggregators.ts';
import { createReview, DECISION_EMAIL_TASK, REVIEW_EMAIL_TASK, type ReviewIntent, type ReviewSubjectKind } from './review-links.ts';

/** The body of POST /v1/orgs/create after validation (phone in E.164, e-mail lower-cased). */
export interface OrganisationRegistration {
  display_name: string;
  owner: { name: string; email: string; phone: string };
  consent: { value: true; given_at: string; valid_till: string };
  state?: string;
  website?: string;
  aggregator_type?: string[];
  organisation_type?: string;
  organisation_sub_type_educational?: string;
  organisation_sub_type_non_educational?: string;
  management_type?: string;
  address?: Record<string, string>;
}

/** A free organisation slug from `base`: `base`, else `base-2`, `base-3`… */
export async function uniqueOrgSlug(db: Queryable, base: string): Promise<string> {
  const { rows } = await db.query<{ slug: string }>(`SELECT slug FROM aggregator.organisations WHERE slug = $1 OR slug LIKE $1 || '-%'`, [base]);
  const used = new Set(rows.map((r) => r.slug));
  let slug = base;
  for (let n = 2; used.has(slug); n++) slug = `${base}-${n}`;
  return slug;
}

/** Creates the organisation's mirrored identity group (`org:{slug}`). */
export async function createIdentityGroup(client: PoolClient, orgId: string, slug: string): Promise<void> {
  await client.query('INSERT INTO aggregator.identity_groups (org_id, name) VALUES ($1, $2) ON CONFLICT (org_id) DO NOTHING', [orgId, `org:${slug}`]);
}

/** Enqueues a fresh review e-mail for `subject` (new review row, new signed links). Returns the review id. */
export async function requestReview(client: PoolClient, kind: ReviewSubjectKind, subjectId: string): Promise<string> {
  const reviewId = await createReview(client, kind, subjectId);
  await enqueue(client, { task: REVIEW_EMAIL_TASK, payload: { review_id: reviewId }, jobKey: `${REVIEW_EMAIL_TASK}:${reviewId}` });
  return reviewId;
}

/**
 * Registers an organisation inside the caller's transaction. A pending organisation whose owner has
 * the same e-mail is returned instead (`created: false`), with a fresh review e-mail; no second one
 * is made.
 */
export async function registerOrganisation(client: PoolClient, pii: PiiCrypto, input: OrganisationRegistration):
Promise<{ orgId: string; slug: string; status: string; created: boolean }> {
  const emailIndex = pii.blindIndex('email', input.owner.email);
  // Serialises registrations of one owner e-mail (the duplicate check below is then race-free).
  await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 8))', [emailIndex.toString('hex')]);
  const { rows: [existing] } = await client.query<{ org_id: string; slug: string; status: string }>(
    `SELECT o.org_id, o.slug, o.status FROM aggregator.users u JOIN aggregator.organisations o USING (org_id)
      WHERE u.email_index = $1 AND u.role = 'owner' AND o.status = 'pending' ORDER BY o.created_at LIMIT 1`, [emailIndex]);
  if (existing) {
    await requestReview(client, 'organisation', existing.org_id);
    return { orgId: existing.org_id, slug: existing.slug, status: existing.status, created: false };
  }
  const { owner, display_name: displayName, ...details } = input;
  const slug = await uniqueOrgSlug(client, slugify(displayName));
  const { rows: [org] } = await client.query<{ org_id: string }>(
    `INSERT INTO aggregator.organisations (slug, display_name, status, registration) VALUES ($1, $2, 'pending', $3) RETURNING org_id`,
    [slug, displayName, details]);
  await createIdentityGroup(client, org.org_id, slug);
  await client.query(
    `INSERT INTO aggregator.users (org_id, role, name_encrypted, email_encrypted, phone_encrypted, email_index, enabled)
     VALUES ($1, 'owner', $2, $3, $4, $5, false)`,
    [org.org_id, pii.encrypt(owner.name), pii.encrypt(owner.email), pii.encrypt(owner.phone), emailIndex]);
  await requestReview(client, 'organisation', org.org_id);
  return { orgId: org.org_id, slug, status: 'pending', created: true };
}

/**
 * Who speaks for organisation `orgId` when an aggregator asks to join it: its owner (the person who
 * registered it through POST /v1/orgs/create), else the registrant of its earliest approved
 * aggregator; null when it has neither (made with `ldp aggregator create`: the network admin
 * speaks for it). Only enabled users, i.e. of an approved registration.
 */
export async function organisationContact(db: Queryable, pii: PiiCrypto, orgId: string): Promise<{ name: string; email: string } | null> {
  const { rows: [user] } = await db.query<{ name_encrypted: string; email_encrypted: string }>(
    `SELECT u.name_encrypted, u.email_encrypted FROM aggregator.users u LEFT JOIN aggregator.aggregators a USING (aggregator_id)
      WHERE u.org_id = $1 AND u.enabled AND (u.role = 'owner' OR a.status = 'approved')
      ORDER BY u.role = 'owner' DESC, u.created_at LIMIT 1`, [orgId]);
  return user ? { name: pii.decrypt(user.name_encrypted), email: pii.decrypt(user.email_encrypted) } : null;
}

/** What the review page shows about an organisation. */
export async function organisationForReview(db: Queryable, pii: PiiCrypto, orgId: string) {
  const { rows: [o] } = await db.query<{ slug: string; display_name: string; status: string; registration: Record<string, unknown> | null; status_reason: string | null; created_at: Date }>(
    'SELECT slug, display_name, status, registration, status_reason, created_at FROM aggregator.organisations WHERE org_id = $1', [orgId]);
  if (!o) return null;
  const { rows: [owner] } = await db.query<{ name_encrypted: string; email_encrypted: string; phone_encrypted: string }>(
    `SELECT name_encrypted, email_encrypted, phone_encrypted FROM aggregator.users WHERE org_id = $1 AND role = 'owner' ORDER BY created_at LIMIT 1`, [orgId]);
  return {
    ...o,
    owner: owner ? { name: pii.decrypt(owner.name_encrypted), email: pii.decrypt(owner.email_encrypted), phone: pii.decrypt(owner.phone_encrypted) } : null,
  };
}

/**
 * Applies a review decision to a pending organisation (inside the caller's transaction): approve →
 * `approved` and its owner users enabled; reject → `rejected` with `reason`. Enqueues the decision
 * e-mail to the owner. Returns false when the organisation was no longer pending.
 */
export async function decideOrganisation(client: PoolClient, orgId: string, intent: ReviewIntent, reason: string | null): Promise<boolean> {
  const { rowCount } = await client.query(
    `UPDATE aggregator.organisations SET status = $2, status_reason = $3, decided_at = now(), updated_at = now()
      WHERE org_id = $1 AND status = 'pending'`, [orgId, intent === 'approve' ? 'approved' : 'rejected', reason]);
  if (!rowCount) return false;
  if (intent === 'approve') await client.query(`UPDATE aggregator.users SET enabled = true, updated_at = now() WHERE org_id = $1 AND role = 'owner'`, [orgId]);
  await enqueue(client, { task: DECISION_EMAIL_TASK, payload: { kind: 'organisation', subject_id: orgId }, jobKey: `${DECISION_EMAIL_TASK}:${orgId}` });
  return true;
}
