/**
 * Real input end to end: slices of the PMGSY facility files in ../shared/data (read at test time,
 * never copied into the repository) onboarded as providers through the HTTP API with the column
 * map fixture, checking the exact counts and what was stored.
 */
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse';
import { parse as parseSync } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.ts';
import { csv, errorReport, itemsOf, onboard, participantsOf } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { absent, NEEDS_SHARED, titled } from '../helpers/requires.ts';

const DATA = path.resolve(REPO_ROOT, '../shared/data');
const MEDIUM = path.join(DATA, 'pmgsy-schools-clinics-haryana-punjab/pmgsy_education_medical_haryana_punjab.csv');
const LARGE = path.join(DATA, 'pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const COLUMN_MAP = path.join(REPO_ROOT, 'fixtures/column-maps/pmgsy-facilities.json');

/** Records of a CSV file (header first) for which `keep` is true, stopping after `limit` kept. */
async function records(file: string, keep: (r: string[], index: number) => boolean, limit = Infinity): Promise<string[][]> {
  const out: string[][] = [];
  let index = 0;
  for await (const record of createReadStream(file).pipe(parse({ relax_column_count: true })) as AsyncIterable<string[]>) {
    if (index === 0 || keep(record, index)) out.push(record);
    index++;
    if (out.length > limit) break;
  }
  return out;
}

// The shared datasets live next to the repository, not in it; without them there is nothing to onboard.
const noData = absent([MEDIUM, LARGE], NEEDS_SHARED);
describe.skipIf(noData !== '')(titled('real PMGSY facility files (../shared/data)', noData), () => {
  let platform: TestPlatform;
  let columnMap: Record<string, string | null>;
  beforeAll(async () => {
    platform = await startTestPlatform({ worker: true, env: { BULK_UPLOAD_CHUNK_ROWS: '500' } });
    columnMap = JSON.parse(await readFile(COLUMN_MAP, 'utf8'));
  });
  afterAll(() => platform.stop());

  it('onboards the first 2,000 records of the medium file: every one passes, stored encrypted and pushed as items', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    const [header, ...rows] = await records(MEDIUM, () => true, 2000);
    expect(rows).toHaveLength(2000);
    const job = await onboard(platform, agg.token, { participantType: 'provider', file: csv(header, rows), filename: 'medium-2000.csv', columnMap });
    expect(job).toMatchObject({ status: 'completed', total_rows: 2000, passed: 2000, failed: 0, skipped: 0, errors_csv_object_key: null });

    const participants = await participantsOf(platform, agg.aggregatorId);
    expect(participants).toHaveLength(2000);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.map((i) => i.item_id).sort()).toEqual(participants.map((p) => p.participant_id).sort());

    // The first record: 533521,ITI Women,Education,711290,Mohindergarh,3896,Mohindergarh,366,Mohindergarh,13,Haryana,28.2718987,76.1440603
    const col = (name: string) => header.indexOf(name);
    const first = rows[0];
    const stored = participants.find((p) => p.external_id === first[col('facility_id')])!;
    expect(stored.row_number).toBe(2);
    expect(stored.name_encrypted).not.toContain(first[col('name')]);
    expect(platform.ctx.pii.decrypt(stored.name_encrypted)).toBe(first[col('name')].trim());
    expect(stored.profile).toEqual({
      external_id: first[col('facility_id')], category: first[col('category')], locality: first[col('habitation_name')],
      block: first[col('block_name')], district: first[col('district_name')], state: first[col('state_name')],
      latitude: Number(first[col('latitude')]), longitude: Number(first[col('longitude')]),
    });
    const item = items.find((i) => i.item_id === stored.participant_id)!;
    expect(item).toMatchObject({
      item_domain: 'provider', item_type: 'facility', lifecycle_status: 'live',
      item_state: { ...stored.profile, name: first[col('name')].trim() },
      item_locations: [{ lat: Number(first[col('latitude')]), lng: Number(first[col('longitude')]) }],
    });
    // Names with surrounding spaces in the source are stored trimmed.
    const padded = rows.find((r) => r[col('name')] !== r[col('name')].trim());
    if (padded) expect(items.some((i) => i.item_state.name === padded[col('name')].trim())).toBe(true);
  });

  it('onboards the quirks of the large file: the quoted CRLF name passes, the four records located in the USA fail', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    const usa = new Set(['803167', '759990', '762708', '760443']);
    // The quirky records plus every 2,000th record of the file.
    const [header, ...rows] = await records(LARGE, (r, i) => usa.has(r[0]) || r[0] === '787366' || i % 2000 === 0);
    expect(rows.length).toBeGreaterThan(130);
    const job = await onboard(platform, agg.token, { participantType: 'provider', file: csv(header, rows), filename: 'large-slice.csv', columnMap });
    expect(job).toMatchObject({ status: 'completed', total_rows: rows.length, passed: rows.length - 4, failed: 4, skipped: 0 });

    const report = parseSync((await errorReport(platform, agg.token, job.upload_id)).body, { columns: true, bom: true }) as Record<string, string>[];
    expect(report.map((r) => r.facility_id).sort()).toEqual([...usa].sort());
    expect(report.every((r) => r.error_fields === 'latitude; longitude' && /latitude must be between 6 and 37.5/.test(r.error_messages))).toBe(true);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.find((i) => i.item_state.external_id === '787366')!.item_state.name).toBe('Saint High school \r\nCoeducation');
  });
});
