/**
 * The registration form page in a real browser: headless Chromium (Debian's `chromium`, installed
 * by .ci/run) driven by playwright-core, with JavaScript disabled to prove the plain-HTML path.
 * It opens a live link's public_url, sees field errors next to their fields, registers, sees the
 * same phone skipped, then the rate limit; the registered page is kept as a screenshot under
 * test-artifacts/. Skipped, saying why, only when /usr/bin/chromium is absent.
 */
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.ts';
import { startTestPlatform, tempDir, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { absent, CHROMIUM, NEEDS_CHROMIUM, titled } from '../helpers/requires.ts';

const ARTIFACTS = path.join(REPO_ROOT, 'test-artifacts');
// Needs Debian's Chromium (installed by .ci/run); skipped without it, the title naming the absent path.
const noChromium = absent([CHROMIUM], NEEDS_CHROMIUM);

describe.skipIf(noChromium !== '')(titled('registration form page in headless Chromium', noChromium), () => {
  let platform: TestPlatform;
  let agg: TestAggregator;
  let browser: BrowserContext;
  let profileDir: string;
  let page: Page;
  let publicUrl: string;

  beforeAll(async () => {
    platform = await startTestPlatform({ env: { EMBEDDING_PROVIDER: 'hashing', REGISTRATION_RATE_LIMIT_POINTS: '3' } });
    agg = await platform.aggregator({ types: ['seeker'], name: 'Kaithal Youth Skills' });
    const res = await request(platform.url('aggregator')).post('/v1/links/create').set('authorization', `Bearer ${agg.token}`)
      .send({ domain: 'seeker', slug: 'kaithal-camp' });
    const activated = await request(platform.url('aggregator')).post(`/v1/links/${res.body.link_id}/activate`).set('authorization', `Bearer ${agg.token}`);
    publicUrl = activated.body.public_url;
    profileDir = await tempDir('ldp-chromium-');
    browser = await chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM,
      headless: true,
      javaScriptEnabled: false,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
    page = browser.pages()[0] ?? await browser.newPage();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await platform?.stop();
    if (profileDir) await rm(profileDir, { recursive: true, force: true });
  });

  it('shows the form generated from the participant schema', async () => {
    const response = await page.goto(publicUrl);
    expect(response?.status()).toBe(200);
    await expect(page.title()).resolves.toBe('Register with Kaithal Youth Skills');
    expect(await page.getByLabel('Full name').getAttribute('aria-required')).toBe('true');
    expect(await page.getByLabel('Mobile number').getAttribute('type')).toBe('tel');
    expect(await page.locator('#f-gender option').allTextContents()).toEqual(['— choose —', 'female', 'male', 'other', 'prefer not to say']);
    expect(await page.locator('#f-languages').getAttribute('multiple')).not.toBeNull();
    expect(await page.locator('input[type=checkbox]').count()).toBe(2);
    expect(await page.locator('.qr img').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)).toBeGreaterThan(0);
  });

  it('shows field errors next to their fields and keeps what was typed', async () => {
    await page.getByLabel('Full name').fill('Meena Devi');
    await page.getByLabel('Mobile number').fill('12345');
    await page.getByRole('button', { name: 'Register' }).click();
    await expect(page.locator('#problems').isVisible()).resolves.toBe(true);
    expect(await page.locator('#f-phone-error').textContent()).toContain('phone must be a valid phone number');
    expect(await page.locator('#f-state-error').textContent()).toContain('state is required');
    expect(await page.getByLabel('Mobile number').getAttribute('aria-invalid')).toBe('true');
    expect(await page.getByLabel('Full name').inputValue()).toBe('Meena Devi');
    await mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'registration-form-errors.png'), fullPage: true });
  });

  it('registers the participant and says so', async () => {
    await page.goto(publicUrl);
    await page.getByLabel('Full name').fill('Meena Devi');
    await page.getByLabel('Mobile number').fill('98123 45670');
    await page.locator('#f-email').fill('meena@example.in');
    await page.locator('#f-gender').selectOption('female');
    await page.locator('#f-skills').fill('tailoring\nembroidery');
    await page.locator('#f-languages').selectOption(['Hindi', 'Punjabi']);
    await page.locator('#f-district').fill('Kaithal');
    await page.locator('#f-state').selectOption('Haryana');
    await page.locator('#f-consent_terms').check();
    await page.locator('#f-consent_privacy').check();
    await page.getByRole('button', { name: 'Register' }).click();
    await expect(page.locator('h1').textContent()).resolves.toBe('You are registered');
    await page.screenshot({ path: path.join(ARTIFACTS, 'registration-form-registered.png'), fullPage: true });
    const { rows } = await platform.ctx.pool.query('SELECT profile, consent FROM aggregator.participants WHERE aggregator_id = $1', [agg.aggregatorId]);
    expect(rows).toHaveLength(1);
    expect(rows[0].profile).toMatchObject({ skills: ['tailoring', 'embroidery'], languages: ['Hindi', 'Punjabi'], gender: 'female', state: 'Haryana' });
    expect(Object.keys(rows[0].consent).sort()).toEqual(['consent_privacy', 'consent_terms']);
  });

  it('says the same phone is already registered, then that the link is rate-limited', async () => {
    await page.goto(publicUrl);
    await page.getByLabel('Full name').fill('Meena D');
    await page.getByLabel('Mobile number').fill('+919812345670');
    await page.locator('#f-state').selectOption('Haryana');
    const skipped = page.waitForResponse((r) => r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Register' }).click();
    expect((await skipped).status()).toBe(409);
    await expect(page.locator('h1').textContent()).resolves.toBe('Already registered');
    // Three submissions so far (limit 3): the fourth is refused.
    await page.goto(publicUrl);
    const limited = page.waitForResponse((r) => r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Register' }).click();
    const response = await limited;
    expect(response.status()).toBe(429);
    expect(Number(response.headers()['retry-after'])).toBeGreaterThan(0);
    await expect(page.locator('h1').textContent()).resolves.toBe('Too many registrations');
    await page.screenshot({ path: path.join(ARTIFACTS, 'registration-form-rate-limited.png') });
  });

  it('answers 404 for an unknown link', async () => {
    const response = await page.goto(new URL(`/r/${agg.orgSlug}/no-such-link`, publicUrl).href);
    expect(response?.status()).toBe(404);
    await expect(page.locator('h1').textContent()).resolves.toBe('Registration link not found');
  });
});
