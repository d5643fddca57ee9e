/**
 * Task `voice-dispatch-chunk` {job_id, first_seq, last_seq}: dispatches one chunk of a voice job's
 * items (VOICE_CHUNK_ITEMS of them; lib/aggregator/voice/jobs.ts).
 *
 * 1. Resolve, in one transaction with the job's counters: each pending item becomes `resolved`,
 *    `skipped_not_owned`, `skipped_no_contact` or `duplicate_active` (lib/aggregator/voice/dispatch.ts).
 * 2. Voice channel: the resolved items without a provider ref are submitted to the provider in
 *    batches of VOICE_PROVIDER_BATCH_SIZE (two under way at once), each phone decrypted only here,
 *    each call carrying the idempotency key `<job_id>:<item_id>`; each answered batch is recorded
 *    (`submitted`, provider_ref, provider_batch_ref) in its own transaction.
 *
 * Checkpointed like bulk chunks: every step commits what it did, and a retried chunk (a crash, a
 * provider failure after its retries) starts again from what is recorded — resolved items stay
 * resolved, recorded submissions are not sent again, and a submission the provider accepted but
 * we did not record (killed in between) is sent again with the same idempotency key, which the
 * provider answers with its first ref without placing a second call.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { recordSubmitted, refreshItemStatistics, resolveItems, submittableItems, type SubmittableItem } from '../lib/aggregator/voice/dispatch.ts';
import { loadVoiceJob, type DispatchPayload, type VoiceJobRecord } from '../lib/aggregator/voice/jobs.ts';
import { callKey, type ProviderCallAnswer } from '../lib/aggregator/voice/protocol.ts';
import { createVoiceProvider, voiceProviderSecret, type VoiceProvider } from '../lib/aggregator/voice/provider.ts';

/** Batches one chunk may have under way at the provider at once. */
const BATCHES_IN_FLIGHT = 2;

/** The `voice-dispatch-chunk` task (see the module comment). */
export function voiceDispatchChunk(ctx: PlatformContext): Task {
  let provider: Promise<VoiceProvider> | undefined;
  const providerOf = () => (provider ??= voiceProviderSecret(ctx.config).then((secret) => createVoiceProvider({
    url: ctx.config.VOICE_PROVIDER_URL, secret, timeoutMs: ctx.config.VOICE_PROVIDER_TIMEOUT_MS,
    retries: ctx.config.VOICE_PROVIDER_RETRIES, logger: ctx.logger.child({ component: 'voice-provider' }),
  })));

  return async (payload) => {
    const { job_id: jobId, first_seq: firstSeq, last_seq: lastSeq } = payload as DispatchPayload;
    const job = await loadVoiceJob(ctx.pool, jobId);
    if (!job) return;
    if (firstSeq === 0) await refreshItemStatistics(ctx.pool, job.total);
    await resolveItems(ctx.pool, job, firstSeq, lastSeq);
    if (job.channel !== 'voice') return;
    const items = await submittableItems(ctx.pool, jobId, firstSeq, lastSeq);
    if (items.length === 0) return;
    const voice = await providerOf();
    const size = ctx.config.VOICE_PROVIDER_BATCH_SIZE;
    const inFlight = new Set<Promise<void>>();
    let failure: unknown;
    for (let i = 0; i < items.length && failure === undefined; i += size) {
      while (inFlight.size >= BATCHES_IN_FLIGHT) await Promise.race(inFlight);
      const sending: Promise<void> = submit(voice, job, items.slice(i, i + size), `${jobId}:${firstSeq + i}`)
        .catch((err) => { failure ??= err; })
        .finally(() => inFlight.delete(sending));
      inFlight.add(sending);
    }
    await Promise.all(inFlight);
    if (failure !== undefined) throw failure;
  };

  /** Submits one batch and records the answer. @throws when the provider fails or leaves calls unanswered. */
  async function submit(voice: VoiceProvider, job: VoiceJobRecord, batch: SubmittableItem[], batchId: string): Promise<void> {
    const calls: { idempotency_key: string; to: string }[] = [];
    const itemOfKey = new Map<string, string>();
    const failures: { item_id: string; error_reason: string }[] = [];
    for (const item of batch) {
      let to: string;
      try {
        to = ctx.pii.decrypt(item.phone_encrypted);
      } catch {
        failures.push({ item_id: item.item_id, error_reason: 'the stored phone number could not be decrypted' });
        continue;
      }
      const key = callKey(job.job_id, item.item_id);
      itemOfKey.set(key, item.item_id);
      calls.push({ idempotency_key: key, to });
    }
    if (calls.length === 0) {
      await recordSubmitted(ctx.pool, job.job_id, null, [], failures);
      return;
    }
    const answer = await voice.submitBatch({
      batch_id: batchId,
      callback_url: ctx.config.VOICE_CALLBACK_URL ?? `${ctx.urls.aggregator}/v1/campaign/voice/callbacks`,
      content: job.content, schedule_at: job.schedule_at, metadata: job.metadata, calls,
    });
    const answered: (ProviderCallAnswer & { item_id: string })[] = [];
    for (const call of answer.calls) {
      const itemId = itemOfKey.get(call.idempotency_key);
      if (itemId && typeof call.provider_ref === 'string') answered.push({ ...call, batch_ref: call.batch_ref ?? answer.batch_ref, item_id: itemId });
    }
    await recordSubmitted(ctx.pool, job.job_id, answer.batch_ref, answered, failures);
    if (answered.length < calls.length) {
      throw new Error(`voice provider answered ${answered.length} of the ${calls.length} calls of batch ${batchId}; the chunk is retried`);
    }
  }
}
