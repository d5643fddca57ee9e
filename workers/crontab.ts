/**
 * Periodic jobs, one per line, in graphile-worker crontab syntax
 * (`minute hour day month weekday task ?options payload`).
 */
export const crontab = [
  // Search: repair missed indexing and re-embed after a model change (tasks/search-reconcile.ts).
  '*/5 * * * * search-reconcile ?max=3&queue=search-reconcile&jobKey=search-reconcile&priority=20',
  // Public registration: drop expired rate-limit counters (tasks/aggregator-clean-rate-limits.ts).
  '17 * * * * aggregator-clean-rate-limits ?max=1&jobKey=aggregator-clean-rate-limits&priority=20',
  // Aggregator dashboards: recompute rollups older than DASHBOARD_TTL_SECONDS (tasks/aggregator-dashboard-refresh.ts).
  '*/5 * * * * aggregator-dashboards-refresh ?max=1&jobKey=aggregator-dashboards-refresh&priority=20',
  // People: delete expired one-time codes, login flows and old sessions (tasks/signals-prune.ts).
  '17 3 * * * signals-prune ?max=3&jobKey=signals-prune&priority=30',
  // Bulk uploads: delete files, error reports and error rows past BULK_RETENTION_DAYS (tasks/bulk-upload-retention.ts).
  '41 * * * * bulk-upload-retention ?max=3&jobKey=bulk-upload-retention&priority=30',
  // Voice exports: delete export CSVs (decrypted contacts) past VOICE_EXPORT_RETENTION_DAYS (tasks/voice-export-retention.ts).
  '43 * * * * voice-export-retention ?max=3&jobKey=voice-export-retention&priority=30',
].join('\n');
