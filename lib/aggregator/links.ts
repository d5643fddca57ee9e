/**
 * Registration links (spec "Registration link" and its state table): shareable links through which
 * people register with an aggregator on a public form. Status draft → live → retired; `live` mints
 * the public URL `{AGGREGATOR_PUBLIC_URL}/r/{orgSlug}/{slug}`. Metrics are counters kept on the
 * link row and bumped by each submission (O(1) to read).
 */
import { randomBytes } from 'node:crypto';
import type { Queryable } from '../platform/db.ts';

export const LINK_STATUSES = ['draft', 'live', 'retired'] as const;
export type LinkStatus = (typeof LINK_STATUSES)[number];

/** Slug rule of the issue: lower-case words of letters and digits joined by single hyphens, 3–60 characters. */
export const LINK_SLUG_PATTERN = /^[a-z0-9]+(-[a-z0-9]+)*$/;

/** A link row as stored (with its organisation's slug). */
export interface LinkRow {
  link_id: string;
  aggregator_id: string;
  org_id: string;
  org_slug: string;
  /** The organisation's display name. */
  org_name: string;
  slug: string;
  domain: string;
  registration_mode: string;
  status: LinkStatus;
  context: Record<string, unknown>;
  expires_at: Date | null;
  passed: number;
  failed: number;
  skipped: number;
  created_at: Date;
  updated_at: Date;
}

/** The registration link as the API answers it (spec "Registration link": every field present). */
export interface LinkView {
  link_id: string;
  slug: string;
  domain: string;
  status: LinkStatus;
  registration_mode: string;
  context: Record<string, unknown>;
  expires_at: string | null;
  /** `{base}/r/{orgSlug}/{slug}` once live (null while draft). */
  public_url: string | null;
  /** An SVG QR image of public_url, served by the aggregator service (null while draft). */
  qr_url: string | null;
  /** The QR stays valid as long as the link: its expiry. */
  qr_expires_at: string | null;
  metrics: { total: number; passed: number; failed: number; skipped: number };
  created_at: string;
  updated_at: string;
}

const SELECT = `SELECT l.link_id, l.aggregator_id, l.org_id, o.slug AS org_slug, o.display_name AS org_name, l.slug, l.domain, l.registration_mode, l.status,
       l.context, l.expires_at, l.passed, l.failed, l.skipped, l.created_at, l.updated_at
  FROM aggregator.registration_links l JOIN aggregator.organisations o USING (org_id)`;

/** Path of the public form of a link, relative to the aggregator service. */
export function formPath(orgSlug: string, slug: string): string {
  return `/r/${encodeURIComponent(orgSlug)}/${encodeURIComponent(slug)}`;
}

/** The API view of `row`; `baseUrl` is the aggregator service's public base (AGGREGATOR_PUBLIC_URL). */
export function linkView(row: LinkRow, baseUrl: string): LinkView {
  const minted = row.status !== 'draft';
  const publicUrl = minted ? new URL(formPath(row.org_slug, row.slug), baseUrl).href : null;
  return {
    link_id: row.link_id,
    slug: row.slug,
    domain: row.domain,
    status: row.status,
    registration_mode: row.registration_mode,
    context: row.context,
    expires_at: row.expires_at?.toISOString() ?? null,
    public_url: publicUrl,
    qr_url: publicUrl && `${publicUrl}/qr.svg`,
    qr_expires_at: publicUrl && (row.expires_at?.toISOString() ?? null),
    metrics: { total: row.passed + row.failed + row.skipped, passed: row.passed, failed: row.failed, skipped: row.skipped },
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** A slug for a link created without one: `{domain}-{8 hex}`. */
export function generatedSlug(domain: string): string {
  return `${domain.replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'link'}-${randomBytes(4).toString('hex')}`;
}

export interface LinkInput {
  slug: string;
  domain: string;
  registrationMode: string;
  status: 'draft' | 'live';
  context: Record<string, unknown>;
  expiresAt: Date | null;
}

/**
 * Inserts a link of `scope`'s aggregator. Returns null when the slug is already used in the
 * organisation (unique index `registration_links_slug_uq`: the caller answers 409).
 */
export async function insertLink(db: Queryable, scope: { aggregatorId: string; orgId: string }, input: LinkInput): Promise<LinkRow | null> {
  const { rows: [inserted] } = await db.query<{ link_id: string }>(
    `INSERT INTO aggregator.registration_links (aggregator_id, org_id, slug, domain, registration_mode, status, context, expires_at, activated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $6 = 'live' THEN now() END)
     ON CONFLICT (org_id, slug) DO NOTHING RETURNING link_id`,
    [scope.aggregatorId, scope.orgId, input.slug, input.domain, input.registrationMode, input.status, input.context, input.expiresAt]);
  return inserted ? getLink(db, scope.aggregatorId, inserted.link_id) : null;
}

/** The link `linkId` of `aggregatorId`, or null (unknown, or another aggregator's). */
export async function getLink(db: Queryable, aggregatorId: string, linkId: string): Promise<LinkRow | null> {
  const { rows } = await db.query<LinkRow>(`${SELECT} WHERE l.link_id = $1 AND l.aggregator_id = $2`, [linkId, aggregatorId]);
  return rows[0] ?? null;
}

/** Links of `aggregatorId`, newest first, one page (1-based), with the total count. */
export async function listLinks(db: Queryable, aggregatorId: string, page: { page: number; limit: number }): Promise<{ links: LinkRow[]; total: number }> {
  const [{ rows }, { rows: [count] }] = await Promise.all([
    db.query<LinkRow>(`${SELECT} WHERE l.aggregator_id = $1 ORDER BY l.created_at DESC, l.link_id DESC LIMIT $2 OFFSET $3`,
      [aggregatorId, page.limit, (page.page - 1) * page.limit]),
    db.query<{ n: number }>('SELECT count(*)::int AS n FROM aggregator.registration_links WHERE aggregator_id = $1', [aggregatorId]),
  ]);
  return { links: rows, total: count.n };
}

/**
 * Changes a draft link (only the given fields). Returns `updated` with the new row, `not_draft`
 * when the link is no longer a draft, `slug_taken`, or null when there is no such link.
 */
export async function updateDraftLink(db: Queryable, aggregatorId: string, linkId: string, changes: Partial<Omit<LinkInput, 'status'>>):
Promise<{ result: 'updated'; link: LinkRow } | { result: 'not_draft'; link: LinkRow } | { result: 'slug_taken' } | null> {
  try {
    const { rowCount } = await db.query(
      `UPDATE aggregator.registration_links
          SET slug = coalesce($3, slug), domain = coalesce($4, domain), registration_mode = coalesce($5, registration_mode),
              context = coalesce($6, context), expires_at = CASE WHEN $7 THEN $8 ELSE expires_at END, updated_at = now()
        WHERE link_id = $1 AND aggregator_id = $2 AND status = 'draft'`,
      [linkId, aggregatorId, changes.slug ?? null, changes.domain ?? null, changes.registrationMode ?? null,
        changes.context ?? null, changes.expiresAt !== undefined, changes.expiresAt ?? null]);
    const link = await getLink(db, aggregatorId, linkId);
    if (!link) return null;
    return rowCount ? { result: 'updated', link } : { result: 'not_draft', link };
  } catch (err) {
    if ((err as { constraint?: string }).constraint === 'registration_links_slug_uq') return { result: 'slug_taken' };
    throw err;
  }
}

/**
 * Moves a link to `to` when its status is one of `from` (compare-and-set: concurrent moves cannot
 * both win). Returns the link after the attempt and whether it moved; null when there is no such link.
 */
export async function moveLink(db: Queryable, aggregatorId: string, linkId: string, from: LinkStatus[], to: LinkStatus): Promise<{ link: LinkRow; moved: boolean } | null> {
  const { rowCount } = await db.query(
    `UPDATE aggregator.registration_links
        SET status = $4, updated_at = now(),
            activated_at = CASE WHEN $4 = 'live' THEN now() ELSE activated_at END,
            retired_at = CASE WHEN $4 = 'retired' THEN now() ELSE retired_at END
      WHERE link_id = $1 AND aggregator_id = $2 AND status = ANY($3::text[])`, [linkId, aggregatorId, from, to]);
  const link = await getLink(db, aggregatorId, linkId);
  return link && { link, moved: rowCount === 1 };
}

/**
 * The link published at `/r/{orgSlug}/{slug}` (any status), or null — also when its aggregator or
 * organisation is not approved (suspended, rejected): their links are closed with them.
 */
export async function findPublicLink(db: Queryable, orgSlug: string, slug: string): Promise<LinkRow | null> {
  const { rows } = await db.query<LinkRow>(
    `${SELECT} JOIN aggregator.aggregators a USING (aggregator_id)
      WHERE o.slug = $1 AND l.slug = $2 AND o.status = 'approved' AND a.status = 'approved'`, [orgSlug, slug]);
  return rows[0] ?? null;
}

/** Adds one submission outcome to a link's counters (inside the submission's transaction). */
export async function countSubmission(db: Queryable, linkId: string, outcome: 'passed' | 'failed' | 'skipped'): Promise<void> {
  await db.query(`UPDATE aggregator.registration_links SET ${outcome} = ${outcome} + 1 WHERE link_id = $1`, [linkId]);
}
