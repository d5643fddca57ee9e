/**
 * Task `signals-prune` (daily, workers/crontab.ts): deletes expired one-time codes, wrong tries,
 * login flows and old sessions (lib/signals/sessions.ts `prunePeopleRecords`). Idempotent.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { prunePeopleRecords } from '../lib/signals/sessions.ts';

export const PRUNE_TASK = 'signals-prune';

export function signalsPrune(ctx: PlatformContext): Task {
  return async () => {
    const deleted = await prunePeopleRecords(ctx.pool);
    ctx.logger.info({ deleted }, 'signals: pruned expired codes, login flows and sessions');
  };
}
