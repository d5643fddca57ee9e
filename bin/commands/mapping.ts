/**
 * `ldp mapping save|list|show`: saved bulk-upload mappings (issue 17) through the aggregator API
 * of a running instance (`/v1/bulk-uploads/mappings`); where and who as for `ldp upload`.
 *
 * - `ldp mapping save FILE --name N --type T`   saves FILE (JSON mapping) as a new mapping; `--id ID` saves it as a new version of ID
 * - `ldp mapping list [--type T]`               id, version, type and name of each mapping not retired
 * - `ldp mapping show ID [--version N]`         the mapping as JSON
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { SavedMappingJson } from '../../lib/aggregator/bulk/saved-mappings.ts';
import { CliError } from '../command-context.ts';
import { aggregatorUrl, bearerToken, call } from './upload.ts';

interface ApiOptions {
  token?: string;
  aggregator?: string;
  url?: string;
}

async function api(opts: ApiOptions): Promise<{ base: string; token: string }> {
  return { base: (await aggregatorUrl(opts)).replace(/(?<!\/)\/+$/, ''), token: await bearerToken(opts) };
}

async function save(file: string, opts: ApiOptions & { name?: string; type?: string; id?: string }): Promise<void> {
  const text = await readFile(file, 'utf8').catch(() => { throw new CliError(`Cannot read the mapping ${file}`); });
  let mapping: unknown;
  try {
    mapping = JSON.parse(text);
  } catch {
    throw new CliError(`${file} is not JSON: expected an object of file header → field name (or null), or field name → field spec`);
  }
  const { base, token } = await api(opts);
  const json = { 'content-type': 'application/json' };
  let saved: SavedMappingJson;
  if (opts.id) {
    saved = await call(`${base}/v1/bulk-uploads/mappings/${opts.id}`, token, { method: 'PUT', headers: json, body: JSON.stringify({ name: opts.name, mapping }) });
  } else {
    if (!opts.name || !opts.type) throw new CliError('Give --name and --type for a new mapping (or --id to save a new version)');
    saved = await call(`${base}/v1/bulk-uploads/mappings`, token, {
      method: 'POST', headers: json, body: JSON.stringify({ name: opts.name, participant_type: opts.type, mapping }),
    });
  }
  process.stdout.write(`saved mapping ${saved.id} version ${saved.version} (${saved.participant_type}: ${saved.name})\n`
    + `use it with: ldp upload FILE --type ${saved.participant_type} --mapping ${saved.id}\n`);
}

async function list(opts: ApiOptions & { type?: string }): Promise<void> {
  const { base, token } = await api(opts);
  const query = opts.type ? `?participant_type=${encodeURIComponent(opts.type)}` : '';
  const { mappings } = await call<{ mappings: SavedMappingJson[] }>(`${base}/v1/bulk-uploads/mappings${query}`, token);
  if (mappings.length === 0) {
    process.stdout.write('no saved mappings\n');
    return;
  }
  const rows = [['id', 'version', 'type', 'name'], ...mappings.map((m) => [m.id, String(m.version), m.participant_type, m.name])];
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  process.stdout.write(rows.map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n') + '\n');
}

async function show(id: string, opts: ApiOptions & { version?: string }): Promise<void> {
  const { base, token } = await api(opts);
  const query = opts.version ? `?version=${encodeURIComponent(opts.version)}` : '';
  const saved = await call<SavedMappingJson>(`${base}/v1/bulk-uploads/mappings/${encodeURIComponent(id)}${query}`, token);
  process.stdout.write(`${JSON.stringify(saved, null, 2)}\n`);
}

/** Registers `ldp mapping save|list|show` on `program`. */
export function registerMappingCommands(program: Command): void {
  const withApi = (cmd: Command) => cmd
    .option('--token <jwt>', 'bearer token (default: LDP_TOKEN)')
    .option('--aggregator <id>', 'mint a one-hour operator token for this aggregator locally instead')
    .option('--url <url>', 'aggregator base URL (default: AGGREGATOR_URL, else the running instance of DATA_DIR)');
  const mapping = program.command('mapping').description('saved bulk-upload mappings of an aggregator');
  withApi(mapping.command('save <file>')
    .description('save a JSON mapping (header → field or null; field → spec) as a new mapping, or with --id as a new version')
    .option('--name <name>', 'name of the mapping')
    .option('--type <participant_type>', 'participant type, e.g. provider (new mappings)')
    .option('--id <id>', 'save as a new version of this mapping'))
    .action(save);
  withApi(mapping.command('list').description('list the saved mappings not retired').option('--type <participant_type>', 'only this participant type'))
    .action(list);
  withApi(mapping.command('show <id>').description('print a saved mapping as JSON').option('--version <n>', 'this version (default: the newest)'))
    .action(show);
}
