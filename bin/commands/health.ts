/**
 * `ldp health --service NAMES` and `ldp health --worker`: exit status 0 when healthy, 1 otherwise
 * (with the reason on stderr), for container healthchecks (docker-compose.yml).
 */
import os from 'node:os';
import { serviceUrls } from '../../lib/platform/config.ts';
import { createPool } from '../../lib/platform/db.ts';
import { readInstance } from '../../lib/platform/instance.ts';
import { workerAlive } from '../../workers/heartbeat.ts';
import { CliError, cliConfig } from '../command-context.ts';
import { parseServices } from './start.ts';

/**
 * With `--service`, each named service of this host answers `GET /health` (liveness, not `/ready`:
 * a missing worker must not mark the API container unhealthy) within 5 s; the services are reached
 * on loopback when HOST is a wildcard address. With `--worker`, a worker process on this host (same
 * `os.hostname()`, i.e. this container) beat in `platform.worker_heartbeats` within the last 20 s.
 * @throws CliError naming what is unhealthy.
 */
export async function health(opts: { service?: string; worker?: boolean }): Promise<void> {
  if (!opts.service && !opts.worker) throw new CliError('nothing to check: pass --service NAMES and/or --worker');
  const { config } = cliConfig();
  if (opts.service) {
    const host = ['0.0.0.0', '::'].includes(config.HOST) ? '127.0.0.1' : config.HOST;
    const urls = serviceUrls({ ...config, HOST: host, SIGNALS_URL: undefined, SEARCH_URL: undefined, AGGREGATOR_PUBLIC_URL: undefined });
    for (const name of parseServices(opts.service)) {
      const status = await fetch(`${urls[name]}/health`, { signal: AbortSignal.timeout(5000) })
        .then((res) => String(res.status), (err: Error) => err.message);
      if (status !== '200') throw new CliError(`${name} (${urls[name]}) is not healthy: ${status}`);
    }
  }
  if (opts.worker) {
    const url = config.DATABASE_URL ?? (await readInstance(config.dataDirPath))?.database_url;
    if (!url) throw new CliError('no database to check: set DATABASE_URL');
    const pool = createPool(url, 1);
    try {
      const { alive } = await workerAlive(pool, { hostname: os.hostname() }).catch((err: Error) => {
        throw new CliError(`database unreachable: ${err.message}`);
      });
      if (!alive) throw new CliError(`no worker on ${os.hostname()} beat within 20 s`);
    } finally {
      await pool.end();
    }
  }
  process.stdout.write('healthy\n');
}
