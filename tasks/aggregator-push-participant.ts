/**
 * Task `aggregator-push-participant` {participant_id}: pushes one participant (registered through a
 * registration link) to signals as an item, and records the lifecycle status signals answered.
 *
 * Signals unreachable or failing: the task throws and graphile-worker retries it with backoff, so a
 * stored submission is never lost. Signals refusing the item (invalid, conflict): recorded in
 * `push_error` and not retried (retrying cannot change the answer). Idempotent: the upsert of the
 * same item answers `unchanged`. Once recorded, the aggregator's dashboard is recomputed.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { enqueueDashboardRefresh } from '../lib/aggregator/dashboard.ts';
import { participantItem, recordLifecycle } from '../lib/aggregator/participants.ts';
import { createSignalsClient, itemPerson } from '../lib/clients/signals-client.ts';
import { withTransaction } from '../lib/platform/db.ts';

interface StoredParticipant {
  aggregator_id: string;
  domain: string;
  name_encrypted: string | null;
  phone_encrypted: string | null;
  email_encrypted: string | null;
  profile: Record<string, unknown>;
  locations: { lat: number; lng: number; label?: string }[];
}

export function aggregatorPushParticipant(ctx: PlatformContext): Task {
  return async (payload) => {
    const { participant_id: participantId } = payload as { participant_id: string };
    const { rows: [p] } = await ctx.pool.query<StoredParticipant>(
      `SELECT aggregator_id, domain, name_encrypted, phone_encrypted, email_encrypted, profile, locations
         FROM aggregator.participants WHERE participant_id = $1`, [participantId]);
    if (!p) return;
    const domain = ctx.network.domains.get(p.domain);
    if (!domain) throw new Error(`participant ${participantId} is of domain ${p.domain}, which network ${ctx.network.id} no longer declares`);
    // Identity fields are stored apart (encrypted); put them back so that the item follows the schema's x-private rules.
    const profile = { ...p.profile };
    const decrypt = (v: string | null) => (v === null ? undefined : ctx.pii.decrypt(v));
    const identity = { name: decrypt(p.name_encrypted), phone: decrypt(p.phone_encrypted), email: decrypt(p.email_encrypted) };
    for (const f of domain.fields) {
      if (f.identity && identity[f.identity] !== undefined) profile[f.name] = identity[f.identity];
    }
    const item = participantItem(ctx.network, domain, participantId, { profile, identity, locations: p.locations },
      { createdBy: `aggregator:${p.aggregator_id}`, instanceUrl: ctx.urls.aggregator });
    const signals = createSignalsClient({ baseUrl: ctx.urls.signals, apiKey: ctx.internalApiKey, maxBodyBytes: ctx.config.HTTP_BODY_LIMIT });
    // The item names its person (ciphertexts and blind indexes only), so signals links it to the person's user.
    const [answer] = await signals.pushItems([{ ...item, person: itemPerson(ctx.pii, identity) }]);
    await withTransaction(ctx.pool, async (client) => {
      if (answer.outcome === 'invalid' || answer.outcome === 'conflict' || !answer.lifecycle_status) {
        ctx.logger.warn({ participantId, answer }, 'signals refused a registered participant');
        await client.query('UPDATE aggregator.participants SET push_error = $2, updated_at = now() WHERE participant_id = $1',
          [participantId, `signals refused the item: ${answer.message ?? answer.outcome}`]);
        return;
      }
      await recordLifecycle(client, [{ participantId, lifecycleStatus: answer.lifecycle_status }]);
      await client.query('UPDATE aggregator.participants SET push_error = NULL WHERE participant_id = $1', [participantId]);
      // The dashboard counts participants by lifecycle status: recompute it (pending refreshes coalesce by job key).
      await enqueueDashboardRefresh(client, p.aggregator_id);
    });
  };
}
