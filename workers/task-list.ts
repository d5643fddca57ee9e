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
import { PREVIEW_TASK } from '../lib/aggregator/bulk/preview.ts';
import { bulkUploadPreview } from '../tasks/bulk-upload-preview.ts';
import { bulkUploadStage } from '../tasks/bulk-upload-stage.ts';
import { SUGGEST_TASK } from '../lib/aggregator/bulk/suggest.ts';
import { bulkUploadSuggest } from '../tasks/bulk-upload-suggest.ts';
import { searchIndexItems } from '../tasks/search-index-items.ts';
import { PUSH_PARTICIPANT_TASK } from '../lib/aggregator/public-registration.ts';
import { aggregatorPushParticipant } from '../tasks/aggregator-push-participant.ts';
import { DECISION_EMAIL_TASK, REVIEW_EMAIL_TASK } from '../lib/aggregator/review-links.ts';
import { PUSH_ORGANISATION_TASK } from '../lib/aggregator/registrations.ts';
import { aggregatorSendReviewEmail } from '../tasks/aggregator-send-review-email.ts';
import { aggregatorSendDecisionEmail } from '../tasks/aggregator-send-decision-email.ts';
import { aggregatorPushOrganisation } from '../tasks/aggregator-push-organisation.ts';
import { aggregatorCleanRateLimits, CLEAN_RATE_LIMITS_TASK } from '../tasks/aggregator-clean-rate-limits.ts';
import { RECONCILE_TASK, searchReconcile } from '../tasks/search-reconcile.ts';
import { SUPPORT_EMAIL_TASK } from '../lib/network/support.ts';
import { supportSendEmail } from '../tasks/support-send-email.ts';
import { DASHBOARD_REFRESH_TASK, DASHBOARDS_REFRESH_TASK } from '../lib/aggregator/dashboard.ts';
import { aggregatorDashboardRefresh, aggregatorDashboardsRefresh } from '../tasks/aggregator-dashboard-refresh.ts';
import { DISPATCH_TASK as VOICE_DISPATCH_TASK, EXPORT_TASK as VOICE_EXPORT_TASK } from '../lib/aggregator/voice/jobs.ts';
import { voiceDispatchChunk } from '../tasks/voice-dispatch-chunk.ts';
import { voiceExport } from '../tasks/voice-export.ts';
import { SEND_MESSAGE_TASK } from '../lib/signals/messages.ts';
import { signalsSendMessage } from '../tasks/signals-send-message.ts';
import { VOICE_EXPORT_RETENTION_TASK, voiceExportRetention } from '../tasks/voice-export-retention.ts';
import { PRUNE_TASK, signalsPrune } from '../tasks/signals-prune.ts';
import { bulkUploadRetention, RETENTION_TASK } from '../tasks/bulk-upload-retention.ts';

export function createTaskList(ctx: PlatformContext): TaskList {
  return {
    [STAGE_TASK]: bulkUploadStage(ctx),
    [CHUNK_TASK]: bulkUploadChunk(ctx),
    [FINISH_TASK]: bulkUploadFinish(ctx),
    [PREVIEW_TASK]: bulkUploadPreview(ctx),
    [SUGGEST_TASK]: bulkUploadSuggest(ctx),
    [SEARCH_INDEX_TASK]: searchIndexItems(ctx),
    [RECONCILE_TASK]: searchReconcile(ctx),
    [PUSH_PARTICIPANT_TASK]: aggregatorPushParticipant(ctx),
    [REVIEW_EMAIL_TASK]: aggregatorSendReviewEmail(ctx),
    [DECISION_EMAIL_TASK]: aggregatorSendDecisionEmail(ctx),
    [PUSH_ORGANISATION_TASK]: aggregatorPushOrganisation(ctx),
    [CLEAN_RATE_LIMITS_TASK]: aggregatorCleanRateLimits(ctx),
    [SUPPORT_EMAIL_TASK]: supportSendEmail(ctx),
    [DASHBOARD_REFRESH_TASK]: aggregatorDashboardRefresh(ctx),
    [DASHBOARDS_REFRESH_TASK]: aggregatorDashboardsRefresh(ctx),
    [VOICE_DISPATCH_TASK]: voiceDispatchChunk(ctx),
    [VOICE_EXPORT_TASK]: voiceExport(ctx),
    [SEND_MESSAGE_TASK]: signalsSendMessage(ctx),
    [PRUNE_TASK]: signalsPrune(ctx),
    [RETENTION_TASK]: bulkUploadRetention(ctx),
    [VOICE_EXPORT_RETENTION_TASK]: voiceExportRetention(ctx),
  };
}
