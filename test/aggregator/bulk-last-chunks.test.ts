import { describe, expect, it } from 'vitest';
import { lastChunks } from '../../tasks/bulk-upload-stage.ts';

const rows = (n: number) => Array.from({ length: n }, (_, i) => i + 2);

describe('the rows after the last full chunk (tasks/bulk-upload-stage.ts lastChunks)', () => {
  it('split across the worker slots, at least 500 rows a chunk, consecutive and in file order', () => {
    expect(lastChunks([], 2)).toEqual([]);
    expect(lastChunks(rows(499), 2)).toEqual([rows(499)]);
    expect(lastChunks(rows(999), 2)).toEqual([rows(999)]);
    // The 1 % run of the benchmark: 2,673 changed rows, two slots.
    const split = lastChunks(rows(2673), 2);
    expect(split.map((c) => c.length)).toEqual([1337, 1336]);
    expect(split.flat()).toEqual(rows(2673));
    expect(lastChunks(rows(1000), 4).map((c) => c.length)).toEqual([500, 500]);
    expect(lastChunks(rows(4999), 1)).toEqual([rows(4999)]);
  });
});
