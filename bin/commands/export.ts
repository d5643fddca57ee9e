/**
 * `ldp export --aggregator ID --ids FILE [--domain D] [--out FILE]`: the decrypted profiles of the
 * listed participants of one aggregator as CSV (lib/aggregator/export.ts — the same columns,
 * protection and audit record as POST /v1/dashboard/export/profiles). FILE holds participant ids
 * separated by line breaks, commas or spaces (lines starting with # are ignored), 1..1000 of them.
 */
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { pipeline } from 'node:stream/promises';
import { findAggregator } from '../../lib/aggregator/aggregators.ts';
import { exportableIds, exportColumns, MAX_EXPORT_ITEMS, profilesCsv, recordExport } from '../../lib/aggregator/export.ts';
import { CliError, withPlatformContext } from '../command-context.ts';

export async function exportProfiles(opts: { aggregator: string; ids: string; domain?: string; out?: string }): Promise<void> {
  const text = await readFile(opts.ids, 'utf8').catch(() => {
    throw new CliError(`Cannot read the id file ${opts.ids}`);
  });
  const ids = text.split('\n').filter((l) => !l.trim().startsWith('#')).join(' ').split(/[\s,]+/).filter(Boolean);
  if (ids.length === 0 || ids.length > MAX_EXPORT_ITEMS) throw new CliError(`${opts.ids} must list 1..${MAX_EXPORT_ITEMS} participant ids (it lists ${ids.length})`);
  const summary = await withPlatformContext(async (ctx) => {
    if (opts.domain && !ctx.network.domains.has(opts.domain)) throw new CliError(`--domain must be one of ${[...ctx.network.domains.keys()].join(', ')}`);
    const agg = await findAggregator(ctx.pool, opts.aggregator);
    if (!agg) throw new CliError(`No aggregator with id ${opts.aggregator}`);
    const found = await exportableIds(ctx.pool, { aggregatorId: agg.aggregator_id, itemIds: ids, domain: opts.domain });
    const columns = exportColumns(ctx.network, opts.domain);
    await recordExport(ctx.pool, {
      aggregatorId: agg.aggregator_id, orgId: agg.org_id, exportedBy: `cli:${os.userInfo().username}`, domain: opts.domain,
      requested: found.ids.length + found.absent, exported: found.ids.length, absent: found.absent, fields: columns,
    });
    const csv = profilesCsv(ctx.pool, ctx.pii, ctx.network, { aggregatorId: agg.aggregator_id, ids: found.ids, columns });
    if (opts.out) await pipeline(csv, createWriteStream(opts.out));
    else await pipeline(csv, process.stdout, { end: false });
    return found;
  });
  process.stderr.write(`exported ${summary.ids.length} profiles${opts.out ? ` to ${opts.out}` : ''}; ${summary.absent} ids not this aggregator's (or unknown)\n`);
}
