/**
 * The search service's in-process vector index closes with the platform: its catch-up stops and
 * the changes it caught up since the last save are written to its file before the pool closes
 * (saves otherwise come at most every 5 minutes), so a restart loads them instead of catching up;
 * a long catch-up (a bulk upload's rows) stops at the close rather than hold it, and the restart
 * catches up the rest.
 */
import { readFile, rm } from 'node:fs/promises';
import request from 'supertest';
import { expect, it } from 'vitest';
import { startPlatform } from '../../bin/platform.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { usearchIndexOf } from '../../lib/search/engine.ts';
import { startTestPlatform } from '../helpers/platform.ts';
import { healthCentre } from '../helpers/discover-items.ts';
import { until } from '../helpers/until.ts';

it('saves what it caught up when the platform stops', async () => {
  const platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  let file: string;
  try {
    const key = await platform.apiKey('signals');
    const push = async (from: number) => {
      const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key)
        .send({ items: Array.from({ length: 10 }, (_, i) => healthCentre(from + i)) });
      expect(res.body.summary.created).toBe(10);
    };
    const index = (await until('the index', () => usearchIndexOf(platform.ctx)))!;
    file = index.file;
    const holds = (n: number) => until(`the index to hold ${n} items`, async () => index.ready() && (await index.size(platform.ctx.pool)) === n);
    await push(0);
    await holds(10);
    await index.save();
    // Caught up after the save: only the close writes these to the file.
    await push(10);
    await holds(20);
    expect(JSON.parse(await readFile(`${file}.json`, 'utf8')).size).toBe(10);
  } finally {
    await platform.stop({ keepDataDir: true });
  }
  try {
    expect(JSON.parse(await readFile(`${file!}.json`, 'utf8')).size).toBe(20);
  } finally {
    await rm(platform.dataDir, { recursive: true, force: true });
  }
});

it('stops a long catch-up when the platform stops, and catches up the rest after a restart', async () => {
  const platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  const total = 3000;
  try {
    const key = await platform.apiKey('signals');
    const index = (await until('the index', () => usearchIndexOf(platform.ctx)))!;
    await until('the index to be ready', () => index.ready());
    for (let from = 0; from < total; from += 500) {
      const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key)
        .send({ items: Array.from({ length: 500 }, (_, i) => healthCentre(from + i)) });
      expect(res.body.summary.created).toBe(500);
    }
    await until('every item indexed', async () =>
      (await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM search.items`)).rows[0].n === total);
    // Whatever the catch-up holds now, stopping does not wait for it to finish.
    await platform.stop({ keepDataDir: true });
    const saved = JSON.parse(await readFile(`${index.file}.json`, 'utf8')) as { size: number };
    expect(saved.size).toBeLessThanOrEqual(total);
  } catch (err) {
    await platform.stop();
    throw err;
  }
  // The same DATA_DIR and database again: the file loads and the catch-up adds what it lacks.
  const again = await startPlatform(platform.config, createLogger('silent'), platform.databaseUrl, { services: ['search'], worker: false });
  try {
    const index = (await until('the index', () => usearchIndexOf(again.ctx)))!;
    await until(`the index to hold ${total} items`, async () => index.ready() && (await index.size(again.ctx.pool)) === total);
  } finally {
    await again.stop();
    await rm(platform.dataDir, { recursive: true, force: true });
  }
});
