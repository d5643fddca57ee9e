/**
 * The reference page `GET /docs` of each service (Swagger UI served from node_modules) in a real
 * headless Chromium (Debian's package, /usr/bin/chromium) with the network to anything but the
 * service blocked: the page renders offline and lists the service's routes. A screenshot of each
 * page is kept in test-artifacts/ (git-ignored).
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceName } from '../../api/http/service-app.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { absent, CHROMIUM, NEEDS_CHROMIUM, titled } from '../helpers/requires.ts';

const ARTIFACTS = path.join(REPO_ROOT, 'test-artifacts');
const SERVICES: ServiceName[] = ['signals', 'search', 'aggregator'];

// Needs Debian's Chromium (installed by .ci/run); skipped without it, the title naming the absent path.
const noChromium = absent([CHROMIUM], NEEDS_CHROMIUM);
describe.skipIf(noChromium !== '')(titled('the /docs reference page in headless Chromium', noChromium), () => {
  let platform: TestPlatform;
  let browser: BrowserContext;
  let profile: string;

  beforeAll(async () => {
    platform = await startTestPlatform();
    profile = await mkdtemp(path.join(os.tmpdir(), 'ldp-chromium-'));
    // A fresh profile (--user-data-dir, which playwright passes from the first argument).
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 2000 },
      args: [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync',
      ],
    });
    await mkdir(ARTIFACTS, { recursive: true });
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.stop();
    if (profile) await rm(profile, { recursive: true, force: true });
  });

  it.each(SERVICES)('lists every route of the %s service, with nothing fetched from outside', async (service) => {
    const base = platform.url(service);
    const doc = (await request(base).get('/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
    const expected = Object.entries(doc.paths).flatMap(([p, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${p}`));

    const page = await browser.newPage();
    const outside: string[] = [];
    await page.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith(base) || url.startsWith('data:')) return route.continue();
      outside.push(url);
      return route.abort();
    });
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(err.message));
    try {
      const res = await page.goto(`${base}/docs`);
      expect(res?.status()).toBe(200);
      await page.locator('.opblock').first().waitFor({ timeout: 20_000 });
      const listed = await page.locator('.opblock').evaluateAll((blocks) => blocks.map((b) => {
        const method = b.querySelector('.opblock-summary-method')?.textContent?.trim() ?? '';
        const route = b.querySelector('.opblock-summary-path')?.getAttribute('data-path') ?? b.querySelector('.opblock-summary-path')?.textContent ?? '';
        return `${method} ${route.replace(/\u200b/g, '').trim()}`;
      }));
      expect(listed.sort()).toEqual(expected.sort());
      await expect(page.locator('.title').first().textContent()).resolves.toContain(service);
      await page.screenshot({ path: path.join(ARTIFACTS, `docs-${service}.png`), fullPage: true });
      expect(outside).toEqual([]);
      expect(errors).toEqual([]);
    } finally {
      await page.close();
    }
  }, 60_000);
});
