/**
 * The in-process vector index (usearch) of the search service on the embedded PostgreSQL: items
 * stored at signals, indexed by the real search-index-items task, caught up into the index from
 * search.items; the index answers like the exact path, pages stay consistent, retirements and
 * edits reach it, a file of another model version, scalar kind or graph, or a corrupt file, is rebuilt, and so is an index
 * whose first catch-up failed or whose graph thread died.
 */
import { readFile, writeFile } from 'node:fs/promises';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSearchEngine, usearchIndexOf } from '../../lib/search/engine.ts';
import { runSearch, type SearchEngine } from '../../lib/search/query.ts';
import { searchBodySchema } from '../../lib/search/request.ts';
import { GRAPH, openUsearchIndex, SCALAR, type UsearchIndex } from '../../lib/search/usearch-index.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let signalsKey: string;
let index: UsearchIndex;
let annEngine: SearchEngine;
let exactEngine: SearchEngine;
let parts: Parameters<typeof createSearchEngine>[0];

const KINDS = ['Veterinary Hospital', 'Primary Health Centre', 'Govt High School', 'Girls Senior Secondary School', 'Bus Stand',
  'Gram Panchayat Office', 'Milk Collection Centre', 'Anganwadi Centre', 'Rice Mill', 'Sub Health Centre'];
const VILLAGES = ['Karora', 'Rajound', 'Pundri', 'Siwan', 'Guhla', 'Cheeka', 'Kalayat'];
// Ids in the order of `i`, so that the rows lie in the table in that order (the estimate test).
const facility = (i: number) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  item_state: {
    name: `${KINDS[i % KINDS.length]} ${VILLAGES[(i * 3) % VILLAGES.length]}`, category: i % 2 ? 'Medical' : 'Education',
    district: 'Kaithal', state: 'Haryana', latitude: 29.5 + (i % 13) * 0.05, longitude: 76.2 + (i % 11) * 0.05, capacity: i,
  },
  item_locations: [{ lat: 29.5 + (i % 13) * 0.05, lng: 76.2 + (i % 11) * 0.05 }],
});
const items = Array.from({ length: 120 }, (_, i) => facility(i));

const liveRows = async () => (await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM search.items WHERE lifecycle_status = 'live'`)).rows[0].n as number;
/** Waits until the index holds every live row (the catch-up has run past the last write). */
const caughtUp = async (idx: UsearchIndex = index) => until('the index to catch up', async () => idx.ready() && (await idx.size(platform.ctx.pool)) === await liveRows());

const body = (intent: Record<string, unknown>, pagination: Record<string, unknown> = {}) => searchBodySchema.parse({
  context: { messageId: 'm', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
  message: { intent, pagination },
});

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  signalsKey = await platform.apiKey('signals');
  const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items });
  expect(res.body.summary.created).toBe(items.length);
  await until('items to be indexed', async () => (await liveRows()) === items.length);
  // Statistics taken now, not by autovacuum at some moment of a test: estimated totals come from
  // the planner's estimates, and the estimate test compares those of searches made one after another.
  await platform.ctx.pool.query('ANALYZE search.items, search.item_locations');
  index = (await usearchIndexOf(platform.ctx))!;
  await caughtUp();
  const engine = await import('../../lib/search/engine.ts').then((m) => m.searchEngine(platform.ctx));
  parts = { network: engine.network, backend: engine.backend, provider: engine.provider, transaction: engine.transaction };
  // exactMaxRows 0: every search goes through the index, however few the rows.
  annEngine = createSearchEngine({ ...parts, index, exactMaxRows: 0 });
  exactEngine = createSearchEngine({ ...parts });
});
afterAll(() => platform?.stop());

const CASES: [string, Record<string, unknown>, Record<string, unknown>?][] = [
  ['text', { textSearch: 'veternary hospital' }],
  ['text with a filter', { textSearch: 'grils school', filters: [{ op: 'gte', target: 'item_state.capacity', value: 60 }] }],
  ['anchor', { item: { id: items[5].item_id } }],
  ['anchor narrowed by text', { item: { id: items[5].item_id }, textSearch: 'centre' }],
  ['text within a radius', { textSearch: 'milk', spatial: [{ op: 's_dwithin', geometry: { type: 'Point', coordinates: [76.4, 29.7] }, distanceMeters: 20_000 }] }],
  ['a deep page', { textSearch: 'school' }, { limit: 5, offset: 10 }],
];

describe('in-process vector index (usearch)', () => {
  it('is reported by /ready with its state, size and file', async () => {
    const res = await request(platform.url('search')).get('/ready');
    expect(res.body.checks.vector_backend).toMatchObject({ ok: true, backend: 'usearch', state: 'ready', size: items.length });
    expect(res.body.checks.vector_backend.file).toContain(platform.dataDir);
  });

  for (const [label, intent, pagination] of CASES) {
    it(`answers like the exact path: ${label}`, async () => {
      const [a, b] = [await runSearch(annEngine, body(intent, pagination)), await runSearch(exactEngine, body(intent, pagination))];
      expect(a.message.meta).toEqual(b.message.meta);
      expect(a.message.meta.total).toBeGreaterThan(0);
      expect(a.message.items.map((i) => i.item_id)).toEqual(b.message.items.map((i) => i.item_id));
      a.message.items.forEach((item, n) => expect(item.score).toBeCloseTo(b.message.items[n].score!, 6));
    });
  }

  it('reads a text search\'s matches within places by cells, text-first, hashed or place-first with the same answers', async () => {
    const near = (lng: number, lat: number, distanceMeters: number) => ({ op: 's_dwithin', geometry: { type: 'Point', coordinates: [lng, lat] }, distanceMeters });
    const searches: [Record<string, unknown>, Record<string, unknown>?][] = [
      [{ textSearch: 'school', spatial: [near(76.4, 29.7, 20_000)] }],
      [{ textSearch: 'health centre', filters: [{ op: 'neq', target: 'item_state.category', value: 'Education' }], spatial: [near(76.3, 29.6, 30_000)], sort: 'nearest' }],
      [{ textSearch: 'bus stand', spatial: [near(76.4, 29.7, 40_000), near(76.6, 29.9, 25_000)], sort: 'newest' }, { limit: 3, offset: 2 }],
      [{ textSearch: 'centre', item: { id: items[7].item_id }, spatial: [near(76.5, 29.8, 50_000)] }, { limit: 4 }],
      [{ textSearch: 'zqxj', spatial: [near(76.4, 29.7, 20_000)] }],
    ];
    for (const totalExactBound of [1000, 3]) {
      const engines = (['cells', 'text-first', 'hashed', 'place-first'] as const).map((placeRead) => createSearchEngine({ ...parts, placeRead, totalExactBound }));
      for (const [intent, pagination] of searches) {
        const expected = await runSearch(createSearchEngine({ ...parts, totalExactBound }), body(intent, pagination));
        if (intent.textSearch !== 'zqxj') expect(expected.message.meta.total, JSON.stringify(intent)).toBeGreaterThan(0);
        for (const engine of engines) {
          const got = (await runSearch(engine, body(intent, pagination))).message;
          const label = `${engine.placeRead} ${JSON.stringify(intent)}`;
          if (!expected.message.meta.total_estimated) {
            expect(got, label).toEqual(expected.message);
            continue;
          }
          // Past the bound the total is extrapolated from where the rows read lay in the table, so
          // it depends on the order they were read in (lib/search/query.ts boundedCount): flagged
          // and over the bound whichever way, the rest of the answer the same.
          expect(got.meta.total_estimated, label).toBe(true);
          expect(got.meta.total, label).toBeGreaterThan(totalExactBound);
          expect({ ...got, meta: { ...got.meta, total: expected.message.meta.total } }, label).toEqual(expected.message);
        }
      }
    }
    // Past the exact bound the total is an estimate, flagged, whichever way the matches are read.
    const wide = await runSearch(createSearchEngine({ ...parts, placeRead: 'place-first', totalExactBound: 3 }), body(searches[0][0]));
    expect(wide.message.meta.total_estimated).toBe(true);
  });

  it('counts a text\'s matches past the exact bound once, then answers the same estimate without reading them again', async () => {
    // Bounded counts (up to the bound + 1 rows, with or without their ids) run on the engine's
    // connection: counted here. Without index scans, as on a table of real size, where the words'
    // GIN index is read through a bitmap (in the table's order): 120 rows make walking a btree cheaper.
    let counts = 0;
    const engine = createSearchEngine({
      ...parts, totalExactBound: 3,
      transaction: (fn) => parts.transaction(async (db) => {
        await db.query('SET enable_indexscan = off');
        try {
          return await fn({
            query: (sql, params) => {
              if (/FROM \(SELECT i\.item_id, i\.ctid FROM search\.items i WHERE [\s\S]* LIMIT 4\) s$/.test(sql)) counts++;
              return db.query(sql, params);
            },
          });
        } finally {
          await db.query('RESET enable_indexscan');
        }
      }),
    });
    const { rows: [{ n: lexical }] } = await platform.ctx.pool.query(
      `SELECT count(*)::int AS n FROM search.items WHERE lifecycle_status = 'live' AND search_words @@ to_tsquery('simple', 'veterinary & hospital')`);
    expect(lexical).toBeGreaterThan(3);
    const first = await runSearch(engine, body({ textSearch: 'veterinary hospital' }));
    expect(first.message.meta).toMatchObject({ total_estimated: true });
    expect(counts).toBe(1); // the planner's estimate did not answer alone: the count read past the bound
    // Estimated from where the 4 rows counted lie in the table (every tenth row: the fourth in
    // the first quarter of its pages), not the bound + 1 (the planner estimates the two words at ~1 row).
    expect(first.message.meta.total).toBeGreaterThanOrEqual(lexical * 0.75);
    expect(first.message.meta.total).toBeLessThanOrEqual(lexical * 1.5);
    for (const pagination of [{}, { limit: 5, offset: 5 }]) {
      const again = await runSearch(engine, body({ textSearch: 'veterinary hospital' }, pagination));
      expect(again.message.meta.total).toBe(first.message.meta.total);
      expect(again.message.meta.total_estimated).toBe(true);
      expect(again.message.items.length).toBeGreaterThan(0);
    }
    expect(counts).toBe(1);
    // A total within the bound is counted every time (a write shows at once).
    for (let i = 0; i < 2; i++) {
      const { message } = await runSearch(engine, body({ textSearch: 'zqxj' }));
      expect(message.meta).toMatchObject({ total: 0 });
      expect(message.meta.total_estimated).toBeUndefined();
    }
    expect(counts).toBe(3);
  });

  it('counts and cuts pages in newest or nearest order without text in one read, as SQL over the rows answers', async () => {
    // The reference: every row passing the conditions, read from search.item_locations, in the spec's order.
    const reference = async (where: string, centre?: { lat: number; lng: number }) => (await platform.ctx.pool.query<{ id: string; d: number | null }>(
      `SELECT i.item_id::text AS id, ${centre ? `(SELECT min(search.distance_m(${centre.lat}, ${centre.lng}, l.lat, l.lng))
          FROM search.item_locations l WHERE l.item_id = i.item_id)` : 'NULL::float8'} AS d
         FROM search.items i WHERE i.lifecycle_status = 'live' AND ${where} ORDER BY d ASC NULLS LAST, i.created_at DESC, i.item_id DESC`)).rows;
    const within = `EXISTS (SELECT 1 FROM search.item_locations l WHERE l.item_id = i.item_id AND search.distance_m(29.7, 76.4, l.lat, l.lng) <= 20000)`;
    const cases: [Record<string, unknown>, string, { lat: number; lng: number }?][] = [
      [{ filters: [{ op: 'gte', target: 'item_state.capacity', value: 60 }, { op: 'eq', target: 'item_state.category', value: 'Medical' }] },
        `(i.item_state->>'capacity')::int >= 60 AND i.item_state->>'category' = 'Medical'`],
      [{ spatial: [{ op: 's_dwithin', geometry: { type: 'Point', coordinates: [76.4, 29.7] }, distanceMeters: 20_000 }] }, within, { lat: 29.7, lng: 76.4 }],
      [{ spatial: [{ op: 's_dwithin', geometry: { type: 'Point', coordinates: [76.4, 29.7] }, distanceMeters: 20_000 }], sort: 'newest' }, within],
    ];
    for (const [intent, where, centre] of cases) {
      const rows = await reference(where, centre);
      expect(rows.length, JSON.stringify(intent)).toBeGreaterThan(5);
      for (const totalExactBound of [1000, 3]) {
        for (const [limit, offset] of [[4, 0], [4, 3], [20, rows.length - 2], [5, rows.length + 1]]) {
          const { message } = await runSearch(createSearchEngine({ ...parts, totalExactBound }), body(intent, { limit, offset }));
          const label = `${JSON.stringify(intent)} bound ${totalExactBound} page ${limit}@${offset}`;
          // Exact within the bound; past it, exact when the matches were collected, else a flagged estimate.
          if (rows.length <= totalExactBound || !message.meta.total_estimated) expect(message.meta, label).toMatchObject({ total: rows.length, limit, offset });
          else expect(rows.length, label).toBeGreaterThan(totalExactBound);
          const page = rows.slice(offset, offset + limit);
          expect(message.items.map((i) => i.item_id), label).toEqual(page.map((r) => r.id));
          if (centre) expect(message.items.map((i) => i.distanceMeters), label).toEqual(page.map((r) => r.d));
        }
      }
    }
  });

  it('gives consistent pages through the index: no duplicates or gaps, ties newest first', async () => {
    const all = await runSearch(annEngine, body({ textSearch: 'health centre' }, { limit: 100 }));
    const pages = [];
    for (let offset = 0; offset < all.message.items.length; offset += 7) {
      pages.push(...(await runSearch(annEngine, body({ textSearch: 'health centre' }, { limit: 7, offset }))).message.items);
    }
    expect(pages.map((i) => i.item_id)).toEqual(all.message.items.map((i) => i.item_id));
    expect(new Set(pages.map((i) => i.item_id)).size).toBe(pages.length);
    for (let n = 1; n < pages.length; n++) {
      const [a, b] = [pages[n - 1], pages[n]];
      expect(a.score! > b.score! || (a.score === b.score && a.created_at >= b.created_at)).toBe(true);
    }
  });

  it('catches up with edits and retirements written after it was built', async () => {
    const edited = { ...items[0], item_state: { ...items[0].item_state, name: 'Zoological Research Station' } };
    expect((await request(platform.url('signals')).put(`/api/v1/items/${edited.item_id}`).set('x-api-key', signalsKey).send(edited)).status).toBe(200);
    const retired = items[1].item_id;
    expect((await request(platform.url('signals')).post(`/api/v1/items/${retired}/lifecycle`).set('x-api-key', signalsKey)
      .send({ lifecycle_status: 'retired' })).status).toBe(200);
    await until('signals changes to be indexed', async () => (await liveRows()) === items.length - 1
      && (await platform.ctx.pool.query(`SELECT 1 FROM search.items WHERE search_words @@ 'zoological'::tsquery`)).rows.length);
    await caughtUp();
    const zoo = await runSearch(annEngine, body({ textSearch: 'zoological research' }));
    expect(zoo.message.items[0].item_id).toBe(edited.item_id);
    expect(zoo.message.items[0].score).toBeGreaterThan(0.4);
    const anchor = await runSearch(annEngine, body({ item: { id: items[11].item_id } }, { limit: 100 }));
    expect(anchor.message.items.map((i) => i.item_id)).not.toContain(retired);
    expect(anchor.message.meta.total).toBe(items.length - 2);
  });

  it('finds a rewritten vector through the index alone once caught up (a misspelling: no lexical match)', async () => {
    const { indexSnapshots } = await import('../../lib/search/indexer.ts');
    const item = items[20];
    const word = 'zqkwvbmtra';
    const { rows: [row] } = await platform.ctx.pool.query(`SELECT to_char(source_updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM search.items WHERE item_id = $1`, [item.item_id]);
    const snapshot = {
      ...item, item_state: { name: `${word} ${word}` }, item_instance_url: null, item_schema_url: null, created_by: null,
      created_at: row.at, updated_at: new Date(Date.parse(row.at) + 1000).toISOString(), lifecycle_status: 'live' as const,
    };
    expect((await indexSnapshots(platform.ctx, annEngine.provider, [snapshot])).written).toBe(1);
    await index.catchUp();
    const found = await runSearch(annEngine, body({ textSearch: 'zqkwvbmtrx' }));
    expect(found.message.items[0]?.item_id).toBe(item.item_id);
  });

  it('rebuilds from search.items when the file is of another model version, scalar kind or graph, or corrupt, and answers exactly meanwhile', async () => {
    await index.catchUp();
    await index.save();
    const metaFile = `${index.file}.json`;
    const meta = JSON.parse(await readFile(metaFile, 'utf8'));
    expect(meta.size).toBe(await liveRows());
    const open = () => openUsearchIndex({ pool: platform.ctx.pool, logger: platform.ctx.logger, dataDir: platform.dataDir, version: (annEngine.provider.version) });

    // The file as saved loads as is, and answers with the stored vectors read beside it (the file
    // holds the graph's bf16 vectors only): the same pages and scores as the exact path.
    const reopened = open();
    await reopened.whenSettled();
    expect(reopened.status()).toMatchObject({ state: 'ready' });
    expect(reopened.status().build_seconds).toBeUndefined();
    const loaded = createSearchEngine({ ...annEngine, index: reopened, exactMaxRows: 0 });
    for (const intent of [{ textSearch: 'veternary hospital' }, { item: { id: items[7].item_id } }]) {
      const [a, b] = [await runSearch(loaded, body(intent)), await runSearch(exactEngine, body(intent))];
      expect(a.message.items.map((i) => [i.item_id, i.score])).toEqual(b.message.items.map((i) => [i.item_id, i.score]));
    }
    // Through the index alone (no exact path behind it): every candidate has its vector.
    const vector = await annEngine.embedText('rice mill');
    const { found } = await reopened.search(platform.ctx.pool, vector, 10, { where: `i.lifecycle_status = 'live'`, params: [] });
    expect(found).toHaveLength(10);
    expect(found[0].similarity).toBeGreaterThan(0.5);
    await reopened.close();

    await writeFile(metaFile, JSON.stringify({ ...meta, model: { ...meta.model, model_id: 'another-model' } }));
    const afterModelChange = open();
    // Not ready yet: the engine takes the exact path and still answers.
    const meanwhile = createSearchEngine({ ...annEngine, index: afterModelChange, exactMaxRows: 0 });
    expect((await runSearch(meanwhile, body({ textSearch: 'rice mill' }))).message.meta.total).toBeGreaterThan(0);
    await afterModelChange.whenSettled();
    expect(afterModelChange.status()).toMatchObject({ state: 'ready', size: await liveRows() });
    expect(afterModelChange.status().build_seconds).toBeDefined();
    expect(JSON.parse(await readFile(metaFile, 'utf8')).model.model_id).toBe(meta.model.model_id);
    await afterModelChange.close();

    // A file written before the graph's scalar kind was recorded (an f16 graph) is rebuilt as SCALAR.
    const { scalar, ...earlier } = JSON.parse(await readFile(metaFile, 'utf8'));
    expect(scalar).toBe(SCALAR);
    await writeFile(metaFile, JSON.stringify(earlier));
    const afterScalarChange = open();
    await afterScalarChange.whenSettled();
    expect(afterScalarChange.status()).toMatchObject({ state: 'ready', size: await liveRows() });
    expect(afterScalarChange.status().build_seconds).toBeDefined();
    expect(JSON.parse(await readFile(metaFile, 'utf8')).scalar).toBe(SCALAR);
    await afterScalarChange.close();

    // A graph built with other settings (here: a file written before they were recorded, 16 links
    // and 128 candidates while adding) is rebuilt with GRAPH's.
    const { graph, ...ungraphed } = JSON.parse(await readFile(metaFile, 'utf8'));
    expect(graph).toEqual(GRAPH);
    await writeFile(metaFile, JSON.stringify(ungraphed));
    const afterGraphChange = open();
    await afterGraphChange.whenSettled();
    expect(afterGraphChange.status()).toMatchObject({ state: 'ready', size: await liveRows() });
    expect(afterGraphChange.status().build_seconds).toBeDefined();
    expect(JSON.parse(await readFile(metaFile, 'utf8')).graph).toEqual(GRAPH);
    await afterGraphChange.close();

    await writeFile(index.file, Buffer.alloc(4096, 7));
    const afterCorruption = open();
    await afterCorruption.whenSettled();
    expect(afterCorruption.status()).toMatchObject({ state: 'ready', size: await liveRows() });
    expect(afterCorruption.status().build_seconds).toBeDefined();
    const engine = createSearchEngine({ ...annEngine, index: afterCorruption, exactMaxRows: 0 });
    const [a, b] = [await runSearch(engine, body({ textSearch: 'primary health' })), await runSearch(exactEngine, body({ textSearch: 'primary health' }))];
    expect(a.message.items.map((i) => i.item_id)).toEqual(b.message.items.map((i) => i.item_id));
    await afterCorruption.close();
  });

  it('answers exactly when its first catch-up fails, then rebuilds itself and serves again', async () => {
    // The real pool, whose first catch-up read of retirements fails (as on a dropped connection).
    let failures = 1;
    const pool = {
      query: (sql: string, params?: unknown[]) => (sql.includes('FROM search.ann_removals') && failures-- > 0
        ? Promise.reject(new Error('Connection terminated unexpectedly')) : platform.ctx.pool.query(sql, params)),
    };
    const flaky = openUsearchIndex({ pool: pool as never, logger: platform.ctx.logger, dataDir: platform.dataDir, version: annEngine.provider.version, retryMs: 50 });
    await flaky.whenSettled();
    expect(flaky.status()).toMatchObject({ state: 'failed' });
    expect(flaky.ready()).toBe(false);
    const engine = createSearchEngine({ ...annEngine, index: flaky, exactMaxRows: 0 });
    const exact = await runSearch(exactEngine, body({ textSearch: 'rice mill' }));
    expect((await runSearch(engine, body({ textSearch: 'rice mill' }))).message).toEqual(exact.message);
    await until('the index to rebuild after the failure', async () => flaky.ready());
    expect(flaky.status()).toMatchObject({ state: 'ready', size: await liveRows() });
    expect(flaky.status().build_seconds).toBeDefined();
    expect((await runSearch(engine, body({ textSearch: 'rice mill' }))).message.items.map((i) => i.item_id))
      .toEqual(exact.message.items.map((i) => i.item_id));
    await flaky.close();
  });

  it('answers exactly when its graph thread dies, then rebuilds itself in a new thread', async () => {
    const threads: import('node:worker_threads').Worker[] = [];
    const idx = openUsearchIndex({ pool: platform.ctx.pool, logger: platform.ctx.logger, dataDir: platform.dataDir, version: annEngine.provider.version,
      retryMs: 50, onThread: (t) => threads.push(t) });
    await idx.whenSettled();
    expect(idx.ready()).toBe(true);
    await threads[0].terminate();
    expect(idx.ready()).toBe(false);
    // Neither a direct search nor a search through the engine hangs: incomplete, then the exact path.
    const vector = await annEngine.embedText('rice mill');
    expect(await idx.search(platform.ctx.pool, vector, 10, { where: `i.lifecycle_status = 'live'`, params: [] })).toEqual({ found: [], complete: false });
    const engine = createSearchEngine({ ...annEngine, index: idx, exactMaxRows: 0 });
    const exact = await runSearch(exactEngine, body({ textSearch: 'rice mill' }));
    expect((await runSearch(engine, body({ textSearch: 'rice mill' }))).message).toEqual(exact.message);
    await until('the index to rebuild in a new thread', async () => idx.ready());
    expect(threads).toHaveLength(2);
    expect(idx.status()).toMatchObject({ state: 'ready', size: await liveRows() });
    expect((await runSearch(engine, body({ textSearch: 'rice mill' }))).message.items.map((i) => i.item_id))
      .toEqual(exact.message.items.map((i) => i.item_id));
    await idx.close();
  });

  // Last: it adds 700 items.
  it('fills deep pages like the exact path when many identical vectors leave part of the graph unreachable', async () => {
    // 700 items of one text: identical vectors fill each other's links, so the graph cannot reach
    // every vector (measured: 568-734 keys of 900 for 800 asked) and answered fewer keys than asked,
    // which the index took for "every candidate seen": pages past them came back short or empty.
    const before = await liveRows();
    const same = Array.from({ length: 700 }, (_, n) => ({ ...facility(1000 + n), item_state: { ...facility(0).item_state, name: 'Community Hall Siwan', capacity: 7 } }));
    for (let n = 0; n < same.length; n += 100) {
      const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items: same.slice(n, n + 100) });
      expect(res.body.summary.created).toBe(100);
    }
    await until('the items to be indexed', async () => (await liveRows()) === before + same.length);
    await caughtUp();
    const anchor = { item: { id: items[5].item_id } };
    const total = (await runSearch(exactEngine, body(anchor))).message.meta.total;
    // Pages whose depth + 100 candidates exceed what the graph reaches (up to ~600-800 of ~820 here):
    // before, empty. Shallower pages are as approximate as any page through the index.
    for (const offset of [720, 780, total - 10]) {
      const [a, b] = [await runSearch(annEngine, body(anchor, { limit: 20, offset })), await runSearch(exactEngine, body(anchor, { limit: 20, offset }))];
      expect(a.message.meta, `offset ${offset}`).toEqual(b.message.meta);
      // Identical vectors tie: their order is not compared, their scores are.
      expect(a.message.items.map((i) => i.score), `offset ${offset}`).toEqual(b.message.items.map((i) => i.score));
      expect(b.message.items.length, `offset ${offset}`).toBeGreaterThan(0);
    }
    // The graph (under WHOLE_GRAPH_MAX vectors) is asked for all of them; those it cannot reach are
    // added from the stored vectors, so the index alone ranks every row, closest first.
    const rows = await liveRows();
    const { found } = await index.search(platform.ctx.pool, await annEngine.embedText('Community Hall Siwan'), rows, { where: `i.lifecycle_status = 'live'`, params: [] });
    expect(found).toHaveLength(rows);
    const similarities = found.map((f) => f.similarity);
    expect(similarities).toEqual([...similarities].sort((a, b) => b - a));
    // The 700 identical vectors first, tied.
    expect(new Set(similarities.slice(0, same.length)).size).toBe(1);
    expect(similarities[same.length]).toBeLessThan(similarities[0]);
  });
});

