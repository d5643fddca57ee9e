/**
 * Discover when the search service misbehaves: a real local HTTP server stands at SEARCH_URL and
 * hangs (timeout path), fails (5xx, no JSON, refused key) or refuses the request (4xx). It also
 * records the `/v1/search` request discover sends, to check the translation.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import request from 'supertest';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { discoverItems, PLACES, storeItems, type DiscoverItems } from '../helpers/discover-items.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

type Behaviour = (req: IncomingMessage, res: ServerResponse) => void;

let platform: TestPlatform;
let key: string;
let items: DiscoverItems;
let server: Server;
let behaviour: Behaviour;
let received: { url: string; headers: IncomingMessage['headers']; body: any; closed: Promise<unknown> }[];

const providers = { item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility' };
const discover = (body: Record<string, unknown>) =>
  request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key).send({ ...providers, ...body });
const answer = (status: number, body: string, type = 'application/json'): Behaviour => (_req, res) => {
  res.writeHead(status, { 'content-type': type }).end(body);
};

beforeAll(async () => {
  server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8').on('data', (chunk) => { raw += chunk; }).on('end', () => {
      received.push({ url: req.url!, headers: req.headers, body: JSON.parse(raw), closed: once(req.socket, 'close') });
      behaviour(req, res);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  platform = await startTestPlatform({ services: ['signals'], env: { SEARCH_URL: `http://127.0.0.1:${port}`, SEARCH_TIMEOUT_MS: '300' } });
  key = await platform.apiKey('signals');
  items = discoverItems();
  await storeItems(platform.url('signals'), key, items);
});
beforeEach(() => {
  received = [];
});
afterAll(async () => {
  await platform.stop();
  server.closeAllConnections();
  server.close();
});

describe('discover when the search service fails', () => {
  it('answers natively when the search service does not answer within SEARCH_TIMEOUT_MS, and drops the connection', async () => {
    behaviour = () => {}; // never answers
    const res = await discover({ q: 'school' });
    expect(res.status).toBe(200);
    expect(res.body.meta).toMatchObject({ source: 'native_fallback', degraded: true, total: 2, sort_applied: 'relevance', anchor_applied: false });
    expect(received).toHaveLength(1);
    await received[0].closed; // the client aborted the hanging request
  });

  it.each([
    ['500 with JSON', answer(500, JSON.stringify({ error: 'internal_error', message: 'boom' }))],
    ['503 with an HTML page', answer(503, '<html>unavailable</html>', 'text/html')],
    ['200 that is not JSON', answer(200, 'ok', 'text/plain')],
    ['200 without items', answer(200, JSON.stringify({ message: { meta: { total: 1 } } }))],
    ['401: our internal key is refused', answer(401, JSON.stringify({ error: 'invalid_api_key', message: 'Unknown or revoked API key' }))],
    ['429: overloaded', answer(429, JSON.stringify({ error: 'rate_limited', message: 'slow down' }))],
    ['404 for the route: SEARCH_URL points at something else', answer(404, JSON.stringify({ error: 'not_found', message: 'No route for POST /v1/search' }))],
  ])('answers natively when the search service answers %s', async (_name, b) => {
    behaviour = b;
    const res = await discover({ filters: [{ field: 'category', values: ['Education'] }] });
    expect(res.status).toBe(200);
    expect(res.body.meta).toMatchObject({ source: 'native_fallback', degraded: true, total: 3, sort_applied: 'newest' });
    expect(received).toHaveLength(1);
  });

  it.each([
    [400, 'invalid_filter', 'filters.0: unknown operator'],
    [403, 'interaction_not_allowed', 'seeker items may not discover seeker items'],
    [404, 'anchor_not_found', 'no indexed item 1'],
    [422, 'unprocessable', 'cannot do that'],
  ])('passes a %i of the search service on as its own error, in shape A', async (status, error, message) => {
    behaviour = answer(status, JSON.stringify({ error, message }));
    const res = await discover({});
    expect(res.status).toBe(status);
    expect(res.body).toEqual({ error, message });
  });

  it('sends the search service the spec envelope with the internal key', async () => {
    behaviour = answer(500, '{}');
    const anchor = items.electrician.item_id;
    await discover({
      q: 'computer lab', anchor_item_id: anchor, sort: 'relevance', limit: 5, offset: 10,
      filters: [{ field: 'category', values: ['Education', 'Medical'] }, { field: 'services', values: ['computer lab'] }, { field: 'capacity', values: ['400'] }],
      item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 25_000,
      ordering_latitude: PLACES.pundri.lat, ordering_longitude: PLACES.pundri.lng,
      min_lat: 29.5, max_lat: 30, min_lng: 76, max_lng: 77,
    });
    expect(received).toHaveLength(1);
    const [{ url, headers, body }] = received;
    expect(url).toBe('/v1/search');
    expect(headers['x-api-key']).toBe(platform.ctx.internalApiKey);
    expect(headers['content-type']).toBe('application/json');
    expect(body.context).toEqual({
      version: '1.0.0', messageId: expect.stringMatching(/^[0-9a-f-]{36}$/), timestamp: expect.any(String),
      networkId: 'local-discovery', domain: 'provider', itemType: 'facility',
    });
    expect(body.message).toEqual({
      intent: {
        textSearch: 'computer lab',
        item: { id: anchor },
        spatial: [{ op: 's_dwithin', geometry: { type: 'Point', coordinates: [PLACES.karora.lng, PLACES.karora.lat] }, distanceMeters: 25_000 }],
        filters: [
          { op: 'in', target: 'item_state.category', value: ['Education', 'Medical'] },
          { op: 'contains_any', target: 'item_state.services', value: ['computer lab'] },
          { op: 'in', target: 'item_state.capacity', value: [400] },
          { op: 'gte', target: 'item_state.latitude', value: 29.5 },
          { op: 'lte', target: 'item_state.latitude', value: 30 },
          { op: 'gte', target: 'item_state.longitude', value: 76 },
          { op: 'lte', target: 'item_state.longitude', value: 77 },
        ],
        sort: 'relevance',
        orderingCenter: { type: 'Point', coordinates: [PLACES.pundri.lng, PLACES.pundri.lat] },
      },
      pagination: { limit: 5, offset: 10 },
    });

    await discover({ item_latitude: PLACES.karnal.lat, item_longitude: PLACES.karnal.lng });
    expect(received[1].body.message).toEqual({
      intent: { orderingCenter: { type: 'Point', coordinates: [PLACES.karnal.lng, PLACES.karnal.lat] } },
      pagination: { limit: 20, offset: 0 },
    });
  });
});
