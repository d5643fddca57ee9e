/**
 * Bulk onboarding through the HTTP API and a real graphile-worker runner: row outcomes, duplicates,
 * the error report, file-level failures, encodings and XLSX.
 */
import { parse } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv, errorReport, itemsOf, onboard, participantsOf } from './helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from './helpers/platform.ts';

let platform: TestPlatform;

const SEEKER_HEADER = ['name', 'phone', 'email', 'age', 'education', 'skills', 'district', 'state'];

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { BULK_UPLOAD_CHUNK_ROWS: '3' } });
});
afterAll(() => platform.stop());

describe('bulk upload processing', () => {
  let agg: TestAggregator;
  beforeAll(async () => {
    agg = await platform.aggregator({ types: ['seeker'] });
  });

  it('onboards valid rows, reports every field error of bad rows, and skips duplicates within the file', async () => {
    const file = csv(SEEKER_HEADER, [
      ['Priya Sharma', '98765 43210', 'Priya.Sharma@Example.in', '24', 'iti', 'electrician|wiring', 'Kaithal', 'Haryana'],
      ['Bad Row', '12345', 'not-an-email', '7', 'phd', 'tailoring', 'Kaithal', 'Haryana'],
      ['Ravi Kumar', '+91-98765-00001', '', '30', 'graduate', 'driving', 'Hisar', 'haryana'],
      ['Priya Again', '+919876543210', '', '25', 'iti', 'welding', 'Kaithal', 'Haryana'],
      ['Mail Twin', '9000000001', 'priya.sharma@example.in', '26', 'diploma', 'cooking', 'Ambala', 'Haryana'],
      ['', '9000000002', '', '40', '', '', '', ''],
      ['Asha Devi', '9000000003', '', '35', 'primary', 'tailoring', 'Kaithal', 'Haryana'],
    ]);
    const job = await onboard(platform, agg.token, { file });
    expect(job).toMatchObject({ status: 'completed', total_rows: 7, passed: 3, failed: 2, skipped: 2, schema_id: 'urn:ldp:local-discovery:seeker' });
    expect(job.completed_at).toEqual(expect.any(String));

    const participants = await participantsOf(platform, agg.aggregatorId);
    expect(participants.map((p) => p.row_number)).toEqual([2, 4, 8]);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.map((i) => i.item_id).sort()).toEqual(participants.map((p) => p.participant_id).sort());

    const report = await errorReport(platform, agg.token, job.upload_id);
    expect(report.status).toBe(200);
    expect(report.headers['content-type']).toMatch(/^text\/csv/);
    const rows = parse(report.body, { columns: true }) as Record<string, string>[];
    expect(rows.map((r) => [r.row_number, r.outcome])).toEqual([['3', 'failed'], ['5', 'skipped'], ['6', 'skipped'], ['7', 'failed']]);
    expect(rows[0].error_fields.split('; ').sort()).toEqual(['age', 'education', 'email', 'phone']);
    expect(rows[1].error_messages).toMatch(/phone repeats row 2 of this file/);
    expect(rows[2].error_messages).toMatch(/email repeats row 2 of this file/);
    expect(rows[3].error_fields.split('; ').sort()).toEqual(['name', 'state']);
    expect(rows[0]).toMatchObject({ name: 'Bad Row', phone: '12345', email: 'not-an-email' });
  });
});
