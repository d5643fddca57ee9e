/**
 * Periodic jobs, one per line, in graphile-worker crontab syntax
 * (`minute hour day month weekday task ?options payload`).
 */
export const crontab = [
  // Search: repair missed indexing and re-embed after a model change (tasks/search-reconcile.ts).
  '*/5 * * * * search-reconcile ?max=3&queue=search-reconcile&jobKey=search-reconcile&priority=20',
  // People: delete expired one-time codes, login flows and old sessions (tasks/signals-prune.ts).
  '17 3 * * * signals-prune ?max=3&jobKey=signals-prune&priority=30',
].join('\n');
