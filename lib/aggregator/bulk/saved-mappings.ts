/**
 * Saved mappings of an aggregator (issue 17; table aggregator.bulk_mappings): a named mapping
 * (lib/aggregator/bulk/mapping.ts) for one participant type, versioned — saving again makes a new
 * version and keeps the old ones readable, since jobs record the id and version they used.
 * Retiring hides a mapping from the list and from new uploads; its versions stay readable.
 */
import { randomUUID } from 'node:crypto';
import type { Pool, Queryable } from '../../platform/db.ts';
import { withTransaction } from '../../platform/db.ts';
import type { Mapping } from './mapping.ts';
import type { UploadMode } from './upsert.ts';

/** A saved mapping as the API returns it (one version). */
export interface SavedMappingJson {
  id: string;
  version: number;
  name: string;
  participant_type: string;
  mapping: Mapping;
  /** The mode of uploads made with this mapping unless they say otherwise (issue 30). */
  mode: UploadMode;
  created_by: string;
  created_at: string;
  retired_at: string | null;
  /** The newest version of this mapping. */
  latest_version: number;
}

const iso = (column: string) => `to_char(m.${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${column}`;
const COLUMNS = `m.mapping_id AS id, m.version, m.name, m.participant_type, m.mapping, m.mode, m.created_by, ${iso('created_at')},
  ${iso('retired_at')}, (SELECT max(version) FROM aggregator.bulk_mappings l WHERE l.mapping_id = m.mapping_id)::int AS latest_version`;

/** Saves a new mapping (version 1). */
export async function createSavedMapping(db: Queryable, input: {
  aggregatorId: string; name: string; participantType: string; mapping: Mapping; mode?: UploadMode; createdBy: string;
}): Promise<SavedMappingJson> {
  const id = randomUUID();
  await db.query(
    `INSERT INTO aggregator.bulk_mappings (mapping_id, version, aggregator_id, name, participant_type, mapping, mode, created_by)
     VALUES ($1, 1, $2, $3, $4, $5, $6, $7)`,
    [id, input.aggregatorId, input.name, input.participantType, JSON.stringify(input.mapping), input.mode ?? 'create', input.createdBy]);
  return (await getSavedMapping(db, input.aggregatorId, id))!;
}

/** Version `version` (default: the newest) of mapping `id` of `aggregatorId`, retired or not; null when there is none. */
export async function getSavedMapping(db: Queryable, aggregatorId: string, id: string, version?: number): Promise<SavedMappingJson | null> {
  const { rows } = await db.query<SavedMappingJson>(
    `SELECT ${COLUMNS} FROM aggregator.bulk_mappings m
      WHERE m.mapping_id = $1 AND m.aggregator_id = $2 AND ($3::int IS NULL OR m.version = $3)
      ORDER BY m.version DESC LIMIT 1`, [id, aggregatorId, version ?? null]);
  return rows[0] ?? null;
}

/** The newest version of every mapping of `aggregatorId` that is not retired, by name. */
export async function listSavedMappings(db: Queryable, aggregatorId: string, participantType?: string): Promise<SavedMappingJson[]> {
  const { rows } = await db.query<SavedMappingJson>(
    `SELECT ${COLUMNS} FROM aggregator.bulk_mappings m
      WHERE m.aggregator_id = $1 AND m.retired_at IS NULL AND ($2::text IS NULL OR m.participant_type = $2)
        AND m.version = (SELECT max(version) FROM aggregator.bulk_mappings l WHERE l.mapping_id = m.mapping_id)
      ORDER BY m.name, m.mapping_id`, [aggregatorId, participantType ?? null]);
  return rows;
}

export type UpdateOutcome = { outcome: 'updated'; mapping: SavedMappingJson } | { outcome: 'not_found' } | { outcome: 'retired' };

/** Adds a version to mapping `id` (name and mapping given; the participant type stays, and the mode unless given). */
export async function updateSavedMapping(pool: Pool, aggregatorId: string, id: string, input: {
  name: string; mapping: Mapping; mode?: UploadMode; createdBy: string;
}): Promise<UpdateOutcome> {
  return withTransaction(pool, async (client) => {
    const { rows: [latest] } = await client.query<{ version: number; participant_type: string; mode: UploadMode; retired: boolean }>(
      `SELECT version, participant_type, mode, retired_at IS NOT NULL AS retired FROM aggregator.bulk_mappings
        WHERE mapping_id = $1 AND aggregator_id = $2 ORDER BY version DESC LIMIT 1 FOR UPDATE`, [id, aggregatorId]);
    if (!latest) return { outcome: 'not_found' };
    if (latest.retired) return { outcome: 'retired' };
    await client.query(
      `INSERT INTO aggregator.bulk_mappings (mapping_id, version, aggregator_id, name, participant_type, mapping, mode, created_by)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
      [id, latest.version + 1, aggregatorId, input.name, latest.participant_type, JSON.stringify(input.mapping), input.mode ?? latest.mode, input.createdBy]);
    return { outcome: 'updated', mapping: (await getSavedMapping(client, aggregatorId, id))! };
  });
}

/** Retires every version of mapping `id`; false when the aggregator has no such mapping. Repeating it is harmless. */
export async function retireSavedMapping(db: Queryable, aggregatorId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE aggregator.bulk_mappings SET retired_at = coalesce(retired_at, now()) WHERE mapping_id = $1 AND aggregator_id = $2`,
    [id, aggregatorId]);
  return (rowCount ?? 0) > 0;
}
