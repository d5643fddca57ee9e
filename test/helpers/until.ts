/** Waiting in tests for what the worker or another process does in its own time. */
import { vi } from 'vitest';

/** `T` without its falsy members (what a truthy result can be). */
type Truthy<T> = Exclude<T, false | null | undefined | 0 | ''>;

/**
 * Polls `probe` every 100 ms until it returns a truthy value, and resolves with that value
 * (vitest's `vi.waitUntil`). An error thrown by `probe` ends the wait at once.
 * @throws Error naming `what` when nothing truthy came within `timeoutMs`.
 */
export async function until<T>(what: string, probe: () => T | Promise<T>, timeoutMs = 30_000): Promise<Truthy<T>> {
  try {
    return await vi.waitUntil(probe, { timeout: timeoutMs, interval: 100 }) as Truthy<T>;
  } catch (err) {
    if (err instanceof Error && /timed out/i.test(err.message)) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    throw err;
  }
}
