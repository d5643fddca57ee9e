/**
 * Crash and resume of an upsert (issue 30): the worker process (`ldp worker`) is killed with
 * SIGKILL while an upsert chunk is half done — changed items already pushed to signals, its
 * transaction not committed — then the dead worker's jobs are unlocked (as the platform's live
 * workers do after two minutes; at once here) and a new worker finishes the job. Each change must
 * be applied once: exact counts, one history entry per changed row, every item and participant
 * holding the new value.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { startWorker, type WorkerHandle } from '../../workers/runner.ts';
import { spawnLdp } from '../helpers/cli.ts';
import { createUpload, csv, itemsOf, onboard, participantsOf, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
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

describe('upsert after a worker crash', () => {
  it('applies each change once: the counts, history, participants and items of an uninterrupted run', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const rows = [...generateSeekers({ count: 2000, seed: 11, errorRate: 0, duplicateRate: 0, places: BUILT_IN_PLACES })].map((r) => r.values);
    const file = (skill: string) => csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => (c === 'skills' ? skill : r[c]))));
    worker = await startWorker(platform.ctx);
    const first = await onboard(platform, agg.token, { file: file('tailoring') });
    expect(first).toMatchObject({ status: 'completed', created: 2000 });
    await worker.stop();
    worker = undefined;
    // Its finish refreshed the participants' planner statistics, so that the upsert's key lookups
    // plan on 2,000 rows, not on none: a manual ANALYZE, or autovacuum's if it held the table then
    // (the finish does not wait for it). Not n_mod_since_analyze: a chunk's backend may report its
    // inserts up to a second later.
    await expect.poll(async () => (await platform.ctx.pool.query(
      `SELECT (analyze_count + autoanalyze_count)::int AS n FROM pg_stat_user_tables WHERE relid = 'aggregator.participants'::regclass`)).rows[0].n,
    { timeout: 10_000 }).toBeGreaterThanOrEqual(1);

    // Every row changes its skills: every chunk pushes changed items.
    const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: file('welding'), mode: 'upsert' });
    expect((await startUpload(platform, agg.token, created.body.upload_id)).status).toBe(200);
    const child = spawnLdp(['worker'], {
      DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir, SIGNALS_URL: platform.url('signals'),
      AGGREGATOR_PUBLIC_URL: platform.url('aggregator'), BULK_UPLOAD_CHUNK_ROWS: '200', EMBEDDING_PROVIDER: 'hashing',
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const { pool } = platform.ctx;
    const count = async (sql: string) => (await pool.query<{ n: number }>(sql, [agg.aggregatorId])).rows[0].n;
    // Kill the worker once signals holds changed items whose participants' change has not committed.
    let pushedUncommitted = 0;
    for (let i = 0; ; i++) {
      const { rows: [job] } = await pool.query('SELECT chunks_done, chunk_count FROM aggregator.bulk_uploads WHERE upload_id = $1', [created.body.upload_id]);
      if (job.chunks_done >= 1) {
        const items = await count(`SELECT count(*)::int AS n FROM signals.items WHERE created_by = 'aggregator:' || $1 AND item_state->'skills' ? 'welding'`);
        const participants = await count(`SELECT count(*)::int AS n FROM aggregator.participants WHERE aggregator_id = $1 AND profile->'skills' ? 'welding'`);
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
    await pool.query(`SELECT graphile_worker.force_unlock_workers(ARRAY(
      SELECT DISTINCT locked_by FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL))`);

    worker = await startWorker(platform.ctx);
    const job = await waitForJob(platform, agg.token, created.body.upload_id, 120_000);
    expect(job).toMatchObject({ status: 'completed', total_rows: 2000, passed: 2000, updated: 2000, created: 0, unchanged: 0, failed: 0, skipped: 0 });

    const participants = await participantsOf(platform, agg.aggregatorId);
    expect(participants).toHaveLength(2000);
    expect(participants.every((p) => p.profile.skills.join() === 'welding')).toBe(true);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items).toHaveLength(2000);
    expect(items.every((i) => i.item_state.skills.join() === 'welding')).toBe(true);
    const { rows: history } = await pool.query(
      `SELECT row_number, count(*)::int AS n FROM aggregator.participant_changes WHERE upload_id = $1 GROUP BY 1 HAVING count(*) > 1`, [created.body.upload_id]);
    expect(history).toEqual([]);
    expect(await count(`SELECT count(*)::int AS n FROM aggregator.participant_changes WHERE aggregator_id = $1 AND kind = 'updated'`)).toBe(2000);
  });
});
