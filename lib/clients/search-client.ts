/**
 * HTTP client of the search service, used by signals (discover, match score). Every call carries
 * the internal key (`x-api-key: ctx.internalApiKey`) and a timeout (SEARCH_TIMEOUT_MS), and ends
 * in one of three ways the callers map to their degraded answers (DESIGN.md "Shape"):
 * - the search service answered 2xx: its JSON body;
 * - `SearchUnavailableError`: timeout, connection refused/reset, a 5xx, a body that is not JSON, or
 *   a 4xx that says the platform itself is at fault rather than the caller: 401 (our internal key
 *   refused), 404 `not_found` (no such route: SEARCH_URL points elsewhere), 405, 413, 415, or an
 *   overloaded service (408, 429);
 * - `SearchRejectedError`: any other 4xx (e.g. 400, 403 interaction not allowed, 404 unknown
 *   anchor), with the search service's shape-A body, for the caller to pass on as its own error.
 */
import { request, type Dispatcher } from 'undici';
import type { Config } from '../platform/config.ts';
import type { ModelVersion } from '../network/model-version.ts';
import type { ItemRecord } from '../network/items.ts';
import { requestIdHeader } from '../platform/request-context.ts';

/** The search service cannot answer now; the caller answers its degraded way. */
export class SearchUnavailableError extends Error {
  name = 'SearchUnavailableError';
  constructor(message: string, readonly reason: 'timeout' | 'unreachable' | 'error_status' | 'bad_response', readonly status?: number) {
    super(message);
  }
}

/** The search service refused the request (4xx other than 401/408/429); `code`/`message` from its body. */
export class SearchRejectedError extends Error {
  name = 'SearchRejectedError';
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

const UNAVAILABLE_4XX = new Set([401, 405, 408, 413, 415, 429]);

/** What calling the search service needs of a process (the platform context satisfies it). */
export interface SearchClientDeps {
  config: Pick<Config, 'SEARCH_TIMEOUT_MS'>;
  internalApiKey: string;
  urls: { search: string };
}

/**
 * POSTs `body` as JSON to `path` of the search service and returns the parsed JSON answer.
 * @throws SearchUnavailableError or SearchRejectedError as described above.
 */
export async function postToSearch<T>(ctx: SearchClientDeps, path: string, body: unknown): Promise<T> {
  const timeoutMs = ctx.config.SEARCH_TIMEOUT_MS;
  const timedOut = (err: unknown) => (err as Error).name === 'TimeoutError';
  // undici's `request`, not `fetch`: no WHATWG streams around the body, and the request goes out in
  // one write (fetch wrote a string body as a stream, a syscall per part) — on the discover path
  // fetch cost signals ~1 ms of CPU per call (docs/decisions.md, "Search at scale").
  let response: Dispatcher.ResponseData;
  try {
    response = await request(new URL(path, ctx.urls.search), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', 'x-api-key': ctx.internalApiKey, ...requestIdHeader() },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    if (timedOut(err)) throw new SearchUnavailableError(`search service did not answer within ${timeoutMs} ms`, 'timeout');
    const { code, cause } = err as { code?: string; cause?: { code?: string; message?: string } };
    throw new SearchUnavailableError(`search service unreachable: ${cause?.code ?? code ?? cause?.message ?? (err as Error).message}`, 'unreachable');
  }
  const status = response.statusCode;
  let json: any;
  try {
    json = await response.body.json();
  } catch (err) {
    if (timedOut(err)) throw new SearchUnavailableError(`search service did not answer within ${timeoutMs} ms`, 'timeout');
    throw new SearchUnavailableError(`search service answered ${status} without a JSON body`, 'bad_response', status);
  }
  if (status >= 200 && status <= 299) return json as T;
  const code = typeof json?.error === 'string' ? json.error : 'search_rejected';
  if (status >= 500 || UNAVAILABLE_4XX.has(status) || (status === 404 && code === 'not_found')) {
    throw new SearchUnavailableError(`search service answered ${status} ${code}`, 'error_status', status);
  }
  const message = typeof json?.message === 'string' ? json.message : `search service answered ${status}`;
  throw new SearchRejectedError(status, code, message);
}

/** One item's entry in the search index (internal endpoint `POST /v1/index/entries`). */
export interface IndexEntry {
  item: ItemRecord;
  /** Embedding model version the vector was computed with. */
  model: ModelVersion;
  /** Unit-length embedding of the item's searchable text. */
  embedding: number[];
  indexed_at: string;
}

/**
 * The index entries of `ids` (1..100 item ids); ids that are not indexed are absent.
 * @throws SearchUnavailableError or SearchRejectedError (see `postToSearch`).
 */
export async function fetchIndexEntries(ctx: SearchClientDeps, ids: string[]): Promise<Map<string, IndexEntry>> {
  const body = await postToSearch<{ entries?: IndexEntry[] }>(ctx, '/v1/index/entries', { ids });
  if (!Array.isArray(body?.entries)) throw new SearchUnavailableError('search service answered without entries', 'bad_response', 200);
  return new Map(body.entries.map((e) => [e.item.item_id, e]));
}
