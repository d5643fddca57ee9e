/**
 * Periodic jobs, one per line, in graphile-worker crontab syntax
 * (`minute hour day month weekday task ?options payload`).
 */
export const crontab = '';
