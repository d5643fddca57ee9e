/**
 * sql/015_search_f16.sql on an existing install: rows written with `real[]` embeddings under
 * migrations 004 and 011 are converted to half precision — `halfvec` with pgvector (PGlite with
 * pgvector compiled to WASM), a bytea of big-endian binary16 otherwise (PGlite with `cube`, the
 * embedded default's backend) — bit for bit as the search service's own encoder rounds them; then
 * sql/017_search_words.sql stores each row's text as its words, and sql/019_search_geo_cells.sql adds their grid cells;
 * sql/034_search_pgvector_graph.sql puts every row in the first tail of the graph and drops the HNSW
 * indexes kept in step with every write; sql/036_search_cells_written.sql makes the cells a column the
 * indexer writes, keeping the stored ones; searches answer from the converted rows.
 */
import { readFile } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { cube } from '@electric-sql/pglite/contrib/cube';
import { vector } from '@electric-sql/pglite-pgvector';
import { afterAll, describe, expect, it } from 'vitest';
import { cosineSimilarity, createHashingProvider } from '../../lib/search/embeddings/index.ts';
import { createSearchEngine } from '../../lib/search/engine.ts';
import { decodeHalf, roundToHalf } from '../../lib/search/half.ts';
import { contentHash } from '../../lib/search/indexer.ts';
import { loadNetwork } from '../../lib/network/config.ts';
import { runSearch } from '../../lib/search/query.ts';
import { searchBodySchema } from '../../lib/search/request.ts';
import { readVectorBackend, type SqlRunner } from '../../lib/search/vector-backend.ts';
import { buildGeneration, graphIndexName, readGenerations } from '../../lib/search/pgvector-graph.ts';
import { SQL_DIR } from '../../lib/platform/migrate.ts';

const provider = createHashingProvider(0.2);
const NAMES = ['Veterinary Hospital Karora', 'Primary Health Centre Pundri', 'Govt High School Siwan', 'Rice Mill Guhla', 'Bus Stand Cheeka',
  'Milk Collection Centre Kalayat', 'Anganwadi Centre Dhand', 'Post Office Habri', 'Sub Health Centre Kaul', 'Gram Panchayat Office Titram'];
const opened: PGlite[] = [];
afterAll(async () => {
  for (const db of opened) await db.close();
});

async function migrated(extension: 'vector' | 'cube') {
  const db = new PGlite({ extensions: extension === 'vector' ? { vector } : { cube } });
  opened.push(db);
  await db.exec('CREATE SCHEMA search');
  for (const file of ['004_search_index.sql', '011_search_ann.sql']) await db.exec(await readFile(`${SQL_DIR}/${file}`, 'utf8'));
  const rows = await Promise.all(NAMES.map(async (name, i) => {
    const text = `Name: ${name}\nDistrict: Kaithal`;
    return {
      item_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, item_state: { name, category: 'Medical', district: 'Kaithal', state: 'Haryana' },
      created_at: new Date(Date.UTC(2025, 0, 1) + i * 60_000).toISOString(), search_text: text, content_hash: contentHash(text),
      embedding: (await provider.embed([text]))[0],
    };
  }));
  // As written before 015: real[] embeddings (and, with pgvector, the HNSW index on them).
  await db.query(
    `INSERT INTO search.items (item_id, item_network, item_domain, item_type, item_state, created_at, source_updated_at, lifecycle_status,
       search_text, content_hash, model_id, model_quantization, model_dimensions, embedding)
     SELECT item_id, 'local-discovery', 'provider', 'facility', item_state, created_at, created_at, 'live', search_text, content_hash, $2, $3, $4, embedding
       FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid, item_state jsonb, created_at timestamptz, search_text text, content_hash text, embedding real[])`,
    [JSON.stringify(rows.map((r) => ({ ...r, embedding: Array.from(r.embedding) }))), provider.version.model_id, provider.version.quantization, provider.version.dimensions]);
  if (extension === 'vector') {
    await db.exec(`CREATE INDEX items_embedding_hnsw_384 ON search.items USING hnsw ((embedding::vector(384)) vector_cosine_ops)
      WHERE model_dimensions = 384 AND lifecycle_status = 'live'`);
  }
  await db.exec(await readFile(`${SQL_DIR}/015_search_f16.sql`, 'utf8'));
  // 016 changes only the signals schema.
  await db.exec(await readFile(`${SQL_DIR}/017_search_words.sql`, 'utf8'));
  // 018 changes only other schemas.
  await db.exec(await readFile(`${SQL_DIR}/019_search_geo_cells.sql`, 'utf8'));
  if (extension === 'vector') {
    // As lib/search/vector-backend.ts created it at start until issue 31: kept in step with every write.
    await db.exec(`CREATE INDEX items_embedding_hnsw_h384 ON search.items USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
      WHERE model_dimensions = 384 AND lifecycle_status = 'live'`);
  }
  await db.exec(await readFile(`${SQL_DIR}/034_search_pgvector_graph.sql`, 'utf8'));
  await db.exec(await readFile(`${SQL_DIR}/036_search_cells_written.sql`, 'utf8'));
  return { db, rows };
}

describe('migration 015: embeddings to half precision on an existing install', () => {
  for (const [extension, backend, type] of [['vector', 'pgvector', 'halfvec'], ['cube', 'usearch', 'bytea']] as const) {
    it(`converts real[] rows to ${type} (${backend}) as the service rounds them, and searches answer from them`, async () => {
      const { db, rows } = await migrated(extension);
      expect(await readVectorBackend(db)).toBe(backend);
      const { rows: [column] } = await db.query<{ t: string }>(
        `SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = 'search.items'::regclass AND attname = 'embedding'`);
      expect(column.t).toBe(type);
      const { rows: stored } = await db.query<{ item_id: string; e: Uint8Array; a: number[] }>(
        `SELECT item_id::text AS item_id, search.embedding_f16(embedding) AS e, search.embedding_array(embedding) AS a FROM search.items`);
      expect(stored).toHaveLength(rows.length);
      for (const row of rows) {
        const s = stored.find((r) => r.item_id === row.item_id)!;
        const expected = Array.from(roundToHalf(row.embedding));
        expect(Array.from(decodeHalf(s.e))).toEqual(expected);
        expect(s.a.map((x) => Math.fround(Number(x)))).toEqual(expected); // real[] text output: the shortest float4 form
      }
      // 017: the text's words, without positions, in place of the text.
      const { rows: words } = await db.query<{ item_id: string; same: boolean }>(
        `SELECT i.item_id::text AS item_id, i.search_words = strip(to_tsvector('simple', d.search_text)) AS same
           FROM search.items i JOIN jsonb_to_recordset($1::jsonb) AS d(item_id uuid, search_text text) ON d.item_id = i.item_id`,
        [JSON.stringify(rows.map((r) => ({ item_id: r.item_id, search_text: r.search_text })))]);
      expect(words).toHaveLength(rows.length);
      expect(words.every((w) => w.same)).toBe(true);
      // 019: grid cells of the rows' locations (none here), and one GIN index on words and cells.
      const { rows: cells } = await db.query<{ c: number[] }>(`SELECT geo_cells AS c FROM search.items`);
      expect(cells.map((r) => r.c)).toEqual(rows.map(() => []));
      // 036: still there, no longer generated (the indexer writes them).
      const { rows: [generated] } = await db.query<{ g: string }>(
        `SELECT attgenerated AS g FROM pg_attribute WHERE attrelid = 'search.items'::regclass AND attname = 'geo_cells'`);
      expect(generated.g).toBe('');
      const { rows: gin } = await db.query<{ indexname: string }>(`SELECT indexname FROM pg_indexes WHERE schemaname = 'search' AND indexdef LIKE '%gin (search_words%'`);
      expect(gin.map((r) => r.indexname)).toEqual(['items_search_words_cells_idx']);
      // A vector of another length is refused by the new check.
      await expect(db.query(`UPDATE search.items SET embedding = search.embedding_of('{1, 0}') WHERE item_id = $1`, [rows[0].item_id])).rejects.toThrow(/check/);

      if (backend === 'pgvector') {
        const { rows: indexes } = await db.query<{ indexname: string }>(`SELECT indexname FROM pg_indexes WHERE schemaname = 'search' AND indexname LIKE 'items_embedding_hnsw_%'`);
        expect(indexes).toEqual([]);
      }
      // 034: every row in the first tail (generation 1), no graph yet; the search service builds it.
      expect(await readGenerations(db)).toEqual({ graph: 0, tail: 1 });
      const { rows: gens } = await db.query<{ g: number }>(`SELECT DISTINCT ann_gen AS g FROM search.items`);
      expect(gens).toEqual([{ g: 1 }]);
      if (backend === 'pgvector') {
        expect(await buildGeneration(db, 384, { concurrently: false })).toBe(1);
        const { rows: indexes } = await db.query<{ indexname: string }>(`SELECT indexname FROM pg_indexes WHERE schemaname = 'search' AND indexname LIKE 'items_embedding_hnsw_%'`);
        expect(indexes.map((i) => i.indexname)).toEqual([graphIndexName(384, 1)]);
        expect(await readGenerations(db)).toEqual({ graph: 1, tail: 2 });
      }
      const engine = createSearchEngine({
        network: await loadNetwork('local-discovery'), backend, provider, exactMaxRows: 1000,
        transaction: (fn) => db.transaction((tx) => fn(tx as unknown as SqlRunner)),
      });
      const res = await runSearch(engine, searchBodySchema.parse({
        context: { messageId: 'm', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
        message: { intent: { textSearch: 'rice mill guhla' } },
      }));
      const top = res.message.items[0];
      expect(top.item_id).toBe(rows[3].item_id);
      expect(top.score).toBeCloseTo(cosineSimilarity((await provider.embed(['rice mill guhla']))[0], roundToHalf(rows[3].embedding)), 5);
    });
  }
});
