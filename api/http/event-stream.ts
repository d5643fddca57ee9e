/**
 * Server-Sent Events (WHATWG HTML §9.2) of a record's changes: the server reads the record every
 * `intervalMs` and sends a `progress` event only when what it reads changed, then one `done`
 * event once the record is final, and ends; a `: keep-alive` comment every 15 s keeps proxies
 * from closing a quiet stream. The page that listens needs no polling loop of its own.
 *
 * Bounded (issue 29, docs/decisions.md "Trust II"): at most EVENT_STREAMS_PER_CALLER open streams
 * per caller and EVENT_STREAMS_MAX per process (429 with Retry-After beyond, before any byte of
 * the stream); a stream lasts at most EVENT_STREAM_MAX_SECONDS, then ends with a `reconnect` event
 * (an EventSource reconnects by itself, and gets the current state first); and the caller is
 * checked again before each read — credential still valid, aggregator still approved — else the
 * stream ends with a `denied` event (an EventSource's reconnection then gets the 401 or 403 and stops).
 */
import type { Response } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import type { Config } from '../../lib/platform/config.ts';
import { TokenError, type AggregatorClaims } from '../../lib/platform/tokens.ts';
import { resolveCaller } from './auth.ts';
import { HttpError } from './errors.ts';

const KEEP_ALIVE_MS = 15_000;
/** Retry-After (s) of a stream refused by a cap: a slot frees whenever any stream ends. */
const CAP_RETRY_AFTER_S = 5;
/** How soon a client told to reconnect does (the stream's `retry` field, ms). */
const RECONNECT_MS = 1000;

export interface Snapshot {
  /** The event's data (JSON). */
  data: unknown;
  /** Whether the record reached its final state (the stream then ends). */
  final: boolean;
}

/** Who holds a stream: the key of the per-caller cap, and the check made again before each read. */
export interface StreamCaller {
  /** The per-caller cap's key (an aggregator id). */
  id: string;
  /** Resolves null while the caller may go on streaming, else why not (sent in the `denied` event). */
  recheck: () => Promise<string | null>;
}

/**
 * The stream caller of aggregator `aggregatorId` whose credential's claims `claimsOf` reads again
 * (a bearer token verified anew, a console session looked up anew): refused when that fails
 * (TokenError, or null: expired, signed out) or when the aggregator or its organisation is no
 * longer approved (auth.ts `resolveCaller`, read from the database each time).
 */
export function streamCaller(ctx: PlatformContext, aggregatorId: string, claimsOf: () => Promise<AggregatorClaims | null>): StreamCaller {
  return {
    id: aggregatorId,
    recheck: async () => {
      let claims;
      try {
        claims = await claimsOf();
      } catch (err) {
        if (err instanceof TokenError) return `the bearer token is no longer valid: ${err.message}`;
        throw err;
      }
      if (!claims) return 'the session has ended';
      try {
        await resolveCaller(ctx, claims);
        return null;
      } catch (err) {
        if (err instanceof HttpError) return err.message;
        throw err;
      }
    },
  };
}

type StreamLimits = Pick<Config, 'EVENT_STREAMS_PER_CALLER' | 'EVENT_STREAMS_MAX' | 'EVENT_STREAM_MAX_SECONDS'>;

/** Open streams of this process, in all and per caller. */
const open = { total: 0, byCaller: new Map<string, number>() };

/** Counts a new stream of `callerId`, or throws 429 when a cap is reached; returns its release. */
function admit(limits: StreamLimits, callerId: string): () => void {
  const mine = open.byCaller.get(callerId) ?? 0;
  const headers = { 'Retry-After': String(CAP_RETRY_AFTER_S) };
  if (mine >= limits.EVENT_STREAMS_PER_CALLER) {
    throw new HttpError(429, `At most ${limits.EVENT_STREAMS_PER_CALLER} open event streams per aggregator (EVENT_STREAMS_PER_CALLER); close one or try again later`,
      { code: 'too_many_streams', headers });
  }
  if (open.total >= limits.EVENT_STREAMS_MAX) {
    throw new HttpError(429, `This server has its most open event streams (EVENT_STREAMS_MAX ${limits.EVENT_STREAMS_MAX}); try again later`, { code: 'too_many_streams', headers });
  }
  open.total++;
  open.byCaller.set(callerId, mine + 1);
  return () => {
    open.total--;
    const left = open.byCaller.get(callerId)! - 1;
    if (left > 0) open.byCaller.set(callerId, left);
    else open.byCaller.delete(callerId);
  };
}

/**
 * Streams `first` and then what `read` returns (null: the record is gone, the stream ends) on
 * `res` until the record is final, the client goes away, the stream's lifetime is over or
 * `caller` is refused (see the module comment). Headers are sent at once.
 * @throws HttpError 429 when a cap is reached (nothing sent yet)
 */
export async function streamChanges(res: Response, first: Snapshot, read: () => Promise<Snapshot | null>,
  options: { intervalMs: number; caller: StreamCaller; limits: StreamLimits }): Promise<void> {
  const release = admit(options.limits, options.caller.id);
  try {
    res.status(200).set({
      'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no',
    });
    res.flushHeaders();
    let closed = false;
    res.on('close', () => { closed = true; });
    const endsAt = Date.now() + options.limits.EVENT_STREAM_MAX_SECONDS * 1000;
    let sequence = 0;
    const send = (event: string, data: unknown) => res.write(`id: ${++sequence}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    let snapshot: Snapshot | null = first;
    let last = '';
    let lastWrite = Date.now();
    while (!closed && snapshot) {
      if (snapshot.final) {
        send('done', snapshot.data);
        break;
      }
      const text = JSON.stringify(snapshot.data);
      if (text !== last) {
        send('progress', snapshot.data);
        last = text;
        lastWrite = Date.now();
      } else if (Date.now() - lastWrite > KEEP_ALIVE_MS) {
        res.write(': keep-alive\n\n');
        lastWrite = Date.now();
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.min(options.intervalMs, endsAt - Date.now()))));
      if (closed) break;
      if (Date.now() >= endsAt) {
        res.write(`retry: ${RECONNECT_MS}\n`);
        send('reconnect', { reason: 'max_lifetime', max_seconds: options.limits.EVENT_STREAM_MAX_SECONDS });
        break;
      }
      const denied = await options.caller.recheck();
      if (denied) {
        send('denied', { reason: denied });
        break;
      }
      snapshot = await read();
    }
    res.end();
  } finally {
    release();
  }
}
