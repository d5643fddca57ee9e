/**
 * The CSV parser's thread (lib/aggregator/bulk/csv-table.ts `parseInThread`): each table starts
 * one, and must end it however it ends — read to its end, closed part-way, failing, or refused
 * before its header. Its OS thread is what shows it: the process's thread count, from Linux's
 * /proc. A file of its own, so that no other test's table is still ending its thread when the
 * count is taken.
 */
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { openTable } from '../../lib/aggregator/bulk/open-table.ts';
import { TableFormatError, type Table } from '../../lib/aggregator/bulk/table.ts';
import { titled } from '../helpers/requires.ts';
import { until } from '../helpers/until.ts';

const threads = async () => Number(/^Threads:\s+(\d+)$/m.exec(await readFile('/proc/self/status', 'utf8'))![1]);
const open = (text: string) => async () => Readable.from([Buffer.from(text)]);
const large = () => {
  const lines = ['id,name'];
  for (let i = 1; i <= 20_000; i++) lines.push(`${i},Facility ${i}`);
  return `${lines.join('\n')}\n`;
};
async function drain(table: Table): Promise<number> {
  let rows = 0;
  for await (const batch of table.batches) rows += batch.length;
  return rows;
}

const noProc = process.platform === 'linux' ? '' : 'reads the thread count from /proc/self/status (Linux only)';
describe.skipIf(noProc !== '')(titled('the CSV parser thread', noProc), () => {
  it('ends when the table is read to its end, closed part-way, fails, or has no header row', async () => {
    await threads(); // reading a file starts libuv's pool, if nothing had yet
    const before = await threads();
    const ended = (how: string) => until(`the thread of a table ${how} to exit`, async () => (await threads()) === before, 10_000);

    const whole = await openTable(open(large()), 'csv');
    expect(await threads()).toBeGreaterThan(before); // the count sees the thread
    expect(await drain(whole)).toBe(20_000);
    await ended('read to its end');

    const closed = await openTable(open(large()), 'csv');
    expect((await closed.batches[Symbol.asyncIterator]().next()).value.length).toBeGreaterThan(0);
    closed.close();
    await ended('closed part-way');

    const broken = await openTable(open('name,district\nA,"B\nC,D\n'), 'csv');
    await expect(drain(broken)).rejects.toThrow(/row 2 \(starting on line 2\) opens a quoted field that is never closed/);
    await ended('failing');

    await expect(openTable(open('\n\n'), 'csv')).rejects.toThrow(TableFormatError);
    await ended('without a header row');
  });
});
