/**
 * The platform's stop (bin/platform.ts, what `ldp start` runs on SIGINT/SIGTERM): the worker stops
 * first and its running jobs finish against services that still answer; then the services close.
 * A bulk upload's chunk, which pushes its items to signals batch by batch, is running at the stop.
 */
import pg from 'pg';
import { expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { csv, createUpload, startUpload } from '../helpers/bulk-upload.ts';
import { startTestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

it('lets a bulk chunk running at the stop finish its pushes to signals before the services close', async () => {
  const platform = await startTestPlatform({ worker: true, env: { SHUTDOWN_TIMEOUT_MS: '20000' } });
  const { token } = await platform.aggregator();
  const rows = [...generateSeekers({ count: 10_000, seed: 17, errorRate: 0, duplicateRate: 0, places: BUILT_IN_PLACES })];
  const created = await createUpload(platform, token, {
    participantType: 'seeker', file: csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c]))),
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  expect((await startUpload(platform, token, created.body.upload_id)).status).toBe(200);
  await until('a chunk running', async () => (await platform.ctx.pool.query(
    `SELECT 1 FROM graphile_worker.jobs WHERE task_identifier = 'bulk-upload-chunk' AND locked_at IS NOT NULL`)).rowCount, 30_000);

  await platform.stop();

  const client = new pg.Client({ connectionString: platform.databaseUrl });
  await client.connect();
  try {
    const { rows: failed } = await client.query(
      `SELECT task_identifier, last_error FROM graphile_worker.jobs WHERE last_error IS NOT NULL`);
    expect(failed).toEqual([]);
    // The chunk that was running is done: its rows are participants, and their items are at signals.
    const { rows: [done] } = await client.query<{ chunks: number; rows: number }>(
      `SELECT count(*)::int AS chunks, coalesce(sum(passed), 0)::int AS rows FROM aggregator.bulk_upload_chunks
        WHERE upload_id = $1 AND done_at IS NOT NULL`, [created.body.upload_id]);
    expect(done.chunks).toBeGreaterThanOrEqual(1);
    const { rows: [counts] } = await client.query<{ participants: number; items: number }>(
      `SELECT (SELECT count(*)::int FROM aggregator.participants WHERE bulk_upload_id = $1) AS participants,
              (SELECT count(*)::int FROM signals.items i JOIN aggregator.participants p ON p.participant_id = i.item_id
                WHERE p.bulk_upload_id = $1) AS items`, [created.body.upload_id]);
    expect(counts).toEqual({ participants: done.rows, items: done.rows });
  } finally {
    await client.end();
  }
}, 120_000);
