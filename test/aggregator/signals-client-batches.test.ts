/**
 * The signals client's item pushes (lib/clients/signals-client.ts `pushItems`) against a real
 * signals service: split into requests of PUSH_ITEMS_PER_REQUEST items, so that one request never
 * holds signals' event loop for long (docs/decisions.md "Search under load"), the answers in input order.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createSignalsClient, PUSH_ITEMS_PER_REQUEST } from '../../lib/clients/signals-client.ts';
import { healthCentre } from '../helpers/discover-items.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals'] });
});
afterAll(() => platform?.stop());

/** Requests signals has answered on its batch route (its request-duration histogram's count). */
async function batchRequests(): Promise<number> {
  const metric = await platform.ctx.metrics.httpRequestDuration.get();
  return metric.values.filter((v) => v.metricName === 'http_request_duration_seconds_count' && v.labels.route === '/api/v1/items/batch')
    .reduce((n, v) => n + v.value, 0);
}

it('pushes items in requests of PUSH_ITEMS_PER_REQUEST, and answers each item in input order', async () => {
  const signals = createSignalsClient({ baseUrl: platform.url('signals'), apiKey: platform.ctx.internalApiKey, maxBodyBytes: platform.config.HTTP_BODY_LIMIT });
  const items = Array.from({ length: 2 * PUSH_ITEMS_PER_REQUEST + 50 }, (_, i) => healthCentre(i));
  const before = await batchRequests();
  const answers = await signals.pushItems(items);
  expect(await batchRequests() - before).toBe(3);
  expect(answers.map((a) => [a.item_id, a.outcome])).toEqual(items.map((i) => [i.item_id, 'created']));
});
