/**
 * Every graphile-worker task of the platform, by identifier. Each task lives in its own module in
 * tasks/ and is built from the platform context.
 */
import type { TaskList } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';

export function createTaskList(_ctx: PlatformContext): TaskList {
  return {};
}
