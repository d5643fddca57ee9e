/**
 * Server-Sent Events (WHATWG HTML §9.2) of a record's changes: the server reads the record every
 * `intervalMs` and sends a `progress` event only when what it reads changed, then one `done`
 * event once the record is final, and ends; a `: keep-alive` comment every 15 s keeps proxies
 * from closing a quiet stream. The page that listens needs no polling loop of its own.
 */
import type { Response } from 'express';

const KEEP_ALIVE_MS = 15_000;

export interface Snapshot {
  /** The event's data (JSON). */
  data: unknown;
  /** Whether the record reached its final state (the stream then ends). */
  final: boolean;
}

/**
 * Streams `first` and then what `read` returns (null: the record is gone, the stream ends) on
 * `res` until the record is final or the client goes away. Headers are sent at once.
 */
export async function streamChanges(res: Response, first: Snapshot, read: () => Promise<Snapshot | null>, intervalMs: number): Promise<void> {
  res.status(200).set({
    'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  let closed = false;
  res.on('close', () => { closed = true; });
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
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
    if (closed) break;
    snapshot = await read();
  }
  res.end();
}
