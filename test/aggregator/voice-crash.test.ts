/**
 * Crash and resume: the worker process (`ldp worker`) is killed with SIGKILL while it dispatches a
 * voice job — calls the provider has placed but the worker has not recorded yet — then the dead
 * worker's jobs are unlocked (what graphile-worker does after its lock timeout, done at once with
 * `force_unlock_workers`) and a new worker finishes. The provider's log (its own process) must
 * show every item called exactly once: the retried chunk re-sends the unrecorded calls with the
 * same idempotency keys, and the provider answers them as replays.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorker, type WorkerHandle } from '../../workers/runner.ts';
import { spawnLdp } from '../helpers/cli.ts';
import { startTestPlatform, tempDir, type TestPlatform } from '../helpers/platform.ts';
import {
  callsPerKey, createVoiceJob, phones, PROVIDER_SECRET, providerLog, seedSeekers, startProvider, waitForVoiceJob, type ProviderProcess,
} from '../helpers/voice.ts';

let dir: string;
let provider: ProviderProcess;
let platform: TestPlatform;
let worker: WorkerHandle | undefined;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  dir = await tempDir('ldp-voice-crash-');
  // Calls are placed (and logged) 300 ms before the provider answers: the window to kill in; the
  // callbacks come late enough for the restarted worker to re-send the unrecorded calls first.
  provider = await startProvider(dir, ['--latency', '300', '--delay', '3000']);
  platform = await startTestPlatform({
    services: ['aggregator'],
    env: { VOICE_PROVIDER_URL: provider.url, VOICE_PROVIDER_SECRET: PROVIDER_SECRET, VOICE_CHUNK_ITEMS: '50', VOICE_PROVIDER_BATCH_SIZE: '10' },
  });
});
afterAll(async () => {
  await worker?.stop();
  await platform?.stop();
  await provider?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('voice dispatch after a worker crash', () => {
  it('submits no item twice: the provider placed each call once, and the job ends completed', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const ids = await seedSeekers(platform, agg, phones(300, 1000));
    const created = await createVoiceJob(platform, agg.token, { item_ids: ids, content: { script: 'Hello' } });
    expect(created.status).toBe(202);
    const jobId = created.body.job_id;

    const child = spawnLdp(['worker'], {
      DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir, AGGREGATOR_PUBLIC_URL: platform.url('aggregator'),
      VOICE_PROVIDER_URL: provider.url, VOICE_PROVIDER_SECRET: PROVIDER_SECRET, VOICE_CHUNK_ITEMS: '50', VOICE_PROVIDER_BATCH_SIZE: '10',
      EMBEDDING_PROVIDER: 'hashing',
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const { pool } = platform.ctx;
    // Kill the worker once the provider has placed calls the worker has not recorded.
    let unrecorded = 0;
    for (let i = 0; ; i++) {
      const placed = [...callsPerKey(await providerLog(provider.logFile)).keys()].filter((k) => k.startsWith(`${jobId}:`)).length;
      const { rows: [recorded] } = await pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM aggregator.voice_job_items WHERE job_id = $1 AND provider_ref IS NOT NULL', [jobId]);
      if (placed > recorded.n && recorded.n > 0) {
        child.kill('SIGKILL');
        unrecorded = placed - recorded.n;
        break;
      }
      if (placed === ids.length) throw new Error('the dispatch finished before the worker could be killed');
      if (i > 3000) throw new Error('no batch was caught between placement and recording');
      await sleep(5);
    }
    await exited;
    expect(unrecorded).toBeGreaterThan(0);
    const { rows: [during] } = await pool.query('SELECT pending, resolved, submitted, sent FROM aggregator.voice_jobs WHERE job_id = $1', [jobId]);
    expect(during.pending + during.resolved).toBeGreaterThan(0);

    await pool.query(`SELECT graphile_worker.force_unlock_workers(ARRAY(
      SELECT DISTINCT locked_by FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL))`);
    worker = await startWorker(platform.ctx);
    const job = await waitForVoiceJob(platform, agg.token, jobId, undefined, 120_000);
    expect(job.status).toBe('completed');
    expect(job.counts).toMatchObject({ total: 300, sent: 300, pending: 0, resolved: 0, submitted: 0, failed: 0 });
    expect(job.provider_response.calls_replayed).toBeGreaterThan(0);

    const log = await providerLog(provider.logFile);
    const calls = [...callsPerKey(log)].filter(([key]) => key.startsWith(`${jobId}:`));
    expect(calls).toHaveLength(300);
    expect(calls.filter(([, n]) => n !== 1)).toEqual([]);
    // The unrecorded calls were sent again after the restart, and answered as replays.
    expect(log.filter((e) => e.event === 'replay' && e.idempotency_key!.startsWith(`${jobId}:`)).length).toBeGreaterThan(0);
  });
});
