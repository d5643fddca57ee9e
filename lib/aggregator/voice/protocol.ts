/**
 * The voice-provider protocol (ours, generic; docs/decisions.md "Voice campaigns"): JSON over HTTP,
 * every body signed (signature.ts).
 *
 * - `POST <VOICE_PROVIDER_URL>/v1/batches` with a {@link ProviderBatch} → 200 {@link ProviderBatchAnswer}.
 *   A call whose `idempotency_key` the provider has seen before is not placed again: it is answered
 *   with its first `provider_ref` and `batch_ref` and `replayed: true`.
 * - The provider later `POST`s {@link ProviderCallback} to the batch's `callback_url` (one or more
 *   per batch) → 200; it retries on anything else.
 */
import { z } from 'zod';

export const BATCH_PATH = '/v1/batches';

/** Calls per batch and updates per callback the protocol allows. */
export const MAX_CALLS_PER_BATCH = 10_000;

export const providerCallSchema = z.object({
  /** `<job_id>:<item_id>`: the same item always has the same key. */
  idempotency_key: z.string().min(1).max(200),
  /** E.164 phone number. */
  to: z.string().min(3).max(20),
});

export const providerBatchSchema = z.object({
  batch_id: z.string().min(1).max(200),
  callback_url: z.url(),
  content: z.object({ script: z.string().optional(), audio_url: z.string().optional() }),
  schedule_at: z.string().nullable(),
  metadata: z.array(z.object({ key: z.string(), value: z.string() })),
  calls: z.array(providerCallSchema).min(1).max(MAX_CALLS_PER_BATCH),
});
export type ProviderBatch = z.infer<typeof providerBatchSchema>;

export interface ProviderCallAnswer {
  idempotency_key: string;
  provider_ref: string;
  batch_ref: string;
  replayed: boolean;
}

export interface ProviderBatchAnswer {
  batch_ref: string;
  calls: ProviderCallAnswer[];
}

export const callbackUpdateSchema = z.object({
  idempotency_key: z.string().min(1).max(200),
  provider_ref: z.string().min(1).max(200),
  status: z.enum(['sent', 'failed']),
  error_reason: z.string().max(1000).nullish(),
});
export type CallbackUpdate = z.infer<typeof callbackUpdateSchema>;

export const providerCallbackSchema = z.object({
  batch_ref: z.string().max(200).optional(),
  updates: z.array(callbackUpdateSchema).min(1).max(MAX_CALLS_PER_BATCH),
});
export type ProviderCallback = z.infer<typeof providerCallbackSchema>;

/** The idempotency key of item `itemId` of job `jobId`. */
export function callKey(jobId: string, itemId: string): string {
  return `${jobId}:${itemId}`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Job and item ids of a key made by {@link callKey}, or null when `key` is not one. */
export function parseCallKey(key: string): { jobId: string; itemId: string } | null {
  const [jobId, itemId, extra] = key.split(':');
  if (extra !== undefined || !UUID.test(jobId ?? '') || !UUID.test(itemId ?? '')) return null;
  return { jobId: jobId.toLowerCase(), itemId: itemId.toLowerCase() };
}
