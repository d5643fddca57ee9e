/**
 * A small local voice provider speaking protocol.ts (for the embedded default, tests and benches;
 * run as its own process by `ldp voice-provider`): it verifies the signature of each batch (401
 * otherwise), "places" each call once per idempotency key — a key seen before is answered with its
 * first ref, `replayed: true`, and no second call — and, after `delayMs`, calls back the batch's
 * `callback_url` with signed status updates (`failed` for a `failureRate` share of calls, else
 * `sent`; `failTo` and `holdTo` make chosen numbers fail or never be called back), retrying a
 * refused callback with backoff.
 *
 * Every call placed and every replay is written to `log` as one JSON line
 * (`{"event":"call"|"replay","idempotency_key","provider_ref","batch_ref","at"}`), so that a
 * test can prove no item was called twice; the log file given at start is read back, so a
 * restarted provider still recognises the keys it placed.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import type { Writable } from 'node:stream';
import { BATCH_PATH, providerBatchSchema, type CallbackUpdate, type ProviderCallAnswer } from './protocol.ts';
import { SIGNATURE_HEADER, signBody, verifySignature } from './signature.ts';

export interface LocalProviderOptions {
  port: number;
  host?: string;
  secret: string;
  /** Share (0..1) of calls that end `failed`. */
  failureRate?: number;
  /** Share (0..1) of batch submissions refused with 503 (to exercise the caller's retries). */
  rejectRate?: number;
  /** Milliseconds between accepting a batch and calling back. */
  delayMs?: number;
  /** Milliseconds between placing a batch's calls (and logging them) and answering the submission. */
  latencyMs?: number;
  /** Calls to numbers matching this end `failed` (deterministic failures, for tests). */
  failTo?: RegExp;
  /** Calls to numbers matching this are never called back (they stay submitted, for tests). */
  holdTo?: RegExp;
  /** Call back at all (default true). */
  callbacks?: boolean;
  /** Updates per callback request (default 1000). */
  callbackBatch?: number;
  /** Where the JSON-lines log goes. */
  log: Writable;
  /** A previous log to read the placed calls back from. */
  previousLog?: string;
  /** Problems (a callback given up, a bad request) are reported here. */
  onProblem?: (message: string) => void;
}

export interface LocalProvider {
  url: string;
  server: Server;
  /** Stops accepting batches and waits for the callbacks under way. */
  close(): Promise<void>;
}

const MAX_BODY = 32 * 1024 * 1024;
const ERROR_REASONS = ['no_answer', 'busy', 'invalid_number'];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function readBody(req: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        resolve(null);
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** Reads the calls placed according to a previous log (missing file: none). */
async function placedCalls(file: string | undefined): Promise<Map<string, { provider_ref: string; batch_ref: string }>> {
  const placed = new Map<string, { provider_ref: string; batch_ref: string }>();
  if (!file) return placed;
  try {
    for await (const line of createInterface({ input: createReadStream(file) })) {
      if (!line.trim()) continue;
      const entry = JSON.parse(line);
      if (entry.event === 'call') placed.set(entry.idempotency_key, { provider_ref: entry.provider_ref, batch_ref: entry.batch_ref });
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  return placed;
}

/** Starts the provider (see the module comment); resolves once it listens. */
export async function startLocalVoiceProvider(options: LocalProviderOptions): Promise<LocalProvider> {
  const placed = await placedCalls(options.previousLog);
  const pendingCallbacks = new Set<Promise<void>>();
  const report = options.onProblem ?? (() => {});
  const callbackBatch = options.callbackBatch ?? 1000;

  async function callBack(url: string, batchRef: string, updates: CallbackUpdate[]): Promise<void> {
    await sleep(options.delayMs ?? 0);
    for (let i = 0; i < updates.length; i += callbackBatch) {
      const body = JSON.stringify({ batch_ref: batchRef, updates: updates.slice(i, i + callbackBatch) });
      for (let attempt = 0; ; attempt++) {
        const status = await fetch(url, {
          method: 'POST', body, signal: AbortSignal.timeout(30_000),
          headers: { 'content-type': 'application/json', [SIGNATURE_HEADER]: signBody(options.secret, body) },
        }).then(async (res) => { await res.arrayBuffer(); return res.status; }, (err: Error) => err.message);
        options.log.write(`${JSON.stringify({ event: 'callback', batch_ref: batchRef, updates: Math.min(callbackBatch, updates.length - i), status, at: new Date().toISOString() })}\n`);
        if (status === 200) break;
        if (attempt >= 5 || status === 401 || status === 400) {
          report(`callback of batch ${batchRef} to ${url} given up: ${status}`);
          break;
        }
        await sleep(200 * 2 ** attempt);
      }
    }
  }

  const server = createServer(async (req, res) => {
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    try {
      if (req.method !== 'POST' || req.url !== BATCH_PATH) return answer(404, { error: 'not_found', message: `POST ${BATCH_PATH} only` });
      const raw = await readBody(req);
      if (raw === null) return answer(413, { error: 'too_large', message: `body over ${MAX_BODY} bytes` });
      if (!verifySignature(options.secret, req.headers[SIGNATURE_HEADER] as string | undefined, raw)) {
        return answer(401, { error: 'invalid_signature', message: `missing or invalid ${SIGNATURE_HEADER}` });
      }
      let parsed;
      try {
        parsed = providerBatchSchema.safeParse(JSON.parse(raw.toString('utf8')));
      } catch {
        return answer(400, { error: 'invalid_json', message: 'body is not JSON' });
      }
      if (!parsed.success) return answer(400, { error: 'invalid_batch', message: parsed.error.message });
      if (Math.random() < (options.rejectRate ?? 0)) return answer(503, { error: 'unavailable', message: 'try again' });
      const batch = parsed.data;
      const batchRef = `vb_${randomUUID()}`;
      const at = new Date().toISOString();
      const calls: ProviderCallAnswer[] = [];
      const updates: CallbackUpdate[] = [];
      const lines: string[] = [];
      for (const call of batch.calls) {
        const seen = placed.get(call.idempotency_key);
        if (seen) {
          calls.push({ idempotency_key: call.idempotency_key, ...seen, replayed: true });
          lines.push(JSON.stringify({ event: 'replay', idempotency_key: call.idempotency_key, ...seen, batch_id: batch.batch_id, at }));
          continue;
        }
        const ref = { provider_ref: `vc_${randomUUID()}`, batch_ref: batchRef };
        placed.set(call.idempotency_key, ref);
        calls.push({ idempotency_key: call.idempotency_key, ...ref, replayed: false });
        lines.push(JSON.stringify({ event: 'call', idempotency_key: call.idempotency_key, ...ref, batch_id: batch.batch_id, at }));
        if (options.holdTo?.test(call.to)) continue;
        const failed = options.failTo?.test(call.to) || Math.random() < (options.failureRate ?? 0);
        updates.push({
          idempotency_key: call.idempotency_key, provider_ref: ref.provider_ref, status: failed ? 'failed' : 'sent',
          ...(failed ? { error_reason: ERROR_REASONS[Math.floor(Math.random() * ERROR_REASONS.length)] } : {}),
        });
      }
      if (lines.length) options.log.write(`${lines.join('\n')}\n`);
      if (options.latencyMs) await sleep(options.latencyMs);
      answer(200, { batch_ref: batchRef, calls });
      if (updates.length && options.callbacks !== false) {
        const p: Promise<void> = callBack(batch.callback_url, batchRef, updates)
          .catch((err) => report(`callback of batch ${batchRef} failed: ${(err as Error).message}`))
          .finally(() => pendingCallbacks.delete(p));
        pendingCallbacks.add(p);
      }
    } catch (err) {
      report(`request failed: ${(err as Error).message}`);
      if (!res.headersSent) answer(500, { error: 'internal', message: 'internal error' });
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    server,
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all(pendingCallbacks);
    },
  };
}
