/**
 * Crash drill (issue 15): signals fails the bulk push three times, then takes it. Between the
 * worker (`ldp worker`, its own process) and signals sits a real HTTP proxy of this test: the first
 * two pushes are answered 503 without reaching signals; the third reaches signals, which stores the
 * items, but its answer is lost (502) — the worker cannot tell the items arrived; the fourth goes
 * through. graphile-worker retries the chunk each time (its backoff is cut short here by moving
 * the retry's run_at to now). Each item must arrive once: one item per passed row, no duplicate,
 * the counts of an undisturbed run.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnLdp, stopChild } from '../helpers/cli.ts';
import { createUpload, csv, itemsOf, participantsOf, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let proxy: http.Server;
const pushes: ('refused' | 'answer lost' | 'forwarded')[] = [];

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'] });
  const target = platform.url('signals');
  proxy = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const isPush = req.method === 'POST' && /\/items/.test(req.url ?? '');
    const n = isPush ? pushes.length : -1;
    if (isPush && n < 2) {
      pushes.push('refused');
      res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'unavailable', message: 'drill: signals is down' }));
      return;
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !['host', 'content-length', 'connection'].includes(k)) as [string, string][]);
    const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
    const body = Buffer.from(await answer.arrayBuffer());
    if (isPush && n === 2) {
      pushes.push('answer lost');
      res.writeHead(502).end('drill: the answer was lost');
      return;
    }
    if (isPush) pushes.push('forwarded');
    res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
}, 60_000);
afterAll(async () => {
  await new Promise((resolve) => proxy?.close(resolve));
  await platform?.stop();
});

describe('a signals push that fails three times, then succeeds', () => {
  it('delivers each item once, with the counts of an undisturbed run', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const rows = [
      ['Anil Kumar Sahoo', '9861200001', 'Odisha'], ['Bina Pani Das', '9861200002', 'Odisha'], ['Chitra Lekha Nayak', '9861200003', 'Odisha'],
      ['Dinesh Behera', '12', 'Odisha'], ['Esha Mohanty', '9861200001', 'Odisha'],
    ];
    const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(['name', 'phone', 'state'], rows) });
    expect((await startUpload(platform, agg.token, created.body.upload_id)).status).toBe(200);

    const { port } = proxy.address() as AddressInfo;
    const child = spawnLdp(['worker'], {
      DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir, SIGNALS_URL: `http://127.0.0.1:${port}`,
      AGGREGATOR_PUBLIC_URL: platform.url('aggregator'), EMBEDDING_PROVIDER: 'hashing',
    });
    try {
      // Cut graphile-worker's backoff (e^attempts seconds) short: a failed chunk is due again at once.
      const { pool } = platform.ctx;
      const deadline = Date.now() + 90_000;
      let job;
      for (;;) {
        await pool.query(`UPDATE graphile_worker._private_jobs SET run_at = now()
          WHERE task_id = (SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'bulk-upload-chunk') AND attempts > 0 AND locked_at IS NULL AND run_at > now()`);
        const { rows: [state] } = await pool.query('SELECT status FROM aggregator.bulk_uploads WHERE upload_id = $1', [created.body.upload_id]);
        if (state.status !== 'running') {
          job = await waitForJob(platform, agg.token, created.body.upload_id);
          break;
        }
        if (Date.now() > deadline) throw new Error(`bulk upload still running; pushes so far: ${pushes.join(', ')}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(pushes).toEqual(['refused', 'refused', 'answer lost', 'forwarded']);
      expect(job).toMatchObject({ status: 'completed', total_rows: 5, passed: 3, failed: 1, skipped: 1 });
      const participants = await participantsOf(platform, agg.aggregatorId);
      expect(participants).toHaveLength(3);
      const items = await itemsOf(platform, agg.aggregatorId);
      expect(items.map((i) => i.item_id).sort()).toEqual(participants.map((p) => p.participant_id).sort());
      // The lost answer's items were stored then; the retry left them as they were (signals: unchanged).
      const { rows: versions } = await platform.ctx.pool.query(
        `SELECT count(*)::int AS n FROM signals.items WHERE created_by = 'aggregator:' || $1`, [agg.aggregatorId]);
      expect(versions[0].n).toBe(3);
    } finally {
      await stopChild(child);
    }
  }, 120_000);
});
