/**
 * Writing item snapshots into the search index (`search.items`, `search.item_locations`), used by
 * the search-index-items and search-reconcile tasks. Rules (issue "search and discover", item 1):
 * - order-safe: a snapshot older than the indexed one (by the item's `updated_at` at signals) is
 *   ignored, so jobs may run in any order and be retried;
 * - the embedded text is the item's searchable text (lib/search-text.ts); it is re-embedded only
 *   when its SHA-256 changed or it was embedded with another model version; anything else (state
 *   outside the text, locations, lifecycle) updates the row without embedding;
 * - draft, live and paused items are kept with their `lifecycle_status` (search returns live
 *   ones only), so going live needs no re-embedding; retired items leave the index and their id
 *   is remembered (`search.retired_items`) so a late older snapshot cannot bring them back.
 */
import { createHash } from 'node:crypto';
import type { Pool } from '../platform/db.ts';
import { withTransaction } from '../platform/db.ts';
import type { EmbeddingProvider, ModelVersion } from './embeddings/index.ts';
import type { ItemRecord } from '../network/items.ts';
import type { Logger } from '../platform/logger.ts';
import type { Network } from '../network/config.ts';
import { searchText } from '../network/search-text.ts';
import { encodeHalf } from './half.ts';
import { geoCells } from './geo-cells.ts';
import { readVectorBackend, type VectorBackendName } from './vector-backend.ts';

export interface IndexOutcome {
  /** Rows inserted or updated. */
  written: number;
  /** Texts embedded (each distinct text once). */
  embedded: number;
  /** Retired items removed (or remembered as retired). */
  removed: number;
  /** Snapshots ignored: older than the index, of a retired item, unchanged, or of an unknown domain. */
  skipped: number;
}

/** Texts per embedding request: a chunk is written while the next ones embed. */
const EMBED_CHUNK = 250;

interface Prepared {
  item: ItemRecord;
  text: string;
  hash: string;
}

/** SHA-256 (hex) of an embedded text: the content hash of the index. */
export function contentHash(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/**
 * `vectors` concatenated as one PostgreSQL `real[]` in the binary wire format (array_send: header,
 * one dimension, then each element as length 4 + big-endian float4). node-postgres sends a Buffer
 * parameter in binary, so the server reads the floats without parsing text (about 4x faster than a
 * JSON or text array here); each row takes its slice, cast to halfvec (pgvector backend).
 */
function binaryRealArray(vectors: Float32Array[]): Buffer {
  const count = vectors.reduce((n, v) => n + v.length, 0);
  const buf = Buffer.allocUnsafe(20 + count * 8);
  buf.writeInt32BE(1, 0); // dimensions
  buf.writeInt32BE(0, 4); // no nulls
  buf.writeInt32BE(700, 8); // element type: float4
  buf.writeInt32BE(count, 12);
  buf.writeInt32BE(1, 16); // lower bound
  let offset = 20;
  for (const v of vectors) {
    for (let i = 0; i < v.length; i++) {
      buf.writeInt32BE(4, offset);
      buf.writeFloatBE(v[i], offset + 4);
      offset += 8;
    }
  }
  return buf;
}

const backends = new WeakMap<Pool, Promise<VectorBackendName>>();
/** The pool's vector backend, read once (it is fixed by the migrations). */
function backendOf(pool: Pool): Promise<VectorBackendName> {
  let backend = backends.get(pool);
  if (!backend) {
    backend = readVectorBackend(pool);
    backend.catch(() => backends.delete(pool));
    backends.set(pool, backend);
  }
  return backend;
}

/**
 * The embedding column's value for row `d.n` of a write and its parameter (sql/015_search_f16.sql):
 * pgvector, a slice of one binary real[] cast to halfvec; usearch, a slice of one bytea of
 * binary16 values, converted here (a SQL conversion per element would cost more than the write).
 */
function embeddingParam(backend: VectorBackendName, vectors: Float32Array[], param: string, dims: string): { sql: string; value: Buffer } {
  return backend === 'pgvector'
    ? { sql: `(${param}::real[])[d.n * ${dims} + 1 : (d.n + 1) * ${dims}]::halfvec`, value: binaryRealArray(vectors) }
    : { sql: `substring(${param}::bytea FROM d.n * 2 * ${dims} + 1 FOR 2 * ${dims})`, value: encodeHalf(vectors) };
}

/** The newest snapshot per item id. */
function newestPerItem(items: ItemRecord[]): ItemRecord[] {
  const byId = new Map<string, ItemRecord>();
  for (const item of items) {
    const seen = byId.get(item.item_id);
    if (!seen || Date.parse(item.updated_at) >= Date.parse(seen.updated_at)) byId.set(item.item_id, item);
  }
  return [...byId.values()];
}

/**
 * Applies `snapshots` (item records as stored at signals, with `updated_at` and
 * `lifecycle_status`) to the index, embedding with `provider` in batches of EMBED_CHUNK texts.
 * Idempotent: applying the same snapshots again changes nothing. A job that added or removed rows
 * then refreshes the planner's statistics when due (`refreshStatistics`, its floor
 * `deps.analyzeAfterRows`, default ANALYZE_AFTER_ROWS).
 * @throws Error from the provider or the database (the caller's job is retried).
 */
export async function indexSnapshots(
  deps: { pool: Pool; network: Network; logger: Logger; analyzeAfterRows?: number },
  provider: EmbeddingProvider,
  snapshots: ItemRecord[],
): Promise<IndexOutcome> {
  const outcome: IndexOutcome = { written: 0, embedded: 0, removed: 0, skipped: 0 };
  const items = newestPerItem(snapshots);
  const retired = items.filter((i) => i.lifecycle_status === 'retired');
  const prepared: Prepared[] = [];
  for (const item of items) {
    if (item.lifecycle_status === 'retired') continue;
    const domain = item.item_network === deps.network.id ? deps.network.domains.get(item.item_domain) : undefined;
    if (!domain) {
      deps.logger.warn({ item_id: item.item_id, item_network: item.item_network, item_domain: item.item_domain }, 'not indexed: not a domain of the active network');
      outcome.skipped++;
      continue;
    }
    const text = searchText(domain, item.item_state);
    prepared.push({ item, text, hash: contentHash(text) });
  }
  const version = provider.version;

  // What the index holds for these items: newer snapshot already applied, retired, same text and model.
  const { rows: known } = prepared.length ? await deps.pool.query<{ item_id: string; stale: boolean; retired: boolean; current: boolean; fresh: boolean }>(
    `SELECT d.item_id, coalesce(i.source_updated_at > d.updated_at, false) AS stale, r.item_id IS NOT NULL AS retired, i.item_id IS NULL AS fresh,
            coalesce(i.content_hash = d.hash AND i.model_id = $2 AND i.model_quantization = $3 AND i.model_dimensions = $4, false) AS current
       FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid, updated_at timestamptz, hash text)
       LEFT JOIN search.items i USING (item_id) LEFT JOIN search.retired_items r USING (item_id)`,
    [JSON.stringify(prepared.map((p) => ({ item_id: p.item.item_id, updated_at: p.item.updated_at, hash: p.hash }))),
      version.model_id, version.quantization, version.dimensions],
  ) : { rows: [] };
  const state = new Map(known.map((k) => [k.item_id, k]));
  const toEmbed: Prepared[] = [];
  const toUpdate: Prepared[] = [];
  // Whether this job adds rows to the index (those not in it yet): only then may the table have grown.
  let adds = false;
  for (const p of prepared) {
    const k = state.get(p.item.item_id)!;
    if (k.stale || k.retired) outcome.skipped++;
    else if (k.current) toUpdate.push(p);
    else {
      toEmbed.push(p);
      adds ||= k.fresh;
    }
  }

  // Unchanged text: one write. Changed text: every chunk's embedding is asked for at once (the
  // provider works through them in order, never idle), and each chunk is written as soon as its
  // vectors are there, while the later ones embed. Each write is one statement, order-safe alone.
  if (toUpdate.length) await write(deps.pool, version, toUpdate, undefined, outcome);
  const chunks: { items: Prepared[]; texts: string[]; vectors: Promise<Float32Array[]> }[] = [];
  for (let i = 0; i < toEmbed.length; i += EMBED_CHUNK) {
    const items = toEmbed.slice(i, i + EMBED_CHUNK);
    const texts = [...new Set(items.map((p) => p.text))];
    const vectors = provider.embed(texts);
    vectors.catch(() => {}); // observed below, in order; a later failure must not go unhandled meanwhile
    chunks.push({ items, texts, vectors });
  }
  for (const chunk of chunks) {
    const vectors = await chunk.vectors;
    outcome.embedded += chunk.texts.length;
    await write(deps.pool, version, chunk.items, new Map(chunk.texts.map((t, n) => [t, vectors[n]])), outcome);
  }
  if (retired.length) {
    const data = JSON.stringify(retired.map((r) => ({ item_id: r.item_id, updated_at: r.updated_at })));
    await withTransaction(deps.pool, async (client) => {
      const { rowCount } = await client.query(
        `DELETE FROM search.items WHERE item_id IN (SELECT item_id FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid))`, [data]);
      await client.query(
        `INSERT INTO search.retired_items AS r (item_id, source_updated_at)
         SELECT item_id, updated_at FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid, updated_at timestamptz)
         ON CONFLICT (item_id) DO UPDATE SET source_updated_at = greatest(r.source_updated_at, EXCLUDED.source_updated_at)`, [data]);
      outcome.removed = rowCount ?? 0;
    });
  }
  // Rows changed in place do not make the statistics' row counts wrong: a job that only changes
  // rows (an upload updating every item, issue 30) leaves them to autovacuum's ANALYZE.
  if ((adds && outcome.written) || outcome.removed) await refreshStatistics(deps.pool, deps.analyzeAfterRows);
  return outcome;
}

/** Rows changed since the last ANALYZE past which refreshStatistics analyzes: at least this many... */
export const ANALYZE_AFTER_ROWS = 10_000;
/** ...and at least this share of the rows the statistics counted. */
export const ANALYZE_AFTER_SHARE = 0.5;

/**
 * Called after an indexing job that added or removed rows (`indexSnapshots`; a job that only
 * changed rows in place does not call it: an upload updating every item re-analyzed the table,
 * 22 calls and 3.2 s of statements per 100,000 items; docs/decisions.md, "Bulk onboarding III").
 * Analyzes search.items when it changed by more than `minRows` rows (default ANALYZE_AFTER_ROWS)
 * and ANALYZE_AFTER_SHARE of its rows since the planner's statistics were taken
 * (`pg_stat_user_tables.n_mod_since_analyze`, against `pg_class.reltuples`); `ANALYZE
 * (SKIP_LOCKED)`, so that a concurrent analyze (another job's, autovacuum's) is not waited for.
 * Search asks those statistics how many rows a condition passes (query.ts: whether to count, what
 * to estimate, which read). After a bulk upload they described the table as it was before, for
 * the minute or two until autovacuum's ANALYZE: under `npm start` after the 266,978-row file,
 * a text's total read "1,001, estimated" and every newest page collected all 286,000 rows
 * (0.3-0.5 s a request). One ANALYZE of the full table takes 0.8-1.6 s (every column; those
 * search plans with alone, ~0.6 s); at 50 % growth a 267,000-row upload onto 19,000 rows runs ~7.
 * @returns whether it analyzed. @throws Error from the database.
 */
export async function refreshStatistics(pool: Pool, minRows = ANALYZE_AFTER_ROWS): Promise<boolean> {
  const { rows: [stats] } = await pool.query<{ changed: number; rows: number }>(
    `SELECT s.n_mod_since_analyze::float8 AS changed, greatest(c.reltuples, 0)::float8 AS rows
       FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.relid = 'search.items'::regclass`);
  if (!stats || stats.changed <= Math.max(minRows, ANALYZE_AFTER_SHARE * stats.rows)) return false;
  await pool.query('ANALYZE (SKIP_LOCKED) search.items');
  return true;
}

const RECORD_COLUMNS = `item_id uuid, item_network text, item_domain text, item_type text, item_state jsonb, item_locations jsonb,
  item_instance_url text, item_schema_url text, created_by text, created_at timestamptz, source_updated_at timestamptz,
  lifecycle_status text, search_text text, content_hash text, geo_cells integer[]`;

function record(p: Prepared) {
  return {
    item_id: p.item.item_id, item_network: p.item.item_network, item_domain: p.item.item_domain, item_type: p.item.item_type,
    item_state: p.item.item_state, item_locations: p.item.item_locations ?? [], item_instance_url: p.item.item_instance_url ?? null,
    item_schema_url: p.item.item_schema_url ?? null, created_by: p.item.created_by ?? null, created_at: p.item.created_at,
    source_updated_at: p.item.updated_at, lifecycle_status: p.item.lifecycle_status, search_text: p.text, content_hash: p.hash,
    geo_cells: geoCells(p.item.item_locations ?? []),
  };
}

/**
 * The written rows' locations (`written` and `d` are CTEs of the same statement): each location
 * upserted at its position, positions beyond the new list removed. Writing them in the statement
 * that writes the rows keeps a chunk's write to one round trip, and the row lock taken by that
 * statement keeps two jobs' locations of one item from interleaving.
 */
const LOCATIONS_SQL = `
  located AS (
    INSERT INTO search.item_locations AS l (item_id, position, lat, lng)
    SELECT w.item_id, e.position - 1, (e.location ->> 'lat')::float8, (e.location ->> 'lng')::float8
      FROM written w JOIN d ON d.item_id = w.item_id,
           jsonb_array_elements(d.item_locations) WITH ORDINALITY AS e(location, position)
    ON CONFLICT (item_id, position) DO UPDATE SET lat = EXCLUDED.lat, lng = EXCLUDED.lng),
  trimmed AS (
    DELETE FROM search.item_locations l USING written w JOIN d ON d.item_id = w.item_id
     WHERE l.item_id = w.item_id AND l.position >= jsonb_array_length(d.item_locations))
  SELECT count(*)::int AS written FROM written`;

/**
 * Writes `items` and their locations in one statement (one round trip: the process that embeds
 * also drives the writes, and every round trip waits for its event loop): with `vectorOf`, the
 * whole row with its new embedding (inserted or replacing an older snapshot); without, everything
 * but the embedding, for rows whose text and model version are unchanged (and only when something
 * changed). Rows a newer snapshot already reached, or retired, are left alone. Every row written
 * joins the tail of pgvector's graph (`ann_gen` = search.ann_tail_gen(), read once a statement as an
 * uncorrelated subquery: nothing is added to the HNSW index as it is written;
 * sql/034_search_pgvector_graph.sql). The grid cells are computed here (geoCells;
 * sql/036_search_cells_written.sql).
 */
async function write(pool: Pool, version: ModelVersion, items: Prepared[], vectorOf: Map<string, Float32Array> | undefined, outcome: IndexOutcome): Promise<void> {
  const embedding = vectorOf && embeddingParam(await backendOf(pool), items.map((p) => vectorOf.get(p.text)!), '$5', '$4');
  const { rows: [{ written }] } = vectorOf && embedding
    ? await pool.query<{ written: number }>(
      `WITH d AS (SELECT * FROM json_to_recordset($1::json) AS d(${RECORD_COLUMNS}, n integer)),
       written AS (
         INSERT INTO search.items AS i (item_id, item_network, item_domain, item_type, item_state, item_locations, item_instance_url,
           item_schema_url, created_by, created_at, source_updated_at, lifecycle_status, search_words, content_hash, geo_cells,
           model_id, model_quantization, model_dimensions, embedding, ann_gen)
         SELECT d.item_id, d.item_network, d.item_domain, d.item_type, d.item_state, d.item_locations, d.item_instance_url,
           d.item_schema_url, d.created_by, d.created_at, d.source_updated_at, d.lifecycle_status, strip(to_tsvector('simple', d.search_text)), d.content_hash,
           d.geo_cells, $2, $3, $4, ${embedding.sql}, (SELECT search.ann_tail_gen())
           FROM d
          WHERE NOT EXISTS (SELECT 1 FROM search.retired_items r WHERE r.item_id = d.item_id)
         ON CONFLICT (item_id) DO UPDATE SET
           item_network = EXCLUDED.item_network, item_domain = EXCLUDED.item_domain, item_type = EXCLUDED.item_type,
           item_state = EXCLUDED.item_state, item_locations = EXCLUDED.item_locations, geo_cells = EXCLUDED.geo_cells,
           item_instance_url = EXCLUDED.item_instance_url,
           item_schema_url = EXCLUDED.item_schema_url, created_by = EXCLUDED.created_by, created_at = EXCLUDED.created_at,
           source_updated_at = EXCLUDED.source_updated_at, lifecycle_status = EXCLUDED.lifecycle_status,
           search_words = EXCLUDED.search_words, content_hash = EXCLUDED.content_hash, model_id = EXCLUDED.model_id,
           model_quantization = EXCLUDED.model_quantization, model_dimensions = EXCLUDED.model_dimensions,
           embedding = EXCLUDED.embedding, ann_gen = EXCLUDED.ann_gen, indexed_at = now(), embedded_at = now()
         WHERE i.source_updated_at <= EXCLUDED.source_updated_at
         RETURNING i.item_id),${LOCATIONS_SQL}`,
      [JSON.stringify(items.map((p, n) => ({ ...record(p), n }))), version.model_id, version.quantization, version.dimensions,
        embedding.value])
    : await pool.query<{ written: number }>(
      `WITH d AS (SELECT * FROM json_to_recordset($1::json) AS d(${RECORD_COLUMNS})),
       written AS (
         UPDATE search.items AS i SET
           item_state = d.item_state, item_locations = d.item_locations, geo_cells = d.geo_cells, item_instance_url = d.item_instance_url,
           item_schema_url = d.item_schema_url, created_by = d.created_by, created_at = d.created_at,
           source_updated_at = d.source_updated_at, lifecycle_status = d.lifecycle_status, ann_gen = (SELECT search.ann_tail_gen()), indexed_at = now()
           FROM d
          WHERE i.item_id = d.item_id AND i.source_updated_at <= d.source_updated_at AND i.content_hash = d.content_hash
            AND i.model_id = $2 AND i.model_quantization = $3 AND i.model_dimensions = $4
            AND (i.item_state, i.item_locations, i.item_instance_url, i.item_schema_url, i.created_by, i.created_at,
                 i.source_updated_at, i.lifecycle_status)
                IS DISTINCT FROM (d.item_state, d.item_locations, d.item_instance_url, d.item_schema_url, d.created_by, d.created_at,
                 d.source_updated_at, d.lifecycle_status)
         RETURNING i.item_id),${LOCATIONS_SQL}`,
      [JSON.stringify(items.map(record)), version.model_id, version.quantization, version.dimensions]);
  outcome.written += written;
  outcome.skipped += items.length - written;
}
