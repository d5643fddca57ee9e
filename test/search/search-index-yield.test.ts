/**
 * The usearch index's catch-up yields to searches (issue 32, docs/decisions.md "Search under
 * load"): while searches of the process run or wait (`busy`), it sends the graph's thread one row
 * at most every BUSY_MAX_WAIT_MS, so a bulk upload's vectors trickle in rather than hold the graph
 * and the cores; it never stops, and once the searches are done it catches up the rest at once.
 */
import request from 'supertest';
import { expect, it } from 'vitest';
import { searchEngine } from '../../lib/search/engine.ts';
import { BUSY_MAX_WAIT_MS, openUsearchIndex } from '../../lib/search/usearch-index.ts';
import { startTestPlatform } from '../helpers/platform.ts';
import { healthCentre } from '../helpers/discover-items.ts';
import { until } from '../helpers/until.ts';

it('holds the catch-up back while searches run or wait, and catches up the rest once they are done', async () => {
  const platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  let searching = false;
  // An index of its own (its file apart from the service's), told that people search by the test.
  const idx = openUsearchIndex({
    pool: platform.ctx.pool, logger: platform.ctx.logger, dataDir: `${platform.dataDir}/yield`, version: (await searchEngine(platform.ctx)).provider.version,
    busy: () => searching,
  });
  try {
    const key = await platform.apiKey('signals');
    const live = async () => (await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM search.items WHERE lifecycle_status = 'live'`)).rows[0].n as number;
    const push = async (n: number, from: number) => {
      const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key)
        .send({ items: Array.from({ length: n }, (_, i) => healthCentre(from + i)) });
      expect(res.body.summary.created).toBe(n);
    };
    await push(5, 0);
    await until('5 items indexed', async () => (await live()) === 5);
    await idx.whenSettled();
    await until('the index to hold 5', async () => idx.ready() && (await idx.size(platform.ctx.pool)) === 5);

    // People search without pause: 20 new rows, at most one per BUSY_MAX_WAIT_MS (100 ms) enters.
    searching = true;
    await push(20, 5);
    // From the first new row the catch-up could see (polled every 100 ms: counted from the poll
    // before), not from the last: rows indexed earlier may have entered meanwhile.
    await until('a new item indexed', async () => (await live()) > 5, 30_000);
    const seen = Date.now() - 100;
    await until('25 items indexed', async () => (await live()) === 25, 30_000);
    await new Promise((resolve) => setTimeout(resolve, 10 * BUSY_MAX_WAIT_MS));
    const added = (await idx.size(platform.ctx.pool)) - 5;
    const elapsed = Date.now() - seen;
    expect(added).toBeGreaterThan(0); // slowed, never stopped
    expect(added).toBeLessThanOrEqual(Math.ceil(elapsed / BUSY_MAX_WAIT_MS) + 1);
    expect(added).toBeLessThan(20);

    // The searches end: the rest at once (within a catch-up period or two).
    searching = false;
    await until('the index to hold 25', async () => (await idx.size(platform.ctx.pool)) === 25, 5_000);
  } finally {
    await idx.close();
    await platform.stop();
  }
});
