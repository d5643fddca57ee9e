/**
 * The voice-provider adapter: submits a batch of calls to a generic HTTP voice provider speaking
 * protocol.ts — a JSON POST to `<VOICE_PROVIDER_URL>/v1/batches`, signed with HMAC-SHA256
 * (VOICE_PROVIDER_SECRET, signature.ts), each attempt bounded by a timeout, retried with
 * exponential backoff and jitter on a network error, a timeout, 429 or 5xx.
 */
import { randomBytes } from 'node:crypto';
import { readOrCreateSecret } from '../../platform/secrets.ts';
import type { Logger } from '../../platform/logger.ts';
import { BATCH_PATH, type ProviderBatch, type ProviderBatchAnswer } from './protocol.ts';
import { SIGNATURE_HEADER, signBody } from './signature.ts';

export interface VoiceProviderOptions {
  url: string;
  secret: string;
  timeoutMs: number;
  retries: number;
  logger?: Logger;
  /** First backoff delay in ms (doubled per retry, ±50 % jitter); default 250. */
  backoffMs?: number;
}

export interface VoiceProvider {
  /**
   * Submits `batch`; resolves with the provider's answer, one entry per call.
   * @throws VoiceProviderError when the provider refuses the batch (4xx other than 429), answers
   *   something malformed, or is still failing after the retries.
   */
  submitBatch(batch: ProviderBatch): Promise<ProviderBatchAnswer>;
}

export class VoiceProviderError extends Error {
  name = 'VoiceProviderError';
  constructor(message: string, readonly retryable: boolean) {
    super(message);
  }
}

/**
 * The provider secret: VOICE_PROVIDER_SECRET, or one generated once into `<DATA_DIR>/keys`
 * (`voice-provider.secret`), which `ldp voice-provider` reads too on the same DATA_DIR.
 */
export async function voiceProviderSecret(config: { VOICE_PROVIDER_SECRET?: string; dataDirPath: string }): Promise<string> {
  return config.VOICE_PROVIDER_SECRET
    ?? readOrCreateSecret(config.dataDirPath, 'voice-provider.secret', () => randomBytes(32).toString('base64url'));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Creates the adapter (see the module comment). */
export function createVoiceProvider(options: VoiceProviderOptions): VoiceProvider {
  const endpoint = `${options.url.replace(/(?<!\/)\/+$/, '')}${BATCH_PATH}`;
  const backoff = options.backoffMs ?? 250;

  async function attempt(body: string): Promise<ProviderBatchAnswer> {
    let res: Response;
    try {
      res = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json', [SIGNATURE_HEADER]: signBody(options.secret, body) },
        body,
        signal: AbortSignal.timeout(options.timeoutMs),
      });
    } catch (err) {
      const cause = (err as Error).name === 'TimeoutError' ? `no answer within ${options.timeoutMs} ms` : (err as Error).message;
      throw new VoiceProviderError(`voice provider ${endpoint} unreachable: ${cause}`, true);
    }
    const text = await res.text().catch(() => '');
    if (res.status !== 200) {
      const retryable = res.status === 429 || res.status >= 500;
      throw new VoiceProviderError(`voice provider answered ${res.status}: ${text.slice(0, 200)}`, retryable);
    }
    let answer: ProviderBatchAnswer;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new VoiceProviderError('voice provider answered a body that is not JSON', true);
    }
    if (typeof answer?.batch_ref !== 'string' || !Array.isArray(answer.calls)) {
      throw new VoiceProviderError('voice provider answered without batch_ref and calls', false);
    }
    return answer;
  }

  return {
    async submitBatch(batch) {
      const body = JSON.stringify(batch);
      for (let n = 0; ; n++) {
        try {
          return await attempt(body);
        } catch (err) {
          const retryable = err instanceof VoiceProviderError && err.retryable;
          if (!retryable || n >= options.retries) throw err;
          const delay = backoff * 2 ** n * (0.5 + Math.random());
          options.logger?.warn({ err: (err as Error).message, batch_id: batch.batch_id, attempt: n + 1, delayMs: Math.round(delay) }, 'voice batch submission failed; retrying');
          await sleep(delay);
        }
      }
    },
  };
}
