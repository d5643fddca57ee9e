/**
 * Voice-campaign test helpers: participants stored through lib/aggregator/participants.ts, the local
 * voice provider run as its own process (`ldp voice-provider`), jobs created and followed through
 * the aggregator's HTTP API, the provider's call log read back.
 */
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import request from 'supertest';
import { insertParticipants } from '../../lib/aggregator/participants.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { spawnLdpUntil, stopChild } from './cli.ts';
import type { TestAggregator, TestPlatform } from './platform.ts';

export const PROVIDER_SECRET = 'test-voice-provider-secret-0123456789';

/**
 * Stores `phones.length` seekers of `agg` (a null phone: no phone, e-mail only); returns their ids
 * in order. Names may be given (default "Seeker N").
 */
export async function seedSeekers(platform: TestPlatform, agg: TestAggregator, phones: (string | null)[], names?: string[]): Promise<string[]> {
  const { ctx } = platform;
  const domain = ctx.network.domains.get('seeker')!;
  const people = phones.map((phone, i) => {
    const participantId = randomUUID();
    const email = `${participantId}@example.org`;
    const identity = { name: names?.[i] ?? `Seeker ${i}`, email, ...(phone ? { phone } : {}) };
    return {
      participantId,
      participant: { profile: { ...identity }, identity, locations: [] },
      keys: { phoneIndex: phone ? ctx.pii.blindIndex('phone', phone) : undefined, emailIndex: ctx.pii.blindIndex('email', email) },
    };
  });
  await withTransaction(ctx.pool, (client) => insertParticipants(client, ctx.pii, { aggregatorId: agg.aggregatorId, orgId: agg.orgId, domain }, people));
  return people.map((p) => p.participantId);
}

/** `count` distinct E.164 Indian mobile numbers starting at `from`, e.g. +919800000001. */
export function phones(count: number, from = 1): string[] {
  return Array.from({ length: count }, (_, i) => `+9198${String(from + i).padStart(8, '0')}`);
}

export interface ProviderProcess {
  child: ChildProcess;
  url: string;
  logFile: string;
  stop(): Promise<void>;
}

/** Starts `ldp voice-provider --port 0 --log <dir>/provider.log ...args` and waits until it listens. */
export async function startProvider(dir: string, args: string[] = []): Promise<ProviderProcess> {
  const logFile = path.join(dir, `provider-${randomUUID()}.log`);
  const { child, out } = await spawnLdpUntil(['voice-provider', '--port', '0', '--log', logFile, ...args],
    { VOICE_PROVIDER_SECRET: PROVIDER_SECRET, DATA_DIR: dir }, (o) => /listening on (\S+)/.test(o));
  const url = /listening on (\S+)/.exec(out)![1];
  return { child, url, logFile, stop: async () => { await stopChild(child); } };
}

export interface LogEntry {
  event: 'call' | 'replay' | 'callback';
  idempotency_key?: string;
  provider_ref?: string;
  batch_ref?: string;
  status?: number | string;
}

/** The provider's log entries. */
export async function providerLog(logFile: string): Promise<LogEntry[]> {
  const text = await readFile(logFile, 'utf8').catch(() => '');
  return text.split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

/** How many `call` entries each idempotency key has. */
export function callsPerKey(entries: LogEntry[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const e of entries) if (e.event === 'call') counts.set(e.idempotency_key!, (counts.get(e.idempotency_key!) ?? 0) + 1);
  return counts;
}

/** `POST /v1/campaign/voice` with an Idempotency-Key (a fresh one unless given). */
export function createVoiceJob(platform: TestPlatform, token: string, body: object, key: string = randomUUID()) {
  return request(platform.url('aggregator')).post('/v1/campaign/voice')
    .set('authorization', `Bearer ${token}`).set('idempotency-key', key).send(body);
}

/** `GET /v1/campaign/voice/{id}` with an optional query. */
export function getVoiceJob(platform: TestPlatform, token: string, jobId: string, query: Record<string, string | number> = {}) {
  return request(platform.url('aggregator')).get(`/v1/campaign/voice/${jobId}`).query(query).set('authorization', `Bearer ${token}`);
}

const FINAL = new Set(['completed', 'partial', 'failed']);

/**
 * Polls the job until `done(body)` (default: its status is final); returns the last body.
 * `path` defaults to the voice job (an export job is read from the list).
 */
export async function waitForVoiceJob(platform: TestPlatform, token: string, jobId: string,
  done: (job: any) => boolean = (job) => FINAL.has(job.status), timeoutMs = 60_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await getVoiceJob(platform, token, jobId, { items_limit: 1000 });
    if (res.status !== 200) throw new Error(`GET voice job answered ${res.status}: ${JSON.stringify(res.body)}`);
    if (done(res.body)) return res.body;
    if (Date.now() > deadline) throw new Error(`voice job ${jobId} not done after ${timeoutMs} ms: ${JSON.stringify(res.body.counts)} ${res.body.status}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A job of either channel as the list shows it. */
export async function listedJob(platform: TestPlatform, token: string, jobId: string): Promise<any> {
  const res = await request(platform.url('aggregator')).get('/v1/campaign/voice').query({ limit: 200 }).set('authorization', `Bearer ${token}`);
  return res.body.voice_jobs.find((j: any) => j.job_id === jobId);
}
