/**
 * Pages reach at most MAX_PAGE_DEPTH (10,000) rows deep (offset + limit), in every order, at the
 * search service (`/v1/search`, `/v1/search/flat`) and at discover (through the search service and
 * natively): a page reaching past it is cut there, one starting past it is empty, meta.total still
 * counts every match, and a deep offset never makes the engine ask its vector index for more rows
 * than that (review of issue 29: `offset: 5000000` walked the whole index for an empty page).
 * 10,010 copies of one stored item, made in SQL, stand for a large scope.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PAGE_DEPTH } from '../../lib/network/page-depth.ts';
import { createSearchEngine, searchEngine, usearchIndexOf } from '../../lib/search/engine.ts';
import { runSearch, VECTOR_MATCH_LIMIT } from '../../lib/search/query.ts';
import { searchBodySchema } from '../../lib/search/request.ts';
import type { VectorIndex } from '../../lib/search/vector-index.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let searchKey: string;
let signalsKey: string;
const COPIES = 10_010;
const TOTAL = COPIES + 1;

const item = {
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name: 'Veterinary Hospital Karora', category: 'Medical', district: 'Kaithal', state: 'Haryana', latitude: 29.6574, longitude: 76.5421 },
  item_locations: [{ lat: 29.6574, lng: 76.5421 }],
};

/** Inserts `n` copies (new ids) of the row `id` of `table`, columns `over` set by SQL expressions of the copy's number `g`. */
async function copyRow(table: 'signals.items' | 'search.items', id: string, n: number, over: Record<string, string> = {}): Promise<void> {
  const [schema, name] = table.split('.');
  const { rows } = await platform.ctx.pool.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns
      WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER' AND identity_generation IS DISTINCT FROM 'ALWAYS'
        AND column_name <> 'item_id' AND coalesce(column_default, '') NOT LIKE 'nextval(%'`, [schema, name]);
  const columns = rows.map((r) => `"${r.column_name}"`);
  const values = rows.map((r) => over[r.column_name] ?? `"${r.column_name}"`);
  await platform.ctx.pool.query(`INSERT INTO ${table} (item_id, ${columns.join(', ')})
    SELECT gen_random_uuid(), ${values.join(', ')} FROM ${table}, generate_series(1, $2) AS g WHERE item_id = $1`, [id, n]);
  await platform.ctx.pool.query(`ANALYZE ${table}`);
}

const context = () => ({ messageId: randomUUID(), networkId: 'local-discovery', domain: 'provider', itemType: 'facility' });
const search = (intent: Record<string, unknown>, pagination: Record<string, unknown>) =>
  request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send({ context: context(), message: { intent, pagination } });
const discover = (body: Record<string, unknown>) => request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', signalsKey)
  .send({ item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', ...body });

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  signalsKey = await platform.apiKey('signals');
  searchKey = await platform.apiKey('search');
  const res = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', signalsKey).send(item);
  expect(res.status).toBe(201);
  await until('the item to be indexed', async () => (await platform.ctx.pool.query('SELECT 1 FROM search.items')).rowCount === 1);
  await copyRow('signals.items', item.item_id, COPIES);
  await copyRow('search.items', item.item_id, COPIES);
  const index = (await usearchIndexOf(platform.ctx))!;
  await until('the vector index to be ready', async () => index.ready());
}, 120_000);
afterAll(() => platform?.stop());

describe('pages at most 10,000 rows deep', () => {
  it('/v1/search and /v1/search/flat cut a page at the 10,000th row, and answer none past it', async () => {
    expect(MAX_PAGE_DEPTH).toBe(10_000);
    for (const intent of [{ sort: 'newest' }, { sort: 'nearest', orderingCenter: { type: 'Point', coordinates: [76.5, 29.6] } }, { textSearch: 'veterinary hospital' }]) {
      // Relevance's cut: below, on the exact path (the copies' vectors are all the same).
      if (!('textSearch' in intent)) {
        const cut = await search(intent, { limit: 10, offset: 9_995 });
        expect(cut.status, JSON.stringify(intent)).toBe(200);
        expect(cut.body.message.items, JSON.stringify(intent)).toHaveLength(5);
        expect(cut.body.message.meta).toMatchObject({ limit: 10, offset: 9_995 });
        expect(cut.body.message.meta.total).toBeGreaterThan(MAX_PAGE_DEPTH);
      }
      for (const offset of [10_000, 5_000_000]) {
        const past = await search(intent, { limit: 10, offset });
        expect(past.status).toBe(200);
        expect(past.body.message.items, `${JSON.stringify(intent)} @${offset}`).toEqual([]);
        expect(past.body.message.meta).toMatchObject({ limit: 10, offset });
        expect(past.body.message.meta.total).toBeGreaterThan(MAX_PAGE_DEPTH);
      }
    }
    const flat = await request(platform.url('search')).post('/v1/search/flat').set('x-api-key', searchKey).send({
      'context.messageId': 'm', 'context.networkId': 'local-discovery', 'context.domain': 'provider', 'context.itemType': 'facility',
      'message.intent.sort': 'newest', 'message.pagination.limit': '20', 'message.pagination.offset': '9990',
    });
    expect(flat.status).toBe(200);
    expect(flat.body.message.items).toHaveLength(10);
  });

  it('ranks no row past the depth, and never asks the vector index for the rows of a page past it', async () => {
    const index = (await usearchIndexOf(platform.ctx))!;
    const asked: number[] = [];
    const spy: VectorIndex = {
      backend: index.backend, ready: () => index.ready(), size: (db) => index.size(db), rebuild: () => index.rebuild(),
      status: () => index.status(), close: async () => {},
      search: (db, vector, k, filter, min) => {
        asked.push(k);
        return index.search(db, vector, k, filter, min);
      },
    };
    const engine = await searchEngine(platform.ctx);
    const parts = { network: engine.network, backend: engine.backend, provider: engine.provider, transaction: engine.transaction };
    const body = (offset: number) => searchBodySchema.parse({ context: context(), message: { intent: { textSearch: 'veterinary hospital' }, pagination: { limit: 10, offset } } });
    // Without an index: every match ranked exactly.
    const cut = await runSearch(createSearchEngine(parts), body(9_995));
    expect(cut.message.meta).toMatchObject({ sort_applied: 'relevance', offset: 9_995 });
    expect(cut.message.items).toHaveLength(5);

    // exactMaxRows 0: every ranking goes through the index; totalExactBound 3: the total is estimated.
    const spied = createSearchEngine({ ...parts, index: spy, exactMaxRows: 0, totalExactBound: 3 });
    const deep = await runSearch(spied, body(5_000_000));
    expect(deep.message.items).toEqual([]);
    expect(deep.message.meta.total).toBeGreaterThan(MAX_PAGE_DEPTH);
    // Only the text's similar items (VECTOR_MATCH_LIMIT), never 5,000,020 rows.
    expect(Math.max(...asked)).toBeLessThanOrEqual(VECTOR_MATCH_LIMIT);
  });

  it('is stated in the OpenAPI documents of /v1/search and discover', async () => {
    const searchDoc = (await request(platform.url('search')).get('/openapi.json')).body;
    const signalsDoc = (await request(platform.url('signals')).get('/openapi.json')).body;
    const schemaOf = (doc: any, path: string) => doc.paths[path].post.requestBody.content['application/json'].schema;
    expect(JSON.stringify(schemaOf(searchDoc, '/v1/search'))).toContain('Rows past the 10,000th (offset + limit) are not returned');
    expect(JSON.stringify(schemaOf(signalsDoc, '/api/v1/network/item/discover'))).toContain('Rows past the 10,000th (offset + limit) are not returned');
  });

  it('discover answers the same through the search service, and natively', async () => {
    const cut = await discover({ sort: 'newest', limit: 10, offset: 9_995 });
    expect(cut.status).toBe(200);
    expect(cut.body.meta).toMatchObject({ source: 'signals_search', limit: 10, offset: 9_995 });
    expect(cut.body.items).toHaveLength(5);
    const past = await discover({ q: 'veterinary', offset: 5_000_000 });
    expect(past.status).toBe(200);
    expect(past.body.items).toEqual([]);

    await platform.services.find((s) => s.name === 'search')!.close();
    for (const body of [{ sort: 'newest' }, { q: 'veterinary hospital' }, { sort: 'nearest', ordering_latitude: 29.6, ordering_longitude: 76.5 }]) {
      const native = await discover({ ...body, limit: 10, offset: 9_995 });
      expect(native.status).toBe(200);
      expect(native.body.meta).toMatchObject({ source: 'native_fallback', total: TOTAL, limit: 10, offset: 9_995 });
      expect(native.body.items, JSON.stringify(body)).toHaveLength(5);
      const none = await discover({ ...body, offset: 5_000_000 });
      expect(none.body.meta).toMatchObject({ source: 'native_fallback', total: TOTAL, offset: 5_000_000 });
      expect(none.body.items).toEqual([]);
    }
  });
});
