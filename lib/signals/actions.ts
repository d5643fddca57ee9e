/**
 * Actions between a source and a target item (spec POST /api/v1/action/perform; issue 7):
 * the rules checked before an action is recorded, the record and its events, status moves with
 * optimistic concurrency, and the reveal of contact details at the interaction's
 * `reveals_pii_on_status`. Decisions: docs/decisions.md, "People, consent and actions"; who may
 * perform, move and read: "Trust II (issue 29)", "The actor policy (actions)".
 */
import type { PiiCrypto } from '../platform/crypto.ts';
import type { Pool, PoolClient, Queryable } from '../platform/db.ts';
import { interactionAllowed, type Network } from '../network/config.ts';
import { consumeCode, OneTimeCodeError } from './one-time-codes.ts';
import { getUser, getUserProfile, userOfItem, type UserRecord } from './people.ts';
import { guardianScope, sendGuardianCode } from './signup.ts';

/** A refused action or status move: HTTP status, API error code, message. */
export class ActionError extends Error {
  name = 'ActionError';
  constructor(readonly status: number, readonly code: string, message: string, readonly headers?: Record<string, string>) {
    super(message);
  }
}

export interface ItemRef {
  item_network: string;
  item_domain: string;
  item_type: string;
  item_id: string;
}

export interface PerformInput {
  action_type: string;
  source_item: ItemRef;
  target_item: ItemRef & { item_instance_url: string };
  requirements_snapshot?: Record<string, unknown>;
  acting_as_user_id?: string;
  consent?: { acknowledged: boolean; version: number; brand?: string | null };
  guardian_otp?: string;
}

/**
 * Who performs: the identity of the request besides its API key — a person (session or user token),
 * an aggregator (its bearer token), or the API key alone (an integration, which stands for no party).
 */
export type Actor =
  | { kind: 'user'; userId: string }
  | { kind: 'aggregator'; aggregatorId: string; orgId: string }
  | { kind: 'api_key'; keyId: string };

export const actorName = (a: Actor) => (a.kind === 'user' ? `user:${a.userId}` : a.kind === 'aggregator' ? `aggregator:${a.aggregatorId}` : `api_key:${a.keyId}`);

export interface ActionRecord {
  action_id: string;
  action_type: string;
  action_status: string;
  update_count: number;
  terminal: boolean;
  source_item_id: string;
  target_item_id: string;
  target_instance_url: string;
  actor: string;
  acting_org_id: string | null;
  acting_as_user_id: string | null;
  requirements_snapshot: Record<string, unknown> | null;
  consent: Record<string, unknown> | null;
  /** The minors whose guardian gave a code for this action (at perform, or at the move that reveals contacts). */
  guardian_code_user_ids: string[];
  created_at: string;
  updated_at: string;
}

const ACTION_COLUMNS = `action_id, action_type, action_status, update_count, terminal, source_item_id, target_item_id,
  target_instance_url, actor, acting_org_id, acting_as_user_id, requirements_snapshot, consent, guardian_code_user_ids::text[],
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface StoredItem {
  item_id: string;
  item_network: string;
  item_domain: string;
  item_type: string;
  lifecycle_status: string;
  created_by: string | null;
  user_id: string | null;
}

/** Whether some item `created_by` aggregator `aggregatorId` is linked to user `userId` (the aggregator onboarded that person). */
async function onboardedBy(db: Queryable, userId: string, aggregatorId: string): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM signals.items WHERE user_id = $1 AND created_by = $2 LIMIT 1', [userId, `aggregator:${aggregatorId}`]);
  return Boolean(rowCount);
}

/**
 * Whether `actor` stands for the party of `item`: the item's person (user), or an aggregator that
 * onboarded the item or its person. An API key alone stands for no party.
 */
async function standsFor(db: Queryable, item: Pick<StoredItem, 'user_id' | 'created_by'> | undefined, actor: Actor): Promise<boolean> {
  if (!item) return false;
  if (actor.kind === 'user') return item.user_id === actor.userId;
  if (actor.kind !== 'aggregator') return false;
  if (item.created_by === `aggregator:${actor.aggregatorId}`) return true;
  return item.user_id !== null && onboardedBy(db, item.user_id, actor.aggregatorId);
}

async function loadItem(db: Queryable, ref: ItemRef, which: 'source_item' | 'target_item'): Promise<StoredItem> {
  const { rows } = await db.query<StoredItem>(
    'SELECT item_id, item_network, item_domain, item_type, lifecycle_status, created_by, user_id FROM signals.items WHERE item_id = $1', [ref.item_id]);
  const item = rows[0];
  if (!item || item.item_network !== ref.item_network || item.item_domain !== ref.item_domain || item.item_type !== ref.item_type) {
    throw new ActionError(404, 'item_not_found', `${which}: no item ${ref.item_id} of ${ref.item_network}/${ref.item_domain}/${ref.item_type}`);
  }
  return item;
}

export interface PerformDeps {
  pool: Pool;
  pii: PiiCrypto;
  network: Network;
}

/**
 * Checks every rule and records the action (status = the interaction's first status, update_count
 * 0, a `created` event), in one transaction. Order of the checks: action type (400), self-action
 * (400), interaction matrix (403), items (404), source live (409), consent (400/422),
 * requirements (400), organisation and acting user (400/403/404), a party's credential — never the
 * API key alone (403 `person_token_required`), the source side (403 `source_not_owned`), guardian
 * code for a minor (403/429), one open action per (source, target, type) (409).
 * @throws ActionError
 */
export async function performAction(deps: PerformDeps, input: PerformInput, actor: Actor, actingOrgId: string | undefined): Promise<ActionRecord> {
  const { network } = deps;
  const action = network.actions[input.action_type];
  if (!action) throw new ActionError(400, 'unknown_action_type', `action_type must be one of ${Object.keys(network.actions).join(', ')}`);
  if (!action.statuses) throw new ActionError(400, 'action_not_performable', `action_type ${input.action_type} relates items but cannot be performed`);
  if (input.source_item.item_id === input.target_item.item_id) throw new ActionError(400, 'self_action', 'source_item and target_item are the same item');
  const from = { network: input.source_item.item_network, domain: input.source_item.item_domain };
  const to = { network: input.target_item.item_network, domain: input.target_item.item_domain };
  if (!interactionAllowed(network, from, to, input.action_type)) {
    throw new ActionError(403, 'interaction_not_allowed', `${input.action_type} from ${from.network}/${from.domain} to ${to.network}/${to.domain} is not an allowed interaction`);
  }
  const source = await loadItem(deps.pool, input.source_item, 'source_item');
  await loadItem(deps.pool, input.target_item, 'target_item');
  if (source.lifecycle_status !== 'live') throw new ActionError(409, 'source_not_live', `source_item is ${source.lifecycle_status}, not live`);

  const consentVersion = network.people.consent_version;
  if (action.reveals_pii_on_status) {
    if (!input.consent?.acknowledged) {
      throw new ActionError(400, 'consent_required', `consent: ${input.action_type} shares contact details; send consent {acknowledged: true, version: ${consentVersion}}`);
    }
    if (input.consent.version < consentVersion) {
      throw new ActionError(422, 'consent_outdated', `consent: version ${input.consent.version} is older than the current version ${consentVersion}`);
    }
  }
  const validate = network.actionRequirements.get(input.action_type);
  if (validate && !validate(input.requirements_snapshot ?? {})) {
    throw new ActionError(400, 'invalid_requirements', `requirements_snapshot: ${validate.errors!.map((e) => `${e.instancePath || '(root)'} ${e.message}`).join('; ')}`);
  }

  const actingUser = await resolveActingUser(deps.pool, input, actor, actingOrgId, source);
  const minor = actingUser && isMinor(network, actingUser);

  return deps.pool.connect().then(async (client) => {
    try {
      await client.query('BEGIN');
      let otpFailure: ActionError | undefined;
      if (minor) otpFailure = await guardianGate(client, deps, actingUser, input.guardian_otp, 'The acting user');
      if (otpFailure) {
        // The code sent or the wrong try is kept (committed); nothing else is written.
        await client.query('COMMIT');
        throw otpFailure;
      }
      const record = await insertAction(client, input, actor, actingOrgId, actingUser?.user_id ?? null, Object.keys(action.statuses!)[0],
        minor ? [actingUser.user_id] : []);
      await client.query('COMMIT');
      return record;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  });
}

/** A user under the network's guardian_consent_age, or one whose guardian has not yet confirmed. */
function isMinor(network: Network, user: UserRecord): boolean {
  return user.status === 'pending_guardian' || (user.age !== null && user.age < network.people.guardian_consent_age);
}

/**
 * The person acting: acting_as_user_id (checked against the organisation and the actor), else the
 * user of the request, else the user the source item belongs to. Also checks that the actor is the
 * source side: an acting user owns the source item; an aggregator without acting_as_user_id
 * onboarded the source item or its person; an API key alone acts for no one.
 */
async function resolveActingUser(db: Queryable, input: PerformInput, actor: Actor, actingOrgId: string | undefined, source: StoredItem): Promise<UserRecord | null> {
  if (actingOrgId !== undefined) {
    if (!UUID.test(actingOrgId)) throw new ActionError(400, 'invalid_request', 'x-acting-org-id must be a UUID');
    // Organisations reach signals as items whose id is the org id (pushed by the aggregator service).
    const { rowCount } = await db.query('SELECT 1 FROM signals.items WHERE item_id = $1', [actingOrgId]);
    if (!rowCount) throw new ActionError(404, 'organisation_not_found', `No organisation ${actingOrgId}`);
    if (actor.kind !== 'aggregator' || actor.orgId !== actingOrgId) {
      throw new ActionError(403, 'not_allowed_for_organisation', 'Only an aggregator of the organisation (bearer token) may act for it');
    }
    if (!input.acting_as_user_id) throw new ActionError(400, 'acting_as_user_required', 'acting_as_user_id is required with x-acting-org-id');
  } else if (input.acting_as_user_id && actor.kind === 'aggregator') {
    throw new ActionError(400, 'acting_org_required', 'An aggregator acting as a user names its organisation in x-acting-org-id');
  }
  if (actor.kind === 'api_key') {
    throw new ActionError(403, 'person_token_required',
      "An API key alone acts for no one: send the source person's session or token, or the bearer token of the aggregator that onboarded them");
  }
  let user: UserRecord | null = null;
  if (input.acting_as_user_id) {
    if (actor.kind === 'user' && actor.userId !== input.acting_as_user_id) {
      throw new ActionError(403, 'not_allowed_to_act_as', 'A user may act only as themselves');
    }
    user = UUID.test(input.acting_as_user_id) ? await getUser(db, input.acting_as_user_id) : null;
    if (!user) throw new ActionError(404, 'user_not_found', `acting_as_user_id: no user ${input.acting_as_user_id}`);
    if (actor.kind === 'aggregator' && !(await onboardedBy(db, user.user_id, actor.aggregatorId))) {
      throw new ActionError(403, 'user_not_onboarded_by_aggregator', 'An aggregator acts only for users it onboarded');
    }
  } else if (actor.kind === 'user') {
    user = await getUser(db, actor.userId);
  }
  if (user && source.user_id !== user.user_id) {
    throw new ActionError(403, 'source_not_owned', 'source_item does not belong to the acting user');
  }
  if (!user) {
    // An aggregator without acting_as_user_id acts for the source it onboarded, and so for its person.
    if (!(await standsFor(db, source, actor))) throw new ActionError(403, 'source_not_owned', 'source_item was not onboarded by this aggregator');
    if (source.user_id) user = await getUser(db, source.user_id);
  }
  if (user?.status === 'disabled') throw new ActionError(403, 'user_disabled', 'The acting user is disabled');
  return user;
}

/**
 * The guardian step for a minor (`who`: "The acting user", "The target's person" — for the
 * messages): without a code, sends one to the guardian and refuses with GUARDIAN_OTP_REQUIRED;
 * with a code, consumes it (once) and confirms the guardian.
 * @returns the refusal to commit and throw, or undefined to go on (in the same transaction).
 */
async function guardianGate(client: PoolClient, deps: PerformDeps, minor: UserRecord, otp: string | undefined, who: string): Promise<ActionError | undefined> {
  const { rowCount: hasGuardian } = await client.query('SELECT 1 FROM signals.guardians WHERE ward_user_id = $1', [minor.user_id]);
  if (!hasGuardian) {
    return new ActionError(403, 'GUARDIAN_CONSENT_REQUIRED', `${who} is a minor without a guardian: register through POST /api/v1/consent/u18/signup/guardian`);
  }
  if (otp === undefined) {
    try {
      await sendGuardianCode(client, deps.pii, deps.network, minor.user_id, 'action_guardian_code');
    } catch (err) {
      if (err instanceof OneTimeCodeError) return new ActionError(429, 'GUARDIAN_OTP_SEND_LIMIT', err.message, { 'Retry-After': String(err.retryAfterSeconds ?? 3600) });
      throw err;
    }
    return new ActionError(403, 'GUARDIAN_OTP_REQUIRED', `${who} is a minor: a code was sent to the guardian; repeat the request with guardian_otp`);
  }
  try {
    await consumeCode(client, deps.pii, guardianScope(minor.user_id), otp);
  } catch (err) {
    if (!(err instanceof OneTimeCodeError)) throw err;
    if (err.code === 'OTP_TOO_MANY_TRIES') return new ActionError(429, 'GUARDIAN_OTP_TOO_MANY_TRIES', err.message, { 'Retry-After': String(err.retryAfterSeconds) });
    if (err.code === 'OTP_EXPIRED') return new ActionError(403, 'GUARDIAN_OTP_EXPIRED', `guardian_otp: ${err.message}`);
    return new ActionError(403, 'GUARDIAN_OTP_INVALID', 'guardian_otp: the code is not right');
  }
  await client.query('UPDATE signals.guardians SET confirmed_at = coalesce(confirmed_at, now()) WHERE ward_user_id = $1', [minor.user_id]);
  await client.query(`UPDATE signals.users SET status = 'active', updated_at = now() WHERE user_id = $1 AND status = 'pending_guardian'`, [minor.user_id]);
  return undefined;
}

/** Inserts the action and its first event; 409 when one is open for (source, target, type). */
async function insertAction(
  client: PoolClient, input: PerformInput, actor: Actor, actingOrgId: string | undefined, actingUserId: string | null, status: string, guardianCodeUserIds: string[],
): Promise<ActionRecord> {
  const key = `${input.source_item.item_id}:${input.target_item.item_id}:${input.action_type}`;
  await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 7))', [`action:${key}`]);
  const { rows: open } = await client.query<{ action_id: string }>(
    'SELECT action_id FROM signals.actions WHERE source_item_id = $1 AND target_item_id = $2 AND action_type = $3 AND NOT terminal',
    [input.source_item.item_id, input.target_item.item_id, input.action_type]);
  if (open[0]) throw new ActionError(409, 'action_already_open', `An open ${input.action_type} action ${open[0].action_id} already relates these items`);
  const { rows } = await client.query<ActionRecord>(
    `INSERT INTO signals.actions (action_type, source_item_id, target_item_id, target_instance_url, action_status, requirements_snapshot,
       consent, actor, actor_user_id, acting_org_id, acting_as_user_id, guardian_code_user_ids)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING ${ACTION_COLUMNS}`,
    [input.action_type, input.source_item.item_id, input.target_item.item_id, input.target_item.item_instance_url, status,
      input.requirements_snapshot ?? null, input.consent ?? null, actorName(actor), actor.kind === 'user' ? actor.userId : null,
      actingOrgId ?? null, actingUserId && input.acting_as_user_id ? actingUserId : null, guardianCodeUserIds]);
  await client.query(
    'INSERT INTO signals.action_events (action_id, from_status, to_status, update_count, actor) VALUES ($1, NULL, $2, 0, $3)',
    [rows[0].action_id, status, actorName(actor)]);
  return rows[0];
}

/** An action by id, or null. */
export async function getAction(db: Queryable, actionId: string, forUpdate = false): Promise<ActionRecord | null> {
  if (!UUID.test(actionId)) return null;
  const { rows } = await db.query<ActionRecord>(`SELECT ${ACTION_COLUMNS} FROM signals.actions WHERE action_id = $1${forUpdate ? ' FOR UPDATE' : ''}`, [actionId]);
  return rows[0] ?? null;
}

/** Which sides of an action `actor` stands for (`standsFor` of its source and target items). */
async function sidesOf(db: Queryable, action: ActionRecord, actor: Actor): Promise<{ source: boolean; target: boolean }> {
  if (actor.kind === 'api_key') return { source: false, target: false };
  const { rows } = await db.query<{ item_id: string; user_id: string | null; created_by: string | null }>(
    'SELECT item_id, user_id, created_by FROM signals.items WHERE item_id = ANY($1::uuid[])', [[action.source_item_id, action.target_item_id]]);
  const item = (id: string) => rows.find((r) => r.item_id === id);
  return { source: await standsFor(db, item(action.source_item_id), actor), target: await standsFor(db, item(action.target_item_id), actor) };
}

/** A status move: the new status, the update_count read, a note, and the guardian's code when the move reveals a minor's contacts. */
export interface StatusMove {
  status: string;
  updateCount: number;
  note?: string;
  guardianOtp?: string;
}

/**
 * Moves an action to `status` when `updateCount` is its current update_count (optimistic
 * concurrency), along the interaction's declared moves, in one transaction. Only a party moves
 * (never the API key alone); `cancelled` only by the source side while update_count is 0; the
 * status that reveals contacts only by the target side and, when the target's person is a minor,
 * with a code from that minor's guardian (`guardianOtp`; without it one is sent and the move is
 * refused — the code sent or a wrong try is committed, the move is not); terminal statuses never
 * move. Rule: docs/decisions.md, "Trust II (issue 29)", "A minor's contacts".
 * @throws ActionError 404 `action_not_found`, 400 `unknown_status`, 403 `person_token_required`,
 *   `not_a_party`, `cancel_not_allowed`, `target_side_only`, `GUARDIAN_CONSENT_REQUIRED`,
 *   `GUARDIAN_OTP_REQUIRED`, `GUARDIAN_OTP_INVALID`, `GUARDIAN_OTP_EXPIRED`, 409
 *   `stale_update_count`, `action_terminal`, `transition_not_allowed`, `cancel_too_late`, 429
 *   `GUARDIAN_OTP_SEND_LIMIT`, `GUARDIAN_OTP_TOO_MANY_TRIES`.
 */
export async function moveActionStatus(deps: PerformDeps, actionId: string, move: StatusMove, actor: Actor): Promise<ActionRecord> {
  const client = await deps.pool.connect();
  try {
    await client.query('BEGIN');
    const moved = await applyMove(client, deps, actionId, move, actor);
    if (moved instanceof ActionError) {
      // A guardian refusal: the code sent or the wrong try is kept (committed); the move is not made.
      await client.query('COMMIT');
      throw moved;
    }
    await client.query('COMMIT');
    return moved;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** `moveActionStatus` inside its transaction: the moved action, or a guardian refusal to commit and throw. */
async function applyMove(client: PoolClient, deps: PerformDeps, actionId: string, move: StatusMove, actor: Actor): Promise<ActionRecord | ActionError> {
  const { network } = deps;
  const action = await getAction(client, actionId, true);
  if (!action) throw new ActionError(404, 'action_not_found', `No action ${actionId}`);
  const statuses = network.actions[action.action_type]?.statuses ?? {};
  if (!statuses[move.status]) throw new ActionError(400, 'unknown_status', `action_status must be one of ${Object.keys(statuses).join(', ')}`);
  if (actor.kind === 'api_key') {
    throw new ActionError(403, 'person_token_required', "An API key alone moves no action: send a party's session or token, or its onboarding aggregator's bearer token");
  }
  const sides = await sidesOf(client, action, actor);
  if (!sides.source && !sides.target) throw new ActionError(403, 'not_a_party', 'You are on neither side of this action');
  if (action.terminal) throw new ActionError(409, 'action_terminal', `The action is ${action.action_status}, a final status`);
  if (move.updateCount !== action.update_count) {
    throw new ActionError(409, 'stale_update_count', `update_count is ${action.update_count}, not ${move.updateCount}: read the action again`);
  }
  const reveals = move.status === network.actions[action.action_type]?.reveals_pii_on_status;
  if (move.status === 'cancelled') {
    if (!sides.source) throw new ActionError(403, 'cancel_not_allowed', 'Only the source side may cancel an action');
    if (action.update_count !== 0) throw new ActionError(409, 'cancel_too_late', 'An action can be cancelled only before its first status change');
  } else if (reveals && !sides.target) {
    throw new ActionError(403, 'target_side_only', `Only the target side may move the action to ${move.status}, which shares contact details`);
  } else if (!statuses[action.action_status]?.next.includes(move.status)) {
    throw new ActionError(409, 'transition_not_allowed', `${action.action_status} cannot move to ${move.status}; allowed: ${statuses[action.action_status]?.next.join(', ') || 'none'}`);
  }
  let guardianCodeUserIds = action.guardian_code_user_ids;
  if (reveals) {
    // The side saying yes stands for the target's person: a minor says yes with the guardian's code.
    const targetUserId = await userOfItem(client, action.target_item_id);
    const target = targetUserId ? await getUser(client, targetUserId) : null;
    if (target && isMinor(network, target)) {
      const refusal = await guardianGate(client, deps, target, move.guardianOtp, "The target's person");
      if (refusal) return refusal;
      guardianCodeUserIds = [...new Set([...guardianCodeUserIds, target.user_id])];
    }
  }
  const { rows } = await client.query<ActionRecord>(
    `UPDATE signals.actions SET action_status = $2, terminal = $3, update_count = update_count + 1, updated_at = now(), guardian_code_user_ids = $4
      WHERE action_id = $1 RETURNING ${ACTION_COLUMNS}`, [actionId, move.status, statuses[move.status].terminal, guardianCodeUserIds]);
  await client.query(
    'INSERT INTO signals.action_events (action_id, from_status, to_status, update_count, actor, note) VALUES ($1, $2, $3, $4, $5, $6)',
    [actionId, action.action_status, move.status, rows[0].update_count, actorName(actor), move.note ?? null]);
  return rows[0];
}

export interface ActionEvent {
  from_status: string | null;
  to_status: string;
  update_count: number;
  actor: string;
  note: string | null;
  created_at: string;
}

/**
 * The action as `viewer` sees it: its record, events, the statuses it may move to, whether it has
 * reached the interaction's `reveals_pii_on_status` (`pii_revealed`), and `contacts`: the contact
 * details of both sides' users (decrypted) once revealed and only when `viewer` stands for a side;
 * else null (an API key alone, a third person or aggregator never sees them). A side's entry is
 * null when no user is linked, or when its user is a minor whose guardian gave no code for this
 * action (`guardian_code_user_ids`; docs/decisions.md, "A minor's contacts").
 */
export async function actionView(db: Queryable, pii: PiiCrypto, network: Network, action: ActionRecord, viewer: Actor): Promise<Record<string, unknown>> {
  const { rows: events } = await db.query<ActionEvent>(
    `SELECT from_status, to_status, update_count, actor, note,
            to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at
       FROM signals.action_events WHERE action_id = $1 ORDER BY event_id`, [action.action_id]);
  const def = network.actions[action.action_type];
  const revealAt = def?.reveals_pii_on_status;
  const revealed = Boolean(revealAt && events.some((e) => e.to_status === revealAt));
  let contacts: Record<string, unknown> | null = null;
  const sides = revealed ? await sidesOf(db, action, viewer) : undefined;
  if (sides && (sides.source || sides.target)) {
    const { rows } = await db.query<{ item_id: string; user_id: string | null }>(
      'SELECT item_id, user_id FROM signals.items WHERE item_id = ANY($1::uuid[])', [[action.source_item_id, action.target_item_id]]);
    const contactOf = async (itemId: string) => {
      const userId = rows.find((r) => r.item_id === itemId)?.user_id;
      const profile = userId ? await getUserProfile(db, pii, userId) : null;
      // A minor's contacts go out only with a code their guardian gave for this action.
      if (!profile || (isMinor(network, profile) && !action.guardian_code_user_ids.includes(profile.user_id))) return null;
      return { user_id: profile.user_id, name: profile.name, phone: profile.phone, email: profile.email };
    };
    contacts = { source: await contactOf(action.source_item_id), target: await contactOf(action.target_item_id) };
  }
  return {
    action_id: action.action_id,
    action_type: action.action_type,
    action_status: action.action_status,
    update_count: action.update_count,
    terminal: action.terminal,
    source_item_id: action.source_item_id,
    target_item_id: action.target_item_id,
    target_instance_url: action.target_instance_url,
    acting_org_id: action.acting_org_id,
    acting_as_user_id: action.acting_as_user_id,
    requirements_snapshot: action.requirements_snapshot,
    next_statuses: action.terminal ? [] : [...(def?.statuses?.[action.action_status]?.next ?? []), ...(action.update_count === 0 && def?.statuses?.cancelled ? ['cancelled'] : [])].filter((s, i, a) => a.indexOf(s) === i),
    pii_revealed: revealed,
    contacts,
    events,
    created_at: action.created_at,
    updated_at: action.updated_at,
  };
}
