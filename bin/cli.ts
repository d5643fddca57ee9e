/** The `ldp` command line (run as `npx ldp …` from the repository root). */
import { Command } from 'commander';
import { SERVICES } from '../api/service-names.ts';
import { aggregatorApprove, aggregatorCreate, token } from './commands/aggregator.ts';
import { fixturesSeekers } from './commands/fixtures.ts';
import { keysCreate, keysList, keysRevoke } from './commands/keys.ts';
import { health } from './commands/health.ts';
import { parseServices, runPlatform } from './commands/start.ts';
import { registerMappingCommands } from './commands/mapping.ts';
import { upload } from './commands/upload.ts';
import { dashboard } from './commands/dashboard.ts';
import { exportProfiles } from './commands/export.ts';
import { voiceProvider } from './commands/voice-provider.ts';
import { consoleLink } from './commands/console.ts';
import { backup, restore } from './commands/backup.ts';
import { CliError, withPlatformContext } from './command-context.ts';

const program = new Command('ldp')
  .description('Local Discovery Platform: signals, search and aggregator services with their worker')
  .showHelpAfterError();

program.command('start')
  .description('run the three services and the worker; embedded PostgreSQL in DATA_DIR unless DATABASE_URL is set')
  .action(() => runPlatform({ services: SERVICES, worker: true }, true));

program.command('serve')
  .description('run one or more services, without the worker, against DATABASE_URL (or the running instance)')
  .requiredOption('--service <names>', `one of ${SERVICES.join(', ')}, a comma-separated list, or all`)
  .action((opts) => runPlatform({ services: parseServices(opts.service), worker: false }, false));

program.command('worker')
  .description('run a graphile-worker runner alone against DATABASE_URL (or the running instance), with /health and /metrics on WORKER_METRICS_PORT')
  .action(() => runPlatform({ services: [], worker: true }, false));

program.command('health')
  .description('exit 0 when the named services of this host answer /health and/or a worker of this host beat within 20 s; else 1')
  .option('--service <names>', `${SERVICES.join(', ')}, a comma-separated list, or all`)
  .option('--worker', 'check for a live worker process on this host (platform.worker_heartbeats)')
  .action(health);

program.command('migrate')
  .description('apply pending database migrations and exit')
  .action(() => withPlatformContext(async () => {
    process.stdout.write('migrations current\n');
  }));

const keys = program.command('keys').description('API keys of the signals and search services');
keys.command('create')
  .requiredOption('--service <service>', 'signals or search')
  .requiredOption('--name <name>', 'who the key is for')
  .description('create a key and print it (shown only once)')
  .action(keysCreate);
keys.command('revoke <keyId>')
  .requiredOption('--service <service>', 'signals or search')
  .description('revoke a key by its id (see `keys list`)')
  .action(keysRevoke);
keys.command('list')
  .requiredOption('--service <service>', 'signals or search')
  .description('list keys (ids, prefixes, names, status)')
  .action(keysList);

program.command('aggregator')
  .description('aggregators')
  .command('create')
  .requiredOption('--name <name>', 'aggregator name')
  .requiredOption('--types <types>', 'comma-separated aggregator types, e.g. seeker,provider')
  .option('--org-slug <slug>', 'organisation slug (default: from the name)')
  .description('create an approved aggregator with its organisation; prints JSON')
  .action(aggregatorCreate);
program.commands.find((c) => c.name() === 'aggregator')!.command('approve <id>').description('approve a pending aggregator registration (as its signed review link does); prints JSON').action(aggregatorApprove);

program.command('token')
  .description('print a bearer token for an aggregator, or a person\'s (user) token (built-in issuer)')
  .option('--aggregator <id>', 'aggregator id')
  .option('--user <subject>', 'a person\'s token with this subject instead (e.g. to register an aggregator)')
  .option('--ttl <duration>', 'lifetime, e.g. 30m, 1h, 7d', '1h')
  .option('--roles <roles>', 'comma-separated roles: admin, operator, viewer', 'admin')
  .action(token);

program.command('upload <file>')
  .description('onboard a CSV or XLSX file as a bulk upload through the aggregator API of a running instance')
  .requiredOption('--type <participant_type>', 'participant type (network domain), e.g. seeker or provider')
  .option('--column-map <file>', 'JSON file: file header → schema field name, or null to ignore the column; or field → spec')
  .option('--mapping <id>', 'a saved mapping (ldp mapping save) instead of --column-map')
  .option('--attest', 'attest that you have the authority to onboard these participants (else you are asked)')
  .option('--wait', 'follow the job with a progress bar until it ends, then print a summary')
  .option('--errors-out <file>', 'with --wait: save the error report (failed and skipped rows) there')
  .option('--token <jwt>', 'bearer token (default: LDP_TOKEN)')
  .option('--aggregator <id>', 'mint a one-hour operator token for this aggregator locally instead')
  .option('--url <url>', 'aggregator base URL (default: AGGREGATOR_URL, else the running instance of DATA_DIR)')
  .option('--interval <ms>', 'progress poll interval', '500')
  .option('--mode <mode>', 'create (default: new participants only), upsert (create or update) or update (existing participants only)')
  .option('--sync', 'with --mode upsert: the file is the whole list; participants it no longer holds are paused')
  .option('--confirm-pause <n>', 'with --sync: the count to pause that the dry run reported (asked on a terminal otherwise)')
  .option('--allow-large-pause', 'with --sync: allow pausing more than BULK_SYNC_MAX_PAUSE_FRACTION of the participants')
  .option('--dry-run', 'create the upload and print the outcomes of its first rows — with --mode upsert or update, the diff of the whole file (nothing written; the job stays pending)')
  .option('--rows <n>', 'with --dry-run: how many data rows (1..1000) to list', '200')
  .action(upload);

program.command('dashboard').description("print an aggregator's dashboard rollup per domain as a table").requiredOption('--aggregator <id>', 'aggregator id').option('--refresh', 'compute it now, even within DASHBOARD_TTL_SECONDS').option('--json', 'print JSON instead of a table').action(dashboard);
program.command('export').description("write the decrypted profiles of an aggregator's participants as CSV").requiredOption('--aggregator <id>', 'aggregator id').requiredOption('--ids <file>', 'file of 1..1000 participant ids (one per line)').option('--domain <domain>', 'only participants of this domain').option('--out <file>', 'CSV file to write (default: stdout)').action(exportProfiles);
registerMappingCommands(program);
program.command('openapi').description('print a service\'s OpenAPI 3.1 document (no running instance needed)').requiredOption('--service <name>', SERVICES.join(', ')).option('--pretty', 'indent the JSON')
  // Loaded when asked for: it builds every service's routes, which no other command needs.
  .action(async (opts) => (await import('./commands/openapi.ts')).openapi(opts));
program.command('console').description('print a short-lived, single-use sign-in link for the operator console (/console/)').requiredOption('--aggregator <id>', 'aggregator id').option('--role <role>', 'admin, operator or viewer', 'admin').option('--ttl <duration>', 'how long the link may wait to be used (at most 1h)', '10m').option('--url <url>', 'aggregator base URL (default: AGGREGATOR_URL, else the running instance)').action(consoleLink);

program.command('backup').description('write a consistent copy of the instance (database, objects, keys, manifest with checksums) into a new or empty directory')
  .requiredOption('--out <dir>', 'the backup directory').option('--pg-bin <dir>', 'bin directory of pg_dump (DATABASE_URL; default: the newest found)').action(backup);
program.command('restore <dir>').description('restore a backup into a fresh DATA_DIR (and DATABASE_URL\'s empty database); checksums verified first')
  .option('--pg-bin <dir>', 'bin directory of pg_restore (a pg_dump backup; default: the newest found)').action(restore);

program.command('fixtures')
  .description('generate fixture files')
  .command('seekers')
  .description('write a CSV of synthetic seekers with deliberate errors and duplicates')
  .requiredOption('--count <n>', 'number of rows')
  .option('--out <file>', 'output file (default: stdout)')
  .option('--error-rate <share>', 'share of rows with one deliberate error', '0.05')
  .option('--duplicate-rate <share>', 'share of rows repeating an earlier phone or e-mail', '0.02')
  .option('--seed <n>', 'random seed (same seed, same file)', '1')
  .action(fixturesSeekers);

program.command('voice-provider')
  .description('run the local voice provider (signed batch API, idempotent per call, calls back) for voice campaigns')
  .option('--port <n>', 'port (0 = any free port)', '3090')
  .option('--host <host>', 'interface', '127.0.0.1')
  .option('--failure-rate <share>', 'share of calls that end failed', '0')
  .option('--reject-rate <share>', 'share of batch submissions refused with 503', '0')
  .option('--delay <ms>', 'milliseconds before calling back', '0')
  .option('--latency <ms>', 'milliseconds between placing a batch\'s calls and answering', '0')
  .option('--fail-to <regex>', 'calls to numbers matching this end failed')
  .option('--hold-to <regex>', 'calls to numbers matching this are never called back')
  .option('--no-callbacks', 'never call back')
  .option('--log <file>', 'append the JSON-lines log of calls placed here (read back at start); default stdout')
  .action(voiceProvider);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  // The message says what went wrong; the stack is for LOG_LEVEL=debug (expected failures,
  // CliError, never have one worth showing).
  const verbose = !(err instanceof CliError) && ['debug', 'trace'].includes(process.env.LOG_LEVEL ?? '');
  process.stderr.write(`ldp: ${verbose ? (err as Error).stack : (err as Error).message ?? err}\n`);
  process.exit(1);
}
