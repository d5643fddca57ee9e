/**
 * Profile export (spec "POST /v1/dashboard/export/profiles"; issue 10 item 2): the decrypted
 * profiles of the requested items that belong to the caller, as CSV — UTF-8 with a BOM, RFC 4180,
 * CRLF, cells protected against formula injection (bulk/error-report.ts `protectCell`) — in the
 * order the ids were asked for. Ids of other aggregators, unknown ids and ids outside `domain` are
 * silently absent (only their count is told). Every export is recorded in
 * aggregator.profile_exports (who, when, how many, which fields).
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { stringify } from 'csv-stringify';
import type { Network } from '../network/config.ts';
import type { PiiCrypto } from '../platform/crypto.ts';
import type { Queryable } from '../platform/db.ts';
import { protectCell } from './bulk/error-report.ts';

/** Most ids per export (spec "Limits": export item_ids 1..1000). */
export const MAX_EXPORT_ITEMS = 1000;
const PAGE_IDS = 200;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Columns after the schema fields. */
const TRAILING_COLUMNS = ['lifecycle_status', 'source', 'bulk_upload_id', 'created_at'];

/**
 * The CSV columns: `participant_id`, `domain`, then the identity fields (`x-identity`), then the
 * other fields in schema order — of `domain`, or of every domain of the network in its order
 * (each name once) — then lifecycle_status, source, bulk_upload_id, created_at. Stable for a
 * given network configuration.
 */
export function exportColumns(network: Network, domain?: string): string[] {
  const domains = domain ? [network.domains.get(domain)!] : [...network.domains.values()];
  const fields = domains.flatMap((d) => d.fields);
  const names = [...fields.filter((f) => f.identity), ...fields.filter((f) => !f.identity)].map((f) => f.name);
  return ['participant_id', 'domain', ...new Set(names), ...TRAILING_COLUMNS];
}

/**
 * The distinct requested ids that are the caller's (and in `domain`, when given), in request
 * order, and how many requested (distinct) ids are absent. One indexed lookup by primary key.
 */
export async function exportableIds(db: Queryable, input: { aggregatorId: string; itemIds: string[]; domain?: string }): Promise<{ ids: string[]; absent: number }> {
  const requested = [...new Set(input.itemIds.map((id) => id.toLowerCase()))];
  const uuids = requested.filter((id) => UUID.test(id));
  const { rows } = await db.query<{ participant_id: string }>(
    `SELECT participant_id FROM aggregator.participants
      WHERE participant_id = ANY($1::uuid[]) AND aggregator_id = $2 AND ($3::text IS NULL OR domain = $3)`,
    [uuids, input.aggregatorId, input.domain ?? null]);
  const found = new Set(rows.map((r) => r.participant_id));
  const ids = uuids.filter((id) => found.has(id));
  return { ids, absent: requested.length - ids.length };
}

/** Records an export in aggregator.profile_exports. */
export async function recordExport(db: Queryable, e: {
  aggregatorId: string; orgId: string; exportedBy: string; domain?: string; requested: number; exported: number; absent: number; fields: string[];
}): Promise<void> {
  await db.query(
    `INSERT INTO aggregator.profile_exports (aggregator_id, org_id, exported_by, domain, requested_count, exported_count, absent_count, fields)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [e.aggregatorId, e.orgId, e.exportedBy, e.domain ?? null, e.requested, e.exported, e.absent, e.fields]);
}

function cell(value: unknown, delimiter: string): string {
  if (value === undefined || value === null) return '';
  if (Array.isArray(value)) return value.map(String).join(delimiter);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/**
 * Streams the CSV of participants `ids` (already checked to be `aggregatorId`'s) under `columns`,
 * reading and decrypting PAGE_IDS at a time; arrays joined with the network's csv_array_delimiter.
 * A query error destroys the stream (the reader sees it).
 */
export function profilesCsv(db: Queryable, pii: PiiCrypto, network: Network, input: { aggregatorId: string; ids: string[]; columns: string[] }): Readable {
  async function* records() {
    yield input.columns;
    for (let i = 0; i < input.ids.length; i += PAGE_IDS) {
      const page = input.ids.slice(i, i + PAGE_IDS);
      const { rows } = await db.query<{
        participant_id: string; domain: string; name_encrypted: string | null; phone_encrypted: string | null; email_encrypted: string | null;
        profile: Record<string, unknown>; lifecycle_status: string | null; bulk_upload_id: string | null; created_at: Date;
      }>(
        `SELECT participant_id, domain, name_encrypted, phone_encrypted, email_encrypted, profile, lifecycle_status, bulk_upload_id, created_at
           FROM aggregator.participants WHERE participant_id = ANY($1::uuid[]) AND aggregator_id = $2`, [page, input.aggregatorId]);
      const byId = new Map(rows.map((r) => [r.participant_id, r]));
      for (const id of page) {
        const r = byId.get(id);
        if (!r) continue;
        const domain = network.domains.get(r.domain);
        const identityOf = new Map(domain?.fields.filter((f) => f.identity).map((f) => [f.name, f.identity!]) ?? []);
        const encrypted = { name: r.name_encrypted, phone: r.phone_encrypted, email: r.email_encrypted };
        const values: Record<string, unknown> = {
          ...r.profile,
          participant_id: r.participant_id,
          domain: r.domain,
          lifecycle_status: r.lifecycle_status ?? 'pending',
          source: r.bulk_upload_id ? 'bulk_upload' : 'registration_link',
          bulk_upload_id: r.bulk_upload_id,
          created_at: r.created_at.toISOString(),
        };
        for (const [field, kind] of identityOf) {
          const token = encrypted[kind];
          values[field] = token ? pii.decrypt(token) : null;
        }
        yield input.columns.map((c) => protectCell(cell(values[c], network.csvArrayDelimiter)));
      }
    }
  }
  const csv = stringify({ record_delimiter: 'windows', bom: true });
  pipeline(Readable.from(records()), csv).catch(() => {});
  return csv;
}
