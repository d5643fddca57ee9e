/**
 * What the backup tests compare before a backup and after its restore: searches, exported phones,
 * an error report, each read over HTTP from a running instance.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import pg from 'pg';
import { expect } from 'vitest';
import { until } from './until.ts';

const TEXTS = ['electrician', 'tailoring Kaithal', 'computer operator', 'driver with licence', 'plumber Punjab'];

/** What the test compares before the backup and after the restore. */
export interface Observed {
  searches: { ids: string[]; scores: (number | undefined)[]; total: number }[];
  phones: Map<string, string>;
  errorReport: string;
}

export async function observe(urls: Record<string, string>, auth: { token: string; searchKey: string }, participantIds: string[], uploadId: string): Promise<Observed> {
  const searches = [];
  for (const text of [...TEXTS, undefined]) {
    const res = await fetch(`${urls.search}/v1/search`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': auth.searchKey },
      body: JSON.stringify({
        context: { messageId: randomBytes(4).toString('hex'), networkId: 'local-discovery', domain: 'seeker', itemType: 'seeker_profile' },
        message: { intent: text ? { textSearch: text } : {}, pagination: { limit: 50 } },
      }),
    });
    expect(res.status).toBe(200);
    const body = await res.json() as { message: { items: { item_id: string; score?: number }[]; meta: { total: number } } };
    searches.push({ ids: body.message.items.map((i) => i.item_id), scores: body.message.items.map((i) => i.score), total: body.message.meta.total });
  }
  const exported = await fetch(`${urls.aggregator}/v1/dashboard/export/profiles`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${auth.token}` },
    body: JSON.stringify({ item_ids: participantIds }),
  });
  expect(exported.status).toBe(200);
  const [header, ...rows] = parse((await exported.text()).replace(/^\uFEFF/, '')) as string[][];
  const phones = new Map(rows.map((r) => [r[header.indexOf('participant_id')], r[header.indexOf('phone')]]));
  const report = await fetch(`${urls.aggregator}/v1/bulk-uploads/${uploadId}/errors`, { headers: { authorization: `Bearer ${auth.token}` } });
  expect(report.status).toBe(200);
  return { searches, phones, errorReport: await report.text() };
}

/** Waits until `expected` items are indexed and the search service's vector index is ready and holds them all. */
export async function searchSettled(searchUrl: string, databaseUrl: string, expected: number): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await until('every participant indexed', async () => (await client.query('SELECT count(*)::int AS n FROM search.items')).rows[0].n === expected, 60_000);
    const { rows: [seq] } = await client.query('SELECT max(change_seq)::int AS n FROM search.items');
    await until('the vector index ready', async () => {
      const { checks } = await (await fetch(`${searchUrl}/ready`)).json() as
        { checks: { vector_backend: { state: string; backend: string; cursor?: number; tail_rows?: number } } };
      const status = checks.vector_backend;
      if (status.state !== 'ready') return false;
      // usearch: caught up with the last write; pgvector: its tail moved into the graph.
      return status.backend === 'pgvector' ? status.tail_rows === 0 : (status.cursor ?? 0) >= seq.n;
    }, 120_000);
  } finally {
    await client.end();
  }
}


/** Waits until the search process of `dataDir` saved its usearch index file up to the last write of `databaseUrl`. */
export async function indexSaved(dataDir: string, databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows: [seq] } = await client.query('SELECT max(change_seq)::int AS n FROM search.items');
    const meta = path.join(dataDir, 'search-index', 'ldp-hashing-ngram-v1-none-384.usearch.json');
    await until('the vector index file saved', async () => {
      const saved = await readFile(meta, 'utf8').then((t) => JSON.parse(t) as { cursor: number }, () => undefined);
      return (saved?.cursor ?? -1) >= seq.n;
    }, 60_000);
  } finally {
    await client.end();
  }
}
