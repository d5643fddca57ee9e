/**
 * Every graphile-worker task of the platform, by identifier. Each task lives in its own module in
 * tasks/ and is built from the platform context.
 */
import type { TaskList } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { SEARCH_INDEX_TASK } from '../lib/network/items.ts';
import { CHUNK_TASK, FINISH_TASK, STAGE_TASK } from '../lib/aggregator/bulk/upload-jobs.ts';
import { bulkUploadChunk } from '../tasks/bulk-upload-chunk.ts';
import { bulkUploadFinish } from '../tasks/bulk-upload-finish.ts';
import { bulkUploadStage } from '../tasks/bulk-upload-stage.ts';
import { searchIndexItems } from '../tasks/search-index-items.ts';
import { RECONCILE_TASK, searchReconcile } from '../tasks/search-reconcile.ts';
import { SEND_MESSAGE_TASK } from '../lib/signals/messages.ts';
import { signalsSendMessage } from '../tasks/signals-send-message.ts';
import { PRUNE_TASK, signalsPrune } from '../tasks/signals-prune.ts';

export function createTaskList(ctx: PlatformContext): TaskList {
  return {
    [STAGE_TASK]: bulkUploadStage(ctx),
    [CHUNK_TASK]: bulkUploadChunk(ctx),
    [FINISH_TASK]: bulkUploadFinish(ctx),
    [SEARCH_INDEX_TASK]: searchIndexItems(ctx),
    [RECONCILE_TASK]: searchReconcile(ctx),
    [SEND_MESSAGE_TASK]: signalsSendMessage(ctx),
    [PRUNE_TASK]: signalsPrune(ctx),
  };
}
