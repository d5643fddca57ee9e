/**
 * The platform context: everything a service or a task needs, built once per process from the
 * configuration and passed explicitly (no module-level singletons).
 */
import { randomBytes } from 'node:crypto';
import type { Config } from './platform/config.ts';
import { serviceUrls } from './platform/config.ts';
import { createPiiCrypto, type PiiCrypto } from './platform/crypto.ts';
import { createPool, type Pool } from './platform/db.ts';
import { createEmbeddingProvider, type EmbeddingProvider } from './search/embeddings/index.ts';
import type { Logger } from './platform/logger.ts';
import { createMailer, type Mailer } from './platform/mail.ts';
import { queueDepth } from './platform/jobs.ts';
import { createMetrics, type Metrics } from './platform/metrics.ts';
import { loadNetwork, type Network } from './network/config.ts';
import { readOrCreateSecret } from './platform/secrets.ts';
import { createStorage, type ObjectStorage } from './platform/storage.ts';
import { createTokenService, type TokenService } from './platform/tokens.ts';

/** Database sessions of a service's background thread (signals' item batches: a bulk upload's chunk jobs push a batch at a time each). */
export const BACKGROUND_POOL_SIZE = 4;

/**
 * The PII master key, base64: PII_KEY, else DATA_DIR/pii.key (written on first start). Also read
 * by worker threads that decrypt (api/signals/item-batch-worker.ts).
 */
export async function readPiiKey(config: Pick<Config, 'PII_KEY' | 'dataDirPath'>): Promise<string> {
  return config.PII_KEY ?? readOrCreateSecret(config.dataDirPath, 'pii.key', () => randomBytes(32).toString('base64'));
}

export interface PlatformContext {
  config: Config;
  logger: Logger;
  pool: Pool;
  /** The connection string `pool` was opened with (for a worker thread's own pool). */
  databaseUrl: string;
  network: Network;
  storage: ObjectStorage;
  mailer: Mailer;
  pii: PiiCrypto;
  tokens: TokenService;
  /** The process's Prometheus registry and its shared metrics (served at /metrics). */
  metrics: Metrics;
  /** Key the platform's parts use to call signals and search (registered with both). */
  internalApiKey: string;
  /** Base URLs of the services; updated once they listen (ports may be chosen by the OS). */
  urls: { signals: string; search: string; aggregator: string };
  /**
   * The embedding provider, created on first call (so commands that never embed load no model);
   * later calls return the same one. Rejects when EMBEDDING_PROVIDER=transformers cannot load.
   */
  embeddings(): Promise<EmbeddingProvider>;
  /** Registers `fn` to run on `close`, before the pool closes (e.g. to stop a thread a service started). */
  onClose(fn: () => Promise<void>): void;
  /** Runs what `onClose` registered, releases the embedding model (if one was loaded) and closes the pool. */
  close(): Promise<void>;
}

/**
 * Builds the context against `databaseUrl`: loads and validates the network, opens the pool and
 * storage, loads (or generates into DATA_DIR) the PII, signing and internal keys. `thread` names a
 * worker thread's context (bin/worker-thread.ts), whose metrics its main thread merges into its own.
 * @throws NetworkConfigError, or Error when storage or keys are unusable.
 */
export async function createContext(config: Config, databaseUrl: string, logger: Logger, options: { thread?: string } = {}): Promise<PlatformContext> {
  const network = await loadNetwork(config.NETWORK);
  const piiKey = await readPiiKey(config);
  const internalApiKey = config.INTERNAL_API_KEY
    ?? await readOrCreateSecret(config.dataDirPath, 'internal-api.key', () => `ldp_internal_${randomBytes(32).toString('base64url')}`);
  const pool = createPool(databaseUrl, config.DATABASE_POOL_SIZE);
  const closers: (() => Promise<void>)[] = [];
  const metrics = createMetrics({ thread: options.thread });
  // A worker thread's metrics are merged into its main thread's, which reads the same queue.
  if (!options.thread) {
    metrics.gauge('worker_queue_depth', 'graphile-worker jobs waiting to run (due, not locked), by task.', ['task'],
      async () => (await queueDepth(pool)).map(({ task, jobs }) => ({ labels: { task }, value: jobs })));
  }
  let embeddings: Promise<EmbeddingProvider> | undefined;
  try {
    return {
      config, logger, pool, databaseUrl, network,
      storage: await createStorage(config),
      mailer: createMailer(config),
      pii: createPiiCrypto(Buffer.from(piiKey, 'base64')),
      tokens: await createTokenService(config),
      metrics,
      internalApiKey,
      urls: serviceUrls(config),
      embeddings: () => (embeddings ??= createEmbeddingProvider(config, logger)),
      onClose: (fn) => { closers.push(fn); },
      async close() {
        // Each closer runs whatever another one throws, and the pool closes after all of them.
        const failed = (await Promise.allSettled(closers.splice(0).map((fn) => fn()))).filter((r) => r.status === 'rejected');
        for (const r of failed) logger.error({ err: (r as PromiseRejectedResult).reason }, 'a resource did not close cleanly');
        await embeddings?.then((provider) => provider.dispose(), () => {});
        await pool.end();
      },
    };
  } catch (err) {
    await pool.end();
    throw err;
  }
}
