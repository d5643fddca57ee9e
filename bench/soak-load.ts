/**
 * The load generator of `bench:soak` (bench/soak.ts), run as its own process so that the
 * benchmark's other work (uploads of large files, RSS samples, job polls) never delays a send:
 * `node --import tsx bench/soak-load.ts CONFIG_FILE` (a `LoadConfig` as JSON: it holds keys and a token).
 *
 * An open model at fixed rates: request i of a route is scheduled at t0 + i / rate and sent then,
 * whether or not earlier answers have come (a new keep-alive connection when all are busy; undici's
 * Agent has no connection limit per origin). Its latency runs from the scheduled time to the last
 * byte of the answer, so a send made late by this process (a busy event loop) counts against the
 * measurement, never hides server delay (no coordinated omission); the send lag is recorded too.
 *
 * Prints one line `{"t0_epoch_ms": …}` when the schedule starts, then writes every request's record
 * (see `LoadResult`) as JSON to `config.out` and exits.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { Agent, request } from 'undici';
import { TEXTS } from './search-queries.ts';

/** What bench/soak.ts passes. Rates are requests per second; `seconds` the whole schedule. */
export interface LoadConfig {
  out: string;
  seconds: number;
  rates: { search: number; discover: number; dashboard: number; registration: number };
  search: { url: string; key: string; networkId: string; domain: string; itemType: string };
  discover: { url: string; key: string };
  dashboard: { url: string; token: string };
  /** `slugs`: the live registration links of `orgSlug`, used in turn. */
  registration: { url: string; orgSlug: string; slugs: string[]; peopleFile: string };
}

export const ROUTES = ['search', 'discover', 'dashboard', 'registration'] as const;
export type Route = (typeof ROUTES)[number];

/**
 * One request: route, scheduled time (ms after t0), latency from it (ms), send lag (ms after the
 * scheduled time that the request was handed to undici), HTTP status (0: no answer) and the error
 * code when there was none; `fallback` for discover answered from signals' own items.
 */
export interface LoadRecord { route: Route; at: number; ms: number; lag: number; status: number; error?: string; fallback?: boolean }

export interface LoadResult {
  t0_epoch_ms: number;
  records: LoadRecord[];
  /** submission_id of every registration answered 201. */
  registered: string[];
  /** This process's CPU seconds (it shares the machine with what it measures). */
  cpu_seconds: number;
}

const TIMEOUT_MS = 60_000;

async function main(): Promise<void> {
  const config = JSON.parse(await readFile(process.argv[2], 'utf8')) as LoadConfig;
  const people = JSON.parse(await readFile(config.registration.peopleFile, 'utf8')) as Record<string, unknown>[];
  const agent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: TIMEOUT_MS, bodyTimeout: TIMEOUT_MS, connect: { timeout: 10_000 } });
  const json = { 'content-type': 'application/json' };
  const { search, discover, dashboard, registration } = config;

  /** The request of route `route` numbered `i`: method, URL, headers, body. */
  const build: Record<Route, (i: number) => { method: 'GET' | 'POST'; url: string; headers: Record<string, string>; body?: string }> = {
    // bench/search.ts's text queries: its 20 texts, a third of the pages at offset 20.
    search: (i) => ({
      method: 'POST', url: `${search.url}/v1/search`, headers: { ...json, 'x-api-key': search.key },
      body: JSON.stringify({
        context: { messageId: `soak-${i}`, networkId: search.networkId, domain: search.domain, itemType: search.itemType },
        message: { intent: { textSearch: TEXTS[i % TEXTS.length] }, pagination: { limit: 20, offset: i % 3 === 0 ? 20 : 0 } },
      }),
    }),
    discover: (i) => ({
      method: 'POST', url: `${discover.url}/api/v1/network/item/discover`, headers: { ...json, 'x-api-key': discover.key },
      body: JSON.stringify({
        item_network: search.networkId, item_domain: search.domain, item_type: search.itemType,
        q: TEXTS[(i * 7) % TEXTS.length], limit: 20, offset: i % 3 === 0 ? 20 : 0,
      }),
    }),
    dashboard: () => ({ method: 'GET', url: `${dashboard.url}/v1/dashboard`, headers: { authorization: `Bearer ${dashboard.token}` } }),
    registration: (i) => ({
      method: 'POST', url: `${registration.url}/public/v1/aggregators/${registration.orgSlug}/registrations/${registration.slugs[i % registration.slugs.length]}`,
      headers: json, body: JSON.stringify(people[i % people.length]),
    }),
  };

  const records: LoadRecord[] = [];
  const registered: string[] = [];
  const inFlight = new Set<Promise<void>>();
  const t0 = performance.now() + 500;
  const end = t0 + config.seconds * 1000;

  const send = (route: Route, i: number, scheduled: number) => {
    const { method, url, headers, body } = build[route](i);
    const lag = performance.now() - scheduled;
    const done = (async () => {
      const record: LoadRecord = { route, at: Math.round(scheduled - t0), ms: 0, lag: Number(lag.toFixed(1)), status: 0 };
      try {
        const res = await request(url, { method, headers, body, dispatcher: agent });
        const text = await res.body.text();
        record.status = res.statusCode;
        if (route === 'discover' && res.statusCode === 200) record.fallback = (JSON.parse(text) as { meta: { source: string } }).meta.source !== 'signals_search';
        if (route === 'registration' && res.statusCode === 201) registered.push((JSON.parse(text) as { submission_id: string }).submission_id);
      } catch (err) {
        record.error = (err as { code?: string }).code ?? (err as Error).name;
      }
      record.ms = Number((performance.now() - scheduled).toFixed(2));
      records.push(record);
    })();
    inFlight.add(done);
    void done.finally(() => inFlight.delete(done));
  };

  /** Sends every request of `route` that is due (several at once after a stall), then sleeps until the next. */
  const run = (route: Route, rate: number) => new Promise<void>((resolve) => {
    if (!(rate > 0)) return resolve();
    let i = 0;
    const tick = () => {
      for (;;) {
        const scheduled = t0 + (i * 1000) / rate;
        if (scheduled >= end) return resolve();
        const wait = scheduled - performance.now();
        if (wait > 0) {
          setTimeout(tick, wait);
          return;
        }
        send(route, i++, scheduled);
      }
    };
    setTimeout(tick, t0 - performance.now());
  });

  process.stdout.write(`${JSON.stringify({ t0_epoch_ms: Math.round(performance.timeOrigin + t0) })}\n`);
  await Promise.all(ROUTES.map((route) => run(route, config.rates[route])));
  while (inFlight.size) await Promise.all([...inFlight]);
  await agent.close();
  const cpu = process.cpuUsage();
  const result: LoadResult = {
    t0_epoch_ms: Math.round(performance.timeOrigin + t0), records, registered, cpu_seconds: Number(((cpu.user + cpu.system) / 1e6).toFixed(1)),
  };
  await writeFile(config.out, JSON.stringify(result));
}

// bench/soak.ts imports this module's types and ROUTES; only a run as a program sends load.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
