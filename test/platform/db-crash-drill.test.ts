/**
 * Crash drill (issue 15): `ldp start` on its embedded PostgreSQL, as a self-hoster runs it, killed
 * in the middle of a bulk upload — the node process and the PostgreSQL postmaster both with SIGKILL,
 * as a power cut would — then started again on the same DATA_DIR. PostgreSQL recovers from its WAL,
 * the new worker unlocks the dead one's jobs, and the upload ends with the counts of an undisturbed
 * run: every row accounted for, one participant and one signals item per passed row.
 */
import type { ChildProcess } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { freePort } from '../../lib/platform/free-port.ts';
import { csv } from '../helpers/bulk-upload.ts';
import { runLdp, spawnLdpUntil, stopChild } from '../helpers/cli.ts';
import { tempDir } from '../helpers/platform.ts';

let dataDir: string;
let env: Record<string, string>;
const children: ChildProcess[] = [];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function start(): Promise<{ child: ChildProcess; aggregator: string }> {
  const { child, out } = await spawnLdpUntil(['start'], env, (o) => o.includes('worker     running'));
  children.push(child);
  const line = out.split('\n').find((l) => l.trim().startsWith('aggregator') && l.includes('http://'))!;
  return { child, aggregator: line.trim().split(/\s+/)[1] };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) await stopChild(c);
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('ldp start and its PostgreSQL killed mid-upload', () => {
  it('recovers, and the upload ends with every row accounted for once', async () => {
    dataDir = await tempDir('ldp-db-crash-');
    env = {
      DATA_DIR: dataDir, EMBEDDED_POSTGRES_PORT: String(await freePort()), EMBEDDING_PROVIDER: 'hashing', BULK_UPLOAD_CHUNK_ROWS: '100',
      SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
    };
    const first = await start();
    const shell = { DATA_DIR: dataDir };
    const agg = JSON.parse((await runLdp(['aggregator', 'create', '--name', 'Drill Seva', '--types', 'seeker'], shell)).stdout);
    const token = (await runLdp(['token', '--aggregator', agg.aggregator_id], shell)).stdout.trim();
    const auth = { authorization: `Bearer ${token}` };

    const rows = [...generateSeekers({ count: 3000, seed: 15, errorRate: 0.05, duplicateRate: 0.03, places: BUILT_IN_PLACES })];
    const expected = { valid: 0, error: 0, duplicate: 0 };
    for (const r of rows) expected[r.kind]++;
    const form = new FormData();
    form.set('participant_type', 'seeker');
    form.set('file', new Blob([csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c])))]), 'drill.csv');
    const created = await fetch(`${first.aggregator}/v1/bulk-uploads`, { method: 'POST', headers: auth, body: form });
    expect(created.status).toBe(201);
    const uploadId = ((await created.json()) as { upload_id: string }).upload_id;
    const started = await fetch(`${first.aggregator}/v1/bulk-uploads/${uploadId}/start`, {
      method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ attestation: true }),
    });
    expect(started.status).toBe(200);

    // Kill both once some rows are onboarded and others are not.
    for (let i = 0; ; i++) {
      const job = (await (await fetch(`${first.aggregator}/v1/bulk-uploads/${uploadId}`, { headers: auth })).json()) as { status: string; processed_rows: number };
      if (job.processed_rows > 0 && job.status === 'running') break;
      if (job.status !== 'running' && job.status !== 'pending') throw new Error(`the upload ended (${job.status}) before the crash`);
      if (i > 6000) throw new Error('the upload never started');
      await sleep(5);
    }
    const postmaster = Number((await readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0]);
    process.kill(postmaster, 'SIGKILL');
    first.child.kill('SIGKILL');
    await new Promise((resolve) => (first.child.exitCode !== null || first.child.signalCode !== null ? resolve(null) : first.child.once('exit', resolve)));
    while (alive(postmaster)) await sleep(50);
    // Backends notice their postmaster's death and exit; give them a moment to release shared memory.
    await sleep(1500);

    const second = await start();
    const instance = JSON.parse(await readFile(path.join(dataDir, 'instance.json'), 'utf8')) as { database_url: string };
    let job: { status: string; total_rows: number; passed: number; failed: number; skipped: number } | undefined;
    for (const deadline = Date.now() + 120_000; Date.now() < deadline;) {
      job = (await (await fetch(`${second.aggregator}/v1/bulk-uploads/${uploadId}`, { headers: auth })).json()) as typeof job;
      if (job!.status !== 'running') break;
      await sleep(250);
    }
    expect(job).toMatchObject({ status: 'completed', total_rows: 3000, passed: expected.valid, failed: expected.error, skipped: expected.duplicate });

    const db = new pg.Client({ connectionString: instance.database_url });
    await db.connect();
    try {
      const { rows: participants } = await db.query<{ participant_id: string; row_number: number }>(
        'SELECT participant_id, row_number FROM aggregator.participants WHERE aggregator_id = $1', [agg.aggregator_id]);
      expect(participants).toHaveLength(expected.valid);
      expect(new Set(participants.map((p) => p.row_number)).size).toBe(expected.valid);
      const { rows: items } = await db.query<{ item_id: string }>('SELECT item_id FROM signals.items WHERE created_by = $1', [`aggregator:${agg.aggregator_id}`]);
      expect(items.map((i) => i.item_id).sort()).toEqual(participants.map((p) => p.participant_id).sort());
      const { rows: [kept] } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM aggregator.bulk_upload_rows WHERE upload_id = $1', [uploadId]);
      expect(kept.n).toBe(expected.error + expected.duplicate);
    } finally {
      await db.end();
    }
    expect(await stopChild(second.child)).toBe(0);
  }, 240_000);
});
