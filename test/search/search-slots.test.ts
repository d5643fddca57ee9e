/**
 * The search service's slots (lib/search/engine.ts inSearchSlot, SEARCH_CONCURRENCY): at most that
 * many searches of a process run at once, the others start in arrival order as slots free up, a
 * failed search frees its slot, and each process (context) has its own slots.
 */
import { describe, expect, it } from 'vitest';
import { inSearchSlot } from '../../lib/search/engine.ts';

/** A search that runs until released: `started` says whether it has begun. */
function pending(ctx: { config: { SEARCH_CONCURRENCY: number } }, log: string[], name: string) {
  let release!: (fail?: boolean) => void;
  const done = inSearchSlot(ctx, () => {
    log.push(name);
    return new Promise<string>((resolve, reject) => { release = (fail) => (fail ? reject(new Error(name)) : resolve(name)); });
  });
  return { done, release: (fail?: boolean) => release(fail) };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('search slots', () => {
  it('runs at most SEARCH_CONCURRENCY searches at once and starts the others in arrival order', async () => {
    const ctx = { config: { SEARCH_CONCURRENCY: 2 } };
    const log: string[] = [];
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((name) => pending(ctx, log, name));
    await tick();
    expect(log).toEqual(['a', 'b']);
    b.release();
    await expect(b.done).resolves.toBe('b');
    await tick();
    expect(log).toEqual(['a', 'b', 'c']);
    a.release(true); // a failure frees its slot too
    await expect(a.done).rejects.toThrow('a');
    await tick();
    expect(log).toEqual(['a', 'b', 'c', 'd']);
    c.release();
    d.release();
    await expect(Promise.all([c.done, d.done])).resolves.toEqual(['c', 'd']);
  });

  it('keeps each process context to its own slots', async () => {
    const one = { config: { SEARCH_CONCURRENCY: 1 } };
    const other = { config: { SEARCH_CONCURRENCY: 1 } };
    const log: string[] = [];
    const first = pending(one, log, 'one-1');
    const second = pending(one, log, 'one-2');
    const third = pending(other, log, 'other-1');
    await tick();
    expect(log).toEqual(['one-1', 'other-1']);
    first.release();
    third.release();
    await tick();
    expect(log).toEqual(['one-1', 'other-1', 'one-2']);
    second.release();
    await expect(second.done).resolves.toBe('one-2');
  });
});
