import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Task } from 'graphile-worker';
import { enqueue } from '../../lib/platform/jobs.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { workerAlive } from '../../workers/heartbeat.ts';
import { startWorker } from '../../workers/runner.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
beforeAll(async () => {
  platform = await startTestPlatform({ services: [] });
});
afterAll(() => platform.stop());

const jobs = async (task: string) => (await platform.ctx.pool.query(
  `SELECT j.attempts, j.last_error, j.locked_at FROM graphile_worker._private_jobs j
     JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = $1`, [task])).rows;

describe('worker runner', () => {
  it('runs a job enqueued in a committed transaction, never one from a rolled-back transaction', async () => {
    const seen: string[] = [];
    const record: Task = async (payload) => { seen.push((payload as { tag: string }).tag); };
    await withTransaction(platform.ctx.pool, (client) => enqueue(client, { task: 'record', payload: { tag: 'committed' } }));
    await withTransaction(platform.ctx.pool, async (client) => {
      await enqueue(client, { task: 'record', payload: { tag: 'rolled back' } });
      throw new Error('abort');
    }).catch(() => {});
    const worker = await startWorker(platform.ctx, { taskList: { record } });
    try {
      await expect.poll(() => seen, { timeout: 10_000 }).toEqual(['committed']);
      // The job row goes once graphile-worker records the completion, a moment after the task returns.
      await expect.poll(() => jobs('record'), { timeout: 10_000 }).toEqual([]);
    } finally {
      await worker.stop();
    }
  });

  it('beats while running, lets a running job finish on stop, and removes its heartbeat', async () => {
    let finished = false;
    let started!: () => void;
    const running = new Promise<void>((resolve) => { started = resolve; });
    const slow: Task = async () => {
      started();
      await new Promise((r) => setTimeout(r, 800));
      finished = true;
    };
    const worker = await startWorker(platform.ctx, { taskList: { slow } });
    try {
      expect(await workerAlive(platform.ctx.pool)).toEqual({ alive: true, count: 1 });
      await enqueue(platform.ctx.pool, { task: 'slow', payload: {} });
      await running;
      // The heartbeat names what the running job is locked by, so a crash recovery can unlock it.
      // (This job's row only: a scheduled job of another task may be queued beside it.)
      const { rows: [link] } = await platform.ctx.pool.query(
        `SELECT j.locked_by = ANY(h.job_worker_ids) AS linked
           FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id, platform.worker_heartbeats h
          WHERE t.identifier = 'slow'`);
      expect(link.linked).toBe(true);
    } finally {
      await worker.stop(10_000);
    }
    expect(finished).toBe(true);
    expect(await jobs('slow')).toEqual([]);
    expect(await workerAlive(platform.ctx.pool)).toEqual({ alive: false, count: 0 });
  });

  it('unlocks at start the jobs a crashed worker process held, instead of waiting hours for the lock to expire', async () => {
    const ran: string[] = [];
    const orphan: Task = async (payload) => { ran.push((payload as { n: string }).n); };
    await enqueue(platform.ctx.pool, { task: 'orphan', payload: { n: 'held by a dead worker' } });
    // A process that took the job, then died two minutes ago without a word.
    await platform.ctx.pool.query(`UPDATE graphile_worker._private_jobs SET locked_by = 'worker-dead', locked_at = now() - interval '3 minutes', attempts = 1`);
    await platform.ctx.pool.query(`INSERT INTO platform.worker_heartbeats (worker_id, hostname, pid, last_seen_at, job_worker_ids)
      VALUES ('dead-process', 'gone', 1, now() - interval '3 minutes', '{worker-dead}')`);
    const worker = await startWorker(platform.ctx, { taskList: { orphan } });
    await expect.poll(() => ran, { timeout: 10_000 }).toEqual(['held by a dead worker']);
    const { rows } = await platform.ctx.pool.query(`SELECT worker_id FROM platform.worker_heartbeats`);
    expect(rows.map((r) => r.worker_id)).not.toContain('dead-process');
    await worker.stop();
  });

  it('fails a job still running after the shutdown bound, so that it is retried later', async () => {
    let started!: () => void;
    const running = new Promise<void>((resolve) => { started = resolve; });
    const stuck: Task = async (_payload, helpers) => {
      started();
      await new Promise((r) => { const t = setTimeout(r, 20_000); helpers.abortSignal?.addEventListener('abort', () => { clearTimeout(t); r(undefined); }); });
      throw new Error('aborted by shutdown');
    };
    const worker = await startWorker(platform.ctx, { taskList: { stuck } });
    await enqueue(platform.ctx.pool, { task: 'stuck', payload: {} });
    await running;
    const t0 = Date.now();
    await worker.stop(300);
    expect(Date.now() - t0).toBeLessThan(5_000);
    const [job] = await jobs('stuck');
    expect(job).toMatchObject({ attempts: 1, locked_at: null });
    expect(job.last_error).toBeTruthy();
  });
});
