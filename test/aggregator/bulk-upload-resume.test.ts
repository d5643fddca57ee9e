/**
 * Crash and resume: the worker process (`ldp worker`) is killed with SIGKILL while a chunk is
 * half done — items already pushed to signals, its transaction not committed — then the jobs of
 * the dead worker are unlocked (what graphile-worker does for a crashed worker after its lock
 * timeout, done at once here with `force_unlock_workers`) and a new worker finishes the job.
 * The outcome must be the one an uninterrupted run gives: same counts, each passed row one
 * participant and one item.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { startWorker, type WorkerHandle } from '../../workers/runner.ts';
import { spawnLdp } from '../helpers/cli.ts';
import { createUpload, csv, itemsOf, participantsOf, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let worker: WorkerHandle | undefined;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'], env: { BULK_UPLOAD_CHUNK_ROWS: '200' } });
});
afterAll(async () => {
  await worker?.stop();
  await platform.stop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('bulk upload after a worker crash', () => {
  it('redoes only the interrupted chunks and ends with the counts, participants and items of an uninterrupted run', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const rows = [...generateSeekers({ count: 3000, seed: 7, errorRate: 0.05, duplicateRate: 0.03, places: BUILT_IN_PLACES })];
    const expected = { valid: 0, error: 0, duplicate: 0 };
    for (const r of rows) expected[r.kind]++;
    const created = await createUpload(platform, agg.token, {
      participantType: 'seeker', file: csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c]))),
    });
    expect((await startUpload(platform, agg.token, created.body.upload_id)).status).toBe(200);

    const child = spawnLdp(['worker'], {
      DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir, SIGNALS_URL: platform.url('signals'),
      AGGREGATOR_PUBLIC_URL: platform.url('aggregator'), BULK_UPLOAD_CHUNK_ROWS: '200', EMBEDDING_PROVIDER: 'hashing',
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const { pool } = platform.ctx;
    const count = async (sql: string) => (await pool.query<{ n: number }>(sql, [agg.aggregatorId])).rows[0].n;
    // Kill the worker once a chunk has pushed items whose transaction has not committed yet.
    let pushedUncommitted = 0;
    for (let i = 0; ; i++) {
      const { rows: [job] } = await pool.query('SELECT chunks_done, chunk_count FROM aggregator.bulk_uploads WHERE upload_id = $1', [created.body.upload_id]);
      if (job.chunks_done >= 1) {
        const items = await count(`SELECT count(*)::int AS n FROM signals.items WHERE created_by = 'aggregator:' || $1`);
        const participants = await count('SELECT count(*)::int AS n FROM aggregator.participants WHERE aggregator_id = $1');
        if (items > participants) {
          child.kill('SIGKILL');
          pushedUncommitted = items - participants;
          break;
        }
      }
      if (job.chunk_count !== null && job.chunks_done === job.chunk_count) throw new Error('the job finished before the worker could be killed mid-chunk');
      if (i > 3000) throw new Error('no chunk was caught mid-push');
      await sleep(5);
    }
    await exited;
    expect(pushedUncommitted).toBeGreaterThan(0);

    const during = await pool.query('SELECT status, passed, failed, skipped, chunks_done, chunk_count FROM aggregator.bulk_uploads WHERE upload_id = $1', [created.body.upload_id]);
    expect(during.rows[0].status).toBe('running');
    expect(during.rows[0].chunks_done).toBeLessThan(during.rows[0].chunk_count);
    await pool.query(`SELECT graphile_worker.force_unlock_workers(ARRAY(
      SELECT DISTINCT locked_by FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL))`);

    worker = await startWorker(platform.ctx);
    const job = await waitForJob(platform, agg.token, created.body.upload_id, 120_000);
    expect(job).toMatchObject({ status: 'completed', total_rows: 3000, passed: expected.valid, failed: expected.error, skipped: expected.duplicate });

    const participants = await participantsOf(platform, agg.aggregatorId);
    expect(participants).toHaveLength(expected.valid);
    expect(new Set(participants.map((p) => p.row_number)).size).toBe(expected.valid);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.map((i) => i.item_id).sort()).toEqual(participants.map((p) => p.participant_id).sort());
    const { rows: [outcomes] } = await pool.query('SELECT count(*)::int AS n FROM aggregator.bulk_upload_rows WHERE upload_id = $1', [created.body.upload_id]);
    expect(outcomes.n).toBe(expected.error + expected.duplicate);
  });
});
