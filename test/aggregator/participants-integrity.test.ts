/**
 * Referential integrity of aggregator.participants (sql/018_bulk_indexes.sql): one composite
 * foreign key to (aggregator, its organisation) instead of one to each — a participant's org_id
 * must be its aggregator's, and an aggregator with participants cannot move to another organisation.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAggregator } from '../../lib/aggregator/aggregators.ts';
import { insertParticipants } from '../../lib/aggregator/participants.ts';
import { loadNetwork, type Network } from '../../lib/network/config.ts';
import { createPiiCrypto } from '../../lib/platform/crypto.ts';
import { createPool, withTransaction, type Pool } from '../../lib/platform/db.ts';
import { createTestDatabase } from '../helpers/platform.ts';

let pool: Pool;
let network: Network;
const pii = createPiiCrypto(randomBytes(32));

beforeAll(async () => {
  pool = createPool(await createTestDatabase(), 2);
  network = await loadNetwork('local-discovery');
});
afterAll(async () => {
  await pool.end();
});

describe('participants foreign key', () => {
  const participant = () => ({
    participantId: randomUUID(),
    participant: { identity: { name: 'A clinic' }, profile: { category: 'Medical' }, locations: [] },
    keys: {},
  });

  it('stores a participant of the aggregator\'s own organisation and refuses one of another organisation', async () => {
    const [a, b] = await withTransaction(pool, async (c) => [
      await createAggregator(c, network, { name: 'Integrity A', types: ['provider'] }),
      await createAggregator(c, network, { name: 'Integrity B', types: ['provider'] }),
    ]);
    const domain = network.domains.get('provider')!;
    const own = participant();
    const stored = await withTransaction(pool, (c) => insertParticipants(c, pii, { aggregatorId: a.aggregator_id, orgId: a.org_id, domain }, [own]));
    expect([...stored]).toEqual([own.participantId]);

    await expect(withTransaction(pool, (c) => insertParticipants(c, pii, { aggregatorId: a.aggregator_id, orgId: b.org_id, domain }, [participant()])))
      .rejects.toMatchObject({ code: '23503', constraint: 'participants_aggregator_org_fkey' });
    await expect(withTransaction(pool, (c) => insertParticipants(c, pii, { aggregatorId: randomUUID(), orgId: a.org_id, domain }, [participant()])))
      .rejects.toMatchObject({ code: '23503' });

    await expect(pool.query('UPDATE aggregator.aggregators SET org_id = $2 WHERE aggregator_id = $1', [a.aggregator_id, b.org_id]))
      .rejects.toMatchObject({ code: '23503', constraint: 'participants_aggregator_org_fkey' });
    await expect(pool.query('DELETE FROM aggregator.organisations WHERE org_id = $1', [a.org_id])).rejects.toMatchObject({ code: '23503' });
  });
});
