/**
 * The operator console in a real browser: headless Chromium (Debian's `chromium`, installed by
 * .ci/run) driven by playwright-core. An operator signs in with a console link, uploads the real
 * PMGSY facilities file — all 19,118 rows, every 10th latitude broken (../shared/data, read at
 * test time, never copied into the repo) — with a saved mapping, tries a dry run, watches the
 * progress arrive over Server-Sent Events to completion, pages the failed rows, downloads the report, creates and activates a registration link and reads its QR code back (jsQR),
 * views the dashboard and switches to Hindi. axe-core finds no serious or critical violation on
 * each page; each step keeps a screenshot under test-artifacts/.
 */
import { createReadStream } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parse } from 'csv-parse';
import { parse as parseCsv } from 'csv-parse/sync';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv } from '../helpers/bulk-upload.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { consoleLinkFor } from '../helpers/console.ts';
import { startTestPlatform, tempDir, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { absent, CHROMIUM, NEEDS_CHROMIUM, NEEDS_SHARED, titled } from '../helpers/requires.ts';

const require = createRequire(import.meta.url);
// The functions given to page.evaluate run in the page; the project compiles without lib "dom".
declare const window: Record<string, unknown>;
declare const document: { getElementById(id: string): unknown; createElement(tag: string): any };
type HTMLImageElement = { decode(): Promise<void> };
const ARTIFACTS = path.join(REPO_ROOT, 'test-artifacts');
const PMGSY = path.join(REPO_ROOT, '../shared/data/pmgsy-schools-clinics-haryana-punjab/pmgsy_education_medical_haryana_punjab.csv');
const COLUMN_MAP = path.join(REPO_ROOT, 'fixtures/column-maps/pmgsy-facilities.json');
/** The whole file: 19,118 facilities. */
const ROWS = 19_118;
/** Every 10th row gets an unreadable latitude: 1,911 rows fail for it. */
const BAD_EVERY = 10;
const BROKEN = Math.floor(ROWS / BAD_EVERY);

// Needs Debian's Chromium (installed by .ci/run) and the PMGSY file in ../shared; skipped without
// either, the title naming the absent path.
const why = absent([CHROMIUM], NEEDS_CHROMIUM) || absent([PMGSY], NEEDS_SHARED);

/** The PMGSY file with every BAD_EVERY-th record's latitude broken. */
async function pmgsyWithErrors(): Promise<Buffer> {
  const records: string[][] = [];
  for await (const record of createReadStream(PMGSY).pipe(parse({ relax_column_count: true })) as AsyncIterable<string[]>) records.push(record);
  const [header, ...rows] = records;
  const lat = header.indexOf('latitude');
  rows.forEach((row, i) => {
    if ((i + 1) % BAD_EVERY === 0) row[lat] = 'north-ish';
  });
  return csv(header, rows);
}

/** axe-core's serious and critical violations on the page (injected from node_modules). */
async function seriousViolations(page: Page): Promise<{ id: string; impact: string; nodes: number }[]> {
  await page.addScriptTag({ path: require.resolve('axe-core/axe.min.js') });
  const violations = await page.evaluate(async () => {
    const result = await (window as unknown as { axe: { run: (c: unknown, o: unknown) => Promise<{ violations: { id: string; impact: string; nodes: unknown[] }[] }> } })
      .axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.length }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

describe.skipIf(why !== '')(titled('operator console in headless Chromium', why), () => {
  let platform: TestPlatform;
  let agg: TestAggregator;
  let browser: BrowserContext;
  let profileDir: string;
  let fileDir: string;
  let page: Page;
  let mappingId: string;
  const eventRequests: string[] = [];
  let failedOrSkipped = 0;
  const shot = (name: string) => page.screenshot({ path: path.join(ARTIFACTS, `console-${name}.png`), fullPage: true });

  beforeAll(async () => {
    platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true, env: { BULK_UPLOAD_CHUNK_ROWS: '1000' } });
    agg = await platform.aggregator({ name: 'Haryana Health Mission', types: ['provider'] });
    const saved = await request(platform.url('aggregator')).post('/v1/bulk-uploads/mappings').set('authorization', `Bearer ${agg.token}`)
      .send({ name: 'PMGSY facilities', participant_type: 'provider', mapping: JSON.parse(await readFile(COLUMN_MAP, 'utf8')) });
    expect(saved.status).toBe(201);
    mappingId = saved.body.id;
    fileDir = await tempDir('ldp-console-file-');
    await writeFile(path.join(fileDir, 'pmgsy-with-errors.csv'), await pmgsyWithErrors());
    await mkdir(ARTIFACTS, { recursive: true });
    profileDir = await tempDir('ldp-chromium-');
    browser = await chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM,
      headless: true,
      // axe-core and jsQR are injected by the test; the console's own CSP forbids injected scripts.
      bypassCSP: true,
      viewport: { width: 1100, height: 800 },
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
    page = browser.pages()[0] ?? await browser.newPage();
    page.on('request', (r) => { if (r.url().endsWith('/events')) eventRequests.push(r.url()); });
  }, 90_000);
  afterAll(async () => {
    await browser?.close();
    await platform?.stop();
    for (const dir of [profileDir, fileDir]) if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('signs in with a console link', async () => {
    await page.goto(await consoleLinkFor(platform, agg, 'operator'));
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/console/uploads');
    await expect(page.locator('h1').textContent()).resolves.toBe('Uploads');
    expect(await seriousViolations(page)).toEqual([]);
    await shot('uploads');
  });

  it('uploads the whole PMGSY file with the saved mapping and follows its progress to completion', async () => {
    await page.getByLabel('Participant type').selectOption('provider');
    await page.getByLabel('Saved mapping').selectOption(mappingId);
    await page.getByLabel('File (CSV or XLSX)').setInputFiles(path.join(fileDir, 'pmgsy-with-errors.csv'));
    await page.getByRole('button', { name: 'Upload', exact: true }).click();
    await page.waitForURL(/\/console\/uploads\/[0-9a-f-]{36}$/);
    expect(await seriousViolations(page)).toEqual([]);
    // A dry run of the first 50 rows first: rows 11, 21, 31, 41 and 51 would fail.
    await page.getByRole('button', { name: 'Try the first 50 rows (nothing is saved)' }).click();
    await page.locator('#dry-run-rows').waitFor();
    await expect(page.locator('#dry-run [role="status"]').textContent())
      .resolves.toBe('Of the first 50 rows, 45 would pass, 5 would fail and 0 would be skipped.');
    expect(await seriousViolations(page)).toEqual([]);
    await shot('upload-dry-run');
    await page.getByLabel('I attest that I have the authority to onboard these participants.').check();
    await page.getByRole('button', { name: 'Start the upload' }).click();
    // The page follows the job over SSE and reloads itself once, at the end.
    await page.locator('[data-field="status"]', { hasText: 'completed' }).waitFor({ timeout: 240_000 });
    expect(eventRequests.length).toBeGreaterThan(0);
    const count = async (field: string) => Number(await page.locator(`[data-field="${field}"]`).textContent());
    expect(await count('processed_rows')).toBe(ROWS);
    expect(await count('total_rows')).toBe(ROWS);
    failedOrSkipped = await count('failed') + await count('skipped');
    expect(await count('failed')).toBeGreaterThanOrEqual(BROKEN);
    expect(await count('passed') + failedOrSkipped).toBe(ROWS);
    expect(await seriousViolations(page)).toEqual([]);
    await shot('upload-completed');
  });

  it('shows the failed rows with their reasons, pages them and offers the error report', async () => {
    const rows = page.locator('#problem-rows tbody tr');
    await expect(rows.count()).resolves.toBe(25);
    await expect(page.locator('#problem-rows tbody tr', { hasText: 'latitude must be a number (got "north-ish")' }).first()
      .locator('td').first().textContent()).resolves.toBe(String(BAD_EVERY + 1));
    await page.locator('#problem-rows').getByRole('link', { name: 'Next page' }).click();
    await page.locator('#problem-rows caption', { hasText: 'page 2' }).waitFor();
    await expect(rows.count()).resolves.toBe(25);
    const download = page.waitForEvent('download');
    await page.getByRole('link', { name: 'Download the error report (CSV)' }).click();
    const file = await (await download).path();
    const report = parseCsv(await readFile(file, 'utf8'), { relax_column_count: true }) as string[][];
    expect(report).toHaveLength(failedOrSkipped + 1);
    expect(report.filter((r) => r.includes('north-ish'))).toHaveLength(BROKEN);
    await shot('upload-error-rows');
  });

  it('creates and activates a registration link whose QR code reads back as its public URL', async () => {
    await page.goto(`${platform.url('aggregator')}/console/links`);
    await page.getByLabel('Short name (slug)').fill('kaithal-clinics');
    await page.getByRole('button', { name: 'Create the link' }).click();
    await page.waitForURL(/\/console\/links\/[0-9a-f-]{36}$/);
    await page.getByRole('button', { name: 'Activate' }).click();
    await page.locator('#qr').waitFor();
    const publicUrl = await page.getByLabel('Public address').inputValue();
    expect(publicUrl).toMatch(/\/r\/[a-z0-9-]+\/kaithal-clinics$/);
    await page.addScriptTag({ path: require.resolve('jsqr/dist/jsQR.js') });
    const decoded = await page.evaluate(async () => {
      const img = document.getElementById('qr') as HTMLImageElement;
      await img.decode();
      const canvas = document.createElement('canvas');
      canvas.width = 480;
      canvas.height = 480;
      const g = canvas.getContext('2d')!;
      g.fillStyle = '#fff';
      g.fillRect(0, 0, 480, 480);
      g.drawImage(img, 0, 0, 480, 480);
      const data = g.getImageData(0, 0, 480, 480);
      const jsQR = (window as unknown as { jsQR: (d: Uint8ClampedArray, w: number, h: number) => { data: string } | null }).jsQR;
      return jsQR(data.data, 480, 480)?.data ?? null;
    });
    expect(decoded).toBe(publicUrl);
    await expect(page.locator('[data-field="status"]').textContent()).resolves.toBe('live');
    expect(await seriousViolations(page)).toEqual([]);
    await shot('link');
  });

  it('shows the dashboard charts and participants, then the same in Hindi', async () => {
    await page.goto(`${platform.url('aggregator')}/console/dashboard`);
    await expect(page.locator('figure.chart svg[role="img"]').count()).resolves.toBe(3);
    await expect(page.locator('figure.chart svg').nth(2).getAttribute('aria-label')).resolves.toBe('Upload rows by outcome');
    await expect(page.locator('tbody tr').count()).resolves.toBe(25);
    expect(await seriousViolations(page)).toEqual([]);
    await shot('dashboard');
    await page.getByRole('button', { name: 'हिन्दी' }).click();
    await page.waitForURL('**/console/dashboard');
    await expect(page.locator('h1').textContent()).resolves.toBe('डैशबोर्ड');
    await expect(page.locator('html').getAttribute('lang')).resolves.toBe('hi');
    expect(await seriousViolations(page)).toEqual([]);
    await shot('dashboard-hindi');
  });
});
