/**
 * The aggregator service as signals asks it (a service never reads another's schema: DESIGN.md
 * "Shape"): whether an aggregator's bearer token names an aggregator that may act now. Signals
 * verifies the token's signature itself; only the aggregator service knows whether that aggregator
 * and its organisation are still approved, and what roles and types the token grants against what
 * is registered. It answers that at `GET /v1/me` with the token itself.
 */
import { requestIdHeader } from '../platform/request-context.ts';

/** An aggregator as the aggregator service sees a token's caller now (its `GET /v1/me`). */
export interface AggregatorCaller {
  aggregator_id: string;
  org_id: string;
  aggregator_type: string[];
  roles: string[];
}

/** The aggregator service's answer: the caller, or its refusal (status and error code, shape C). */
export type CallerCheck =
  | { ok: true; caller: AggregatorCaller }
  | { ok: false; status: number; code: string; message: string };

/** The aggregator service could not be asked (network, timeout, 5xx, an answer not of the documented shape). */
export class AggregatorUnavailableError extends Error {
  name = 'AggregatorUnavailableError';
}

export interface AggregatorClient {
  /**
   * Asks the aggregator service who `token` (a verified aggregator bearer token) names now.
   * @throws AggregatorUnavailableError
   */
  caller(token: string): Promise<CallerCheck>;
}

/** A client of the aggregator service at `baseUrl` (e.g. ctx.urls.aggregator); `timeoutMs` per request. */
export function createAggregatorClient(options: { baseUrl: string; timeoutMs?: number }): AggregatorClient {
  const { timeoutMs = 5000 } = options;
  const meUrl = new URL('/v1/me', options.baseUrl).href;
  return {
    async caller(token) {
      let res: Response;
      let text: string;
      try {
        res = await fetch(meUrl, { headers: { authorization: `Bearer ${token}`, ...requestIdHeader() }, signal: AbortSignal.timeout(timeoutMs) });
        text = await res.text();
      } catch (err) {
        throw new AggregatorUnavailableError(`the aggregator service did not answer ${meUrl}: ${(err as Error).message}`, { cause: err });
      }
      let body: { aggregator_id?: string; error?: { code?: string; detail?: string } };
      try {
        body = JSON.parse(text);
      } catch {
        throw new AggregatorUnavailableError(`the aggregator service answered ${res.status} with a body that is not JSON`);
      }
      if (res.status === 200 && typeof body.aggregator_id === 'string') return { ok: true, caller: body as AggregatorCaller };
      if (res.status === 401 || res.status === 403) {
        return { ok: false, status: res.status, code: body.error?.code ?? 'forbidden', message: body.error?.detail ?? `the aggregator service answered ${res.status}` };
      }
      throw new AggregatorUnavailableError(`the aggregator service answered ${res.status} to ${meUrl}`);
    },
  };
}
