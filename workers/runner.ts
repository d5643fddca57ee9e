/**
 * The graphile-worker runner: the platform's task list and crontab on the shared pool, its log in
 * pino, a heartbeat for `/ready`, and a bounded graceful stop (running jobs may finish within
 * SHUTDOWN_TIMEOUT_MS; after that they are failed and graphile-worker retries them later).
 */
import { randomUUID } from 'node:crypto';
import { Logger as WorkerLogger, parseCrontab, run, type Runner, type TaskList } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { crontab } from './crontab.ts';
import { startHeartbeat } from './heartbeat.ts';
import { createTaskList } from './task-list.ts';

export interface WorkerHandle {
  runner: Runner;
  /** Stops taking jobs, waits up to `timeoutMs` for running ones, then fails what is left. */
  stop(timeoutMs?: number): Promise<void>;
}

/** Starts a runner with `concurrency` (default WORKER_CONCURRENCY) parallel jobs. */
export async function startWorker(ctx: PlatformContext, options: { concurrency?: number; taskList?: TaskList } = {}): Promise<WorkerHandle> {
  const log = ctx.logger.child({ component: 'worker' });
  const logger = new WorkerLogger((scope) => (level, message, meta) => {
    const method = level === 'warning' ? 'warn' : level;
    log[method]({ ...scope, ...meta }, message);
  });
  const runner = await run({
    pgPool: ctx.pool,
    concurrency: options.concurrency ?? ctx.config.WORKER_CONCURRENCY,
    taskList: options.taskList ?? createTaskList(ctx),
    parsedCronItems: parseCrontab(crontab),
    noHandleSignals: true,
    logger,
  });
  const stopHeartbeat = await startHeartbeat(ctx.pool, `worker-${randomUUID()}`);
  let stopping: Promise<void> | undefined;
  return {
    runner,
    stop(timeoutMs = ctx.config.SHUTDOWN_TIMEOUT_MS) {
      stopping ??= (async () => {
        await stopHeartbeat();
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), timeoutMs); });
        const result = await Promise.race([runner.stop().then(() => 'stopped' as const), timedOut]);
        clearTimeout(timer);
        if (result === 'timeout') {
          log.warn({ timeoutMs }, 'jobs still running after the shutdown bound; failing them for a later retry');
          await runner.kill();
        }
      })();
      return stopping;
    },
  };
}
