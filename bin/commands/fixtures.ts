/** `ldp fixtures seekers`: writes a CSV of synthetic seekers (lib/fixtures/seekers.ts). */
import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { stringify } from 'csv-stringify';
import { generateSeekers, loadPlaces, SEEKER_COLUMNS, sharedPlaceFiles } from '../../lib/aggregator/fixtures/seekers.ts';
import { CliError } from '../command-context.ts';

function rate(name: string, value: string): number {
  const n = Number(value);
  if (!(n >= 0 && n <= 1)) throw new CliError(`${name} must be a number from 0 to 1, not ${value}`);
  return n;
}

/** Writes `--count` seekers as CSV to `--out` (default stdout); prints a summary on stderr. */
export async function fixturesSeekers(opts: { count: string; out?: string; errorRate: string; duplicateRate: string; seed: string }): Promise<void> {
  const count = Number(opts.count);
  if (!Number.isInteger(count) || count < 1) throw new CliError(`--count must be a positive integer, not ${opts.count}`);
  const seed = Number(opts.seed);
  if (!Number.isInteger(seed)) throw new CliError(`--seed must be an integer, not ${opts.seed}`);
  const errorRate = rate('--error-rate', opts.errorRate);
  const duplicateRate = rate('--duplicate-rate', opts.duplicateRate);
  if (errorRate + duplicateRate > 1) throw new CliError('--error-rate plus --duplicate-rate must not exceed 1');

  const files = sharedPlaceFiles();
  const places = await loadPlaces(files);
  const kinds = { valid: 0, error: 0, duplicate: 0 };
  const rows = function* () {
    for (const row of generateSeekers({ count, seed, errorRate, duplicateRate, places })) {
      kinds[row.kind]++;
      yield SEEKER_COLUMNS.map((c) => row.values[c]);
    }
  };
  const out = opts.out ? createWriteStream(opts.out) : process.stdout;
  try {
    await pipeline(Readable.from(rows()), stringify({ header: true, columns: [...SEEKER_COLUMNS] }), out);
  } catch (err) {
    // A reader that stops early (`| head`) is not an error.
    if ((err as NodeJS.ErrnoException).code === 'EPIPE') return;
    throw err;
  }
  process.stderr.write(`${count} seekers (${kinds.valid} valid, ${kinds.error} with an error, ${kinds.duplicate} duplicates; seed ${seed}; `
    + `places: ${files.length ? `${places.length} from ${files.map((f) => f.split('/').pop()).join(', ')}` : 'built-in list'})${opts.out ? ` → ${opts.out}` : ''}\n`);
}
