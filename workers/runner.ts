/**
 * The graphile-worker runner: the platform's task list and crontab on the shared pool, its log in
 * pino, a heartbeat for `/ready`, and a bounded graceful stop (running jobs may finish within
 * SHUTDOWN_TIMEOUT_MS; after that they are failed and graphile-worker retries them later).
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import v8 from 'node:v8';
import { Logger as WorkerLogger, parseCrontab, run, type Runner, type TaskList, type WorkerEvents, type WorkerPool } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { lowerSessionPriority, lowerThreadPriority } from '../lib/platform/priority.ts';
import { requestIdOfPayload, runWithRequestId } from '../lib/platform/request-context.ts';
import { crontab } from './crontab.ts';
import { startHeartbeat } from './heartbeat.ts';
import { createTaskList } from './task-list.ts';

export interface WorkerHandle {
  runner: Runner;
  /** Stops taking jobs, waits up to `timeoutMs` for running ones, then fails what is left. */
  stop(timeoutMs?: number): Promise<void>;
}

/**
 * How far V8 lets the heap grow past what survived its last full collection, in percent (V8 flag
 * `--heap-growing-percent`; 0 = V8's own factor, up to 300 %). Bulk onboarding keeps ~60-90 MB
 * alive but promotes much short-lived data (rows, JSON bodies held across awaits), so V8's own
 * factor let the worker's RSS reach ~410-440 MB (60,000 rows); 20 % held it near 310-340 MB but
 * cost the worker ~30 % more CPU in full collections; 100 % held it as low (300-340 MB) for ~3 %
 * more CPU than V8's own factor (issue 17, docs/decisions.md "Bulk onboarding II", third pass).
 * 50 % was tried on the full file (2026-11-25): peaks of 224 and 259 MB against 245-271 at 100 %,
 * within the runs' spread, for ~8 % more worker CPU on CSV and ~35 % on XLSX (exceljs's garbage).
 */
export const WORKER_HEAP_GROWING_PERCENT = 100;

/**
 * Node options a process that is only a worker (`ldp worker`) is started with (NODE_OPTIONS, or
 * node's command line: V8 sizes its young generation when it starts, so unlike the heap growth
 * below this cannot be set from inside). `--max-semi-space-size` caps each of the young
 * generation's two semi-spaces: V8's default on 64-bit is 16 MB, and bulk onboarding's allocation
 * rate grows them to it, 32 MB resident. The bench (bench/bulk-upload.ts) and docker-compose.yml
 * start the worker with them; docs/decisions.md "Bulk onboarding III" has the measurements.
 */
export const WORKER_NODE_OPTIONS = '--max-semi-space-size=8';

/**
 * Sets the process's V8 heap growth to WORKER_HEAP_GROWING_PERCENT: a process-wide flag, read by V8
 * at each full collection, so it works after start (`--max-old-space-size` does not). For a
 * process that is only a worker (`ldp worker`): in `ldp start` it would also bound the services'
 * heap, which cost that process ~10 % more CPU per uploaded row (docs/decisions.md "Bulk
 * onboarding II"), and `ldp start` has no memory target of its own.
 */
export function limitHeapGrowth(): void {
  v8.setFlagsFromString(`--heap-growing-percent=${WORKER_HEAP_GROWING_PERCENT}`);
}

/**
 * Starts a runner with `concurrency` (default WORKER_CONCURRENCY) parallel jobs, its thread and
 * database sessions at nice BACKGROUND_NICE.
 */
export async function startWorker(ctx: PlatformContext, options: { concurrency?: number; taskList?: TaskList } = {}): Promise<WorkerHandle> {
  const log = ctx.logger.child({ component: 'worker' });
  yieldCpu(ctx, log);
  const logger = new WorkerLogger((scope) => (level, message, meta) => {
    const method = level === 'warning' ? 'warn' : level;
    log[method]({ ...scope, ...meta }, message);
  });
  // runner.kill() does nothing once a graceful stop has begun; keep the pool to force it ourselves.
  const events: WorkerEvents = new EventEmitter();
  let workerPool: WorkerPool | undefined;
  // Jobs are locked in the name of the worker pool (`locked_by`), so its id is what a crash recovery
  // must unlock (workers/heartbeat.ts).
  const jobWorkerIds: string[] = [];
  events.on('pool:create', ({ workerPool: pool }) => {
    workerPool = pool;
    jobWorkerIds.push(pool.id);
  });
  observeJobs(events, ctx);
  const shutdownTimeoutMs = ctx.config.SHUTDOWN_TIMEOUT_MS;
  const runner = await run({
    pgPool: ctx.pool,
    concurrency: options.concurrency ?? ctx.config.WORKER_CONCURRENCY,
    taskList: withRequestIds(options.taskList ?? createTaskList(ctx), log),
    parsedCronItems: parseCrontab(crontab),
    noHandleSignals: true,
    logger,
    events,
    preset: {
      worker: {
        // Batched (delay 0) completions are flushed when the runner stops; unbatched ones are not
        // awaited and could be lost when the pool closes right after, leaving the job locked.
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
        // Tasks see helpers.abortSignal fire only when the shutdown bound is reached.
        gracefulShutdownAbortTimeout: shutdownTimeoutMs,
      },
    },
  });
  const stopHeartbeat = await startHeartbeat(ctx.pool, `worker-${randomUUID()}`, jobWorkerIds);
  let stopping: Promise<void> | undefined;
  return {
    runner,
    stop(timeoutMs = shutdownTimeoutMs) {
      stopping ??= (async () => {
        await stopHeartbeat();
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), timeoutMs); });
        const result = await Promise.race([runner.stop().then(() => 'stopped' as const), timedOut]);
        clearTimeout(timer);
        if (result === 'timeout') {
          log.warn({ timeoutMs }, 'jobs still running after the shutdown bound; failing them for a later retry');
          await workerPool?.forcefulShutdown('shutdown bound reached');
        }
      })();
      return stopping;
    },
  };
}

/** Background priority (lib/platform/priority.ts): the worker's thread and its database sessions run at BACKGROUND_NICE. */
function yieldCpu(ctx: PlatformContext, log: PlatformContext['logger']): void {
  try {
    lowerThreadPriority(ctx.config.BACKGROUND_NICE);
  } catch (err) {
    log.warn({ err, nice: ctx.config.BACKGROUND_NICE }, 'could not lower the worker\'s CPU priority (BACKGROUND_NICE)');
  }
  lowerSessionPriority(ctx.pool, ctx.config.BACKGROUND_NICE);
}

/**
 * Each task runs under the request id its payload carries, so its log lines and the jobs it adds
 * carry it; a debug line marks each job's end (with that request id).
 */
function withRequestIds(taskList: TaskList, log: PlatformContext['logger']): TaskList {
  const wrapped: TaskList = {};
  for (const [name, task] of Object.entries(taskList)) {
    if (!task) continue;
    const logged: typeof task = async (payload, helpers) => {
      const started = performance.now();
      let outcome = 'error';
      try {
        const result = await task(payload, helpers);
        outcome = 'success';
        return result;
      } finally {
        log.debug({ taskIdentifier: name, jobId: helpers.job.id, outcome, durationMs: Math.round(performance.now() - started) }, 'job finished');
      }
    };
    wrapped[name] = (payload, helpers) => {
      const requestId = requestIdOfPayload(payload);
      return requestId ? runWithRequestId(requestId, () => logged(payload, helpers)) : logged(payload, helpers);
    };
  }
  return wrapped;
}

/** Counts jobs by task and outcome, and times them (lib/platform/metrics.ts). */
function observeJobs(events: WorkerEvents, ctx: PlatformContext): void {
  const started = new Map<string, (labels?: { outcome?: string }) => number>();
  events.on('job:start', ({ job }) => started.set(job.id, ctx.metrics.workerJobDuration.startTimer({ task: job.task_identifier })));
  const done = (outcome: 'success' | 'error') => ({ job }: { job: { id: string; task_identifier: string } }) => {
    ctx.metrics.workerJobs.inc({ task: job.task_identifier, outcome });
    started.get(job.id)?.({ outcome });
    started.delete(job.id);
  };
  events.on('job:success', done('success'));
  events.on('job:error', done('error'));
}
