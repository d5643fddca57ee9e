/** Organisations and aggregators (aggregator schema): creation and lookup. */
import type { PoolClient, Queryable } from '../platform/db.ts';
import type { Network } from '../network/config.ts';

export interface AggregatorRecord {
  aggregator_id: string;
  org_id: string;
  org_slug: string;
  name: string;
  types: string[];
  status: string;
}

/** Lower-case, hyphen-separated slug of `name` (at most 48 characters), e.g. "Sahyog Foundation" → "sahyog-foundation". */
export function slugify(name: string): string {
  const slug = name.normalize('NFKD').replace(/[\u0300-\u036f]/g, '').toLowerCase()
    .replace(/[^a-z0-9]+/g, '-').replace(/^-+|(?<!-)-+$/g, '').slice(0, 48).replace(/(?<!-)-+$/, '');
  return slug || 'org';
}

/**
 * Creates an approved organisation and an approved aggregator in it, inside the caller's
 * transaction. The slug is `orgSlug` or derived from `name`, with a numeric suffix when taken.
 * @throws Error when a type is not one of the network's aggregator types.
 */
export async function createAggregator(
  client: PoolClient,
  network: Network,
  input: { name: string; types: string[]; orgSlug?: string; orgName?: string },
): Promise<AggregatorRecord> {
  const unknown = input.types.filter((t) => !network.aggregatorTypes[t]);
  if (unknown.length || input.types.length === 0) {
    throw new Error(`Unknown aggregator type ${unknown.join(', ') || '(none)'}; this network has ${Object.keys(network.aggregatorTypes).join(', ')}`);
  }
  const base = input.orgSlug ?? slugify(input.orgName ?? input.name);
  const { rows: taken } = await client.query<{ slug: string }>(
    `SELECT slug FROM aggregator.organisations WHERE slug = $1 OR slug LIKE $1 || '-%'`, [base]);
  const used = new Set(taken.map((r) => r.slug));
  let slug = base;
  for (let n = 2; used.has(slug); n++) slug = `${base}-${n}`;
  const { rows: [org] } = await client.query<{ org_id: string }>(
    'INSERT INTO aggregator.organisations (slug, display_name) VALUES ($1, $2) RETURNING org_id', [slug, input.orgName ?? input.name]);
  const { rows: [agg] } = await client.query<AggregatorRecord>(
    `INSERT INTO aggregator.aggregators (org_id, name, types) VALUES ($1, $2, $3)
     RETURNING aggregator_id, org_id, $4::text AS org_slug, name, types, status`, [org.org_id, input.name, input.types, slug]);
  return agg;
}

/** The aggregator with id `aggregatorId`, or null. */
export async function findAggregator(db: Queryable, aggregatorId: string): Promise<AggregatorRecord | null> {
  const { rows } = await db.query<AggregatorRecord>(
    `SELECT a.aggregator_id, a.org_id, o.slug AS org_slug, a.name, a.types, a.status
       FROM aggregator.aggregators a JOIN aggregator.organisations o USING (org_id)
      WHERE a.aggregator_id::text = $1`, [aggregatorId]);
  return rows[0] ?? null;
}
