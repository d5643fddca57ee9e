/**
 * Signals' item batch thread: applies the item batches the platform's own jobs push (a bulk
 * upload's rows, up to PUSH_ITEMS_PER_REQUEST a request) off the service's event loop. Checking a
 * batch of 200 items (schemas, item state, each person's ciphertexts decrypted) and building its
 * statements took ~5 ms of JavaScript a request there, in stretches that every person's search,
 * discover and registration waited behind during an upload (docs/decisions.md, "Search under
 * load"). Here the thread and its sessions run at BACKGROUND_NICE (api/http/request-thread.ts).
 */
import { workerData } from 'node:worker_threads';
import { BACKGROUND_POOL_SIZE, readPiiKey } from '../../lib/context.ts';
import { loadNetwork } from '../../lib/network/config.ts';
import { createItemStateValidators } from '../../lib/network/items.ts';
import type { Config } from '../../lib/platform/config.ts';
import { createPiiCrypto } from '../../lib/platform/crypto.ts';
import { createPool } from '../../lib/platform/db.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { lowerSessionPriority, lowerThreadPriority } from '../../lib/platform/priority.ts';
import { jsonOf, serveRequests } from '../http/request-thread.ts';
import { applyItemBatch, ITEM_BATCH_SESSIONS } from './item-batch.ts';

const { databaseUrl, nice, logLevel, config } = workerData as {
  databaseUrl: string; nice: number; logLevel: string; config: Pick<Config, 'NETWORK' | 'PII_KEY' | 'dataDirPath'>;
};
const log = createLogger(logLevel).child({ component: 'item-batches' });
try {
  lowerThreadPriority(nice);
} catch (err) {
  log.warn({ err, nice }, 'could not lower the item batches\' CPU priority (BACKGROUND_NICE)');
}
const network = await loadNetwork(config.NETWORK);
const deps = { network, validators: createItemStateValidators(network), pii: createPiiCrypto(Buffer.from(await readPiiKey(config), 'base64')) };
// As many sessions as the context's background pool (BACKGROUND_POOL_SIZE), which served these batches before.
const pool = createPool(databaseUrl, BACKGROUND_POOL_SIZE, ITEM_BATCH_SESSIONS);
lowerSessionPriority(pool, nice);

serveRequests((raw) => applyItemBatch(deps, pool, jsonOf(raw)), () => pool.end());
