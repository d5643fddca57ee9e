/**
 * The aggregator's HTTP client of the signals service (a service never writes another's schema:
 * DESIGN.md "Shape"). Calls carry the platform's internal key in `x-api-key`.
 *
 * Items go to `POST /api/v1/items/batch` (api/signals/items.ts): at most 1000 items and at most
 * the configured body size per request, one result per item; lifecycle moves to
 * `POST /api/v1/items/lifecycle`, 1000 a request.
 */
import type { PiiCrypto } from '../platform/crypto.ts';
import type { ItemInput, ItemPerson, LifecycleStatus } from '../network/items.ts';
import { requestIdHeader } from '../platform/request-context.ts';

/** An item pushed to signals, optionally with its person. */
export type PushedItem = ItemInput & { person?: ItemPerson };

/**
 * The `person` of an item from a participant's identity (phone in E.164, e-mail lower-cased, as
 * the aggregator coerced them), or undefined when it has neither phone nor e-mail.
 */
export function itemPerson(pii: PiiCrypto, identity: { name?: string; phone?: string; email?: string }): ItemPerson | undefined {
  if (!identity.phone && !identity.email) return undefined;
  return {
    ...(identity.name ? { name_encrypted: pii.encrypt(identity.name) } : {}),
    ...(identity.phone ? { phone_encrypted: pii.encrypt(identity.phone), phone_index: pii.blindIndex('phone', identity.phone).toString('hex') } : {}),
    ...(identity.email ? { email_encrypted: pii.encrypt(identity.email), email_index: pii.blindIndex('email', identity.email).toString('hex') } : {}),
  };
}

/** Signals' per-item answer of a batch upsert. */
export interface ItemPushResult {
  item_id: string;
  outcome: 'created' | 'updated' | 'unchanged' | 'conflict' | 'invalid';
  lifecycle_status?: LifecycleStatus;
  message?: string;
  /** When the item carried a person: the user it is linked to, and whether signals created it. */
  user_id?: string;
  user_created?: boolean;
}

/**
 * Signals could not be reached or failed (network error, timeout, 5xx, or an answer that is not
 * the documented shape): nothing can be concluded about the items, so the caller retries.
 */
export class SignalsUnavailableError extends Error {
  name = 'SignalsUnavailableError';
}

/** Signals' per-item answer of a lifecycle move (lib/network/items.ts `LifecycleMoveResult`). */
export interface LifecycleMoveAnswer {
  item_id: string;
  outcome: 'moved' | 'unchanged' | 'not_found' | 'refused';
  lifecycle_status?: LifecycleStatus;
  message?: string;
}

export interface SignalsClient {
  /**
   * Upserts `items` (any number; split into requests of at most PUSH_ITEMS_PER_REQUEST items and `maxBodyBytes`),
   * returning one result per item, in input order. Upserting the same item twice is harmless
   * (signals answers `unchanged`), so a failed call may simply be repeated.
   * @throws SignalsUnavailableError
   */
  pushItems(items: PushedItem[]): Promise<ItemPushResult[]>;
  /**
   * Moves items to lifecycle statuses (any number; 1000 a request), one answer per move, in input
   * order. A repeated move answers `unchanged`, so a failed call may simply be repeated.
   * @throws SignalsUnavailableError
   */
  setLifecycle(moves: { item_id: string; lifecycle_status: LifecycleStatus }[]): Promise<LifecycleMoveAnswer[]>;
}

export const MAX_ITEMS_PER_REQUEST = 1000;

/**
 * Items per request of `pushItems`, fewer than signals takes (MAX_ITEMS_PER_REQUEST): signals
 * handles a batch in long stretches of its event loop (the body parsed, each item and its person
 * checked, the upsert's statement built; ~0.1 ms an item), and in `ldp start` that loop also
 * answers people's searches. A bulk upload's batches of 1,000 held it up to 280 ms at a time
 * (profiled under the soak, docs/decisions.md "Search under load"); 200 keep a stretch near 20 ms.
 */
export const PUSH_ITEMS_PER_REQUEST = 200;

/**
 * A client of the signals service at `baseUrl` (e.g. ctx.urls.signals).
 * `maxBodyBytes`: largest request body signals accepts (its HTTP_BODY_LIMIT); `timeoutMs` per request.
 */
export function createSignalsClient(options: { baseUrl: string; apiKey: string; maxBodyBytes: number; timeoutMs?: number }): SignalsClient {
  const { apiKey, maxBodyBytes, timeoutMs = 120_000 } = options;
  const batchUrl = new URL('/api/v1/items/batch', options.baseUrl).href;
  const lifecycleUrl = new URL('/api/v1/items/lifecycle', options.baseUrl).href;

  /** POSTs `{"items": [...encoded]}` to `url`; the results in input order. */
  async function post<T>(url: string, encoded: string[]): Promise<T[]> {
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': apiKey, ...requestIdHeader() },
        body: `{"items":[${encoded.join(',')}]}`,
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      throw new SignalsUnavailableError(`signals did not answer ${url}: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.text().catch(() => '');
    if (res.status !== 200) {
      throw new SignalsUnavailableError(`signals answered ${res.status} to a batch of ${encoded.length} items: ${text.slice(0, 300)}`);
    }
    let body: { results?: (T & { index: number })[] };
    try {
      body = JSON.parse(text);
    } catch {
      throw new SignalsUnavailableError(`signals answered a batch with a body that is not JSON: ${text.slice(0, 300)}`);
    }
    if (!Array.isArray(body.results) || body.results.length !== encoded.length) {
      throw new SignalsUnavailableError(`signals answered a batch of ${encoded.length} items with ${body.results?.length ?? 'no'} results`);
    }
    return body.results.sort((a, b) => a.index - b.index).map(({ index: _index, ...r }) => r as T);
  }

  return {
    async pushItems(items) {
      const results: ItemPushResult[] = [];
      let batch: string[] = [];
      let bytes = 0;
      const budget = maxBodyBytes - 64;
      for (const item of items) {
        const json = JSON.stringify(item);
        const size = Buffer.byteLength(json) + 1;
        if (batch.length && (batch.length === PUSH_ITEMS_PER_REQUEST || bytes + size > budget)) {
          results.push(...await post<ItemPushResult>(batchUrl, batch));
          batch = [];
          bytes = 0;
        }
        batch.push(json);
        bytes += size;
      }
      if (batch.length) results.push(...await post<ItemPushResult>(batchUrl, batch));
      return results;
    },
    async setLifecycle(moves) {
      const results: LifecycleMoveAnswer[] = [];
      for (let i = 0; i < moves.length; i += MAX_ITEMS_PER_REQUEST) {
        results.push(...await post<LifecycleMoveAnswer>(lifecycleUrl, moves.slice(i, i + MAX_ITEMS_PER_REQUEST).map((m) => JSON.stringify(m))));
      }
      return results;
    },
  };
}
