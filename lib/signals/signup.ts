/**
 * Signup (POST /api/v1/auth/signup), the under-18 guardian step
 * (POST /api/v1/consent/u18/signup/guardian) and the precheck (POST /api/v1/auth/u18-precheck):
 * spec "Signals service" and issue 7; what is decided beyond them is in docs/decisions.md,
 * "People, consent and actions". Each writes its rows and enqueues its message in the caller's
 * transaction.
 */
import type { PiiCrypto } from '../platform/crypto.ts';
import type { PoolClient, Queryable } from '../platform/db.ts';
import type { Network } from '../network/config.ts';
import { enqueueMessage } from './messages.ts';
import { consumeCode, createCode, OneTimeCodeError } from './one-time-codes.ts';
import { contactKeys, encryptPerson, findOrCreateUser, findUserByKeys, type Contact } from './people.ts';

/** A refusal with its HTTP status and API error code. */
export class PeopleError extends Error {
  name = 'PeopleError';
  constructor(readonly status: number, readonly code: string, message: string, readonly headers?: Record<string, string>) {
    super(message);
  }
}

export const GUARDIAN_ROUTE = '/api/v1/consent/u18/signup/guardian';

/** The scope of a minor's guardian codes (signup and actions share it). */
export const guardianScope = (userId: string) => `guardian:${userId}`;

export interface SignupInput {
  name: string;
  contact: Contact;
  domain?: string;
  age?: number;
}

/**
 * Registers an adult. An e-mail or phone already held by a user answers `alreadyRegistered` and
 * creates nothing; an age under the network's guardian_consent_age is refused.
 * @throws PeopleError 409 `GUARDIAN_CONSENT_REQUIRED` for a minor.
 */
export async function signup(client: PoolClient, pii: PiiCrypto, network: Network, input: SignupInput): Promise<{ alreadyRegistered: boolean; userId: string }> {
  const existing = await findUserByKeys(client, contactKeys(pii, input.contact));
  if (existing) return { alreadyRegistered: true, userId: existing.user_id };
  const consentAge = network.people.guardian_consent_age;
  if (input.age !== undefined && input.age < consentAge) {
    throw new PeopleError(409, 'GUARDIAN_CONSENT_REQUIRED',
      `Under ${consentAge}, a guardian must consent: sign up through POST ${GUARDIAN_ROUTE}`);
  }
  const { user, created } = await findOrCreateUser(client, {
    ...encryptPerson(pii, input.name, input.contact), network: network.id, domain: input.domain, age: input.age,
    status: 'active', createdBy: 'signup',
  });
  if (created) await enqueueMessage(client, pii, { kind: 'welcome', contact: input.contact, name: input.name, networkName: network.name });
  return { alreadyRegistered: !created, userId: user.user_id };
}

export interface GuardianSignupInput {
  domain: string;
  contact: Contact;
  age: number;
  guardianName: string;
  guardian: Contact;
  sameContactAcknowledged: boolean;
  /** A code sent to the guardian on record (its guardian scope): proof that this guardian agrees to be replaced. */
  currentGuardianOtp?: string;
}

/**
 * Registers a minor as `pending_guardian` with its guardian and sends the guardian a code. A minor
 * already pending keeps its guardian (review of issue 29: knowing the minor's contact must not be
 * enough to become its guardian): when the request names the guardian on record (each contact it
 * gives is the record's), a new code is sent to that guardian and the record stays as it is;
 * another guardian replaces it only with `currentGuardianOtp`, a code the guardian on record got
 * (its guardian scope; consumed), and the new guardian then gets a code.
 * @returns the user and channel, or `refusal`: a wrong proof, to be committed (the wrong try
 *   counts) and then answered.
 * @throws PeopleError 409 `NOT_A_MINOR`, `SAME_CONTACT_NOT_ALLOWED`, `TOO_MANY_WARDS`,
 *   `ALREADY_REGISTERED` (an active or disabled user holds the minor's contact),
 *   `GUARDIAN_ALREADY_SET` (another guardian, without proof); OneTimeCodeError `OTP_SEND_LIMIT`.
 */
export async function guardianSignup(
  client: PoolClient, pii: PiiCrypto, network: Network, maxWards: number, input: GuardianSignupInput,
): Promise<{ userId: string; channel: 'email' | 'sms' } | { refusal: PeopleError }> {
  const consentAge = network.people.guardian_consent_age;
  if (input.age >= consentAge) {
    throw new PeopleError(409, 'NOT_A_MINOR', `age ${input.age} is not under ${consentAge}: sign up through POST /api/v1/auth/signup`);
  }
  const same = (input.contact.email && input.contact.email === input.guardian.email)
    || (input.contact.phone && input.contact.phone === input.guardian.phone);
  if (same && !input.sameContactAcknowledged) {
    throw new PeopleError(409, 'SAME_CONTACT_NOT_ALLOWED',
      "The guardian's contact is the minor's; send sameContactAcknowledged: true if the minor uses the guardian's phone or e-mail");
  }
  const guardianKeys = contactKeys(pii, input.guardian);
  const existing = await findUserByKeys(client, contactKeys(pii, input.contact));
  if (existing && existing.status !== 'pending_guardian') {
    throw new PeopleError(409, 'ALREADY_REGISTERED', 'A user with this e-mail or phone is already registered');
  }
  if (existing) {
    // The guardian on record, locked until the transaction ends (one re-registration at a time).
    const { rows: [current] } = await client.query<{ phone_index: Buffer | null; email_index: Buffer | null }>(
      'SELECT phone_index, email_index FROM signals.guardians WHERE ward_user_id = $1 FOR UPDATE', [existing.user_id]);
    if (current) {
      const onRecord = (given: Buffer | undefined, held: Buffer | null) => !given || (held !== null && given.equals(held));
      if (onRecord(guardianKeys.phoneIndex, current.phone_index) && onRecord(guardianKeys.emailIndex, current.email_index)) {
        return { userId: existing.user_id, channel: await sendGuardianCode(client, pii, network, existing.user_id, 'guardian_code') };
      }
      if (input.currentGuardianOtp === undefined) {
        throw new PeopleError(409, 'GUARDIAN_ALREADY_SET', 'This minor is registered with another guardian: send the guardian on record\'s contact '
          + 'to send them a new code, or currentGuardianOtp, a code they received, to name a new guardian');
      }
      const refusal = await proveCurrentGuardian(client, pii, existing.user_id, input.currentGuardianOtp);
      if (refusal) return { refusal };
      // The replaced guardian's other codes die with their role.
      await client.query('UPDATE signals.one_time_codes SET used_at = now() WHERE scope = $1 AND used_at IS NULL', [guardianScope(existing.user_id)]);
    }
  }
  // Counting wards and adding one is serialised per guardian contact.
  for (const k of [guardianKeys.phoneIndex, guardianKeys.emailIndex]) {
    if (k) await client.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, [`guardian:${k.toString('hex')}`]);
  }
  const { rows: [wards] } = await client.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM signals.guardians
      WHERE (phone_index = $1 OR email_index = $2) AND ward_user_id IS DISTINCT FROM $3`,
    [guardianKeys.phoneIndex ?? null, guardianKeys.emailIndex ?? null, existing?.user_id ?? null]);
  if (wards.n >= maxWards) {
    throw new PeopleError(409, 'TOO_MANY_WARDS', `A guardian may consent for at most ${maxWards} minors`);
  }
  const userId = existing?.user_id ?? (await findOrCreateUser(client, {
    ...encryptPerson(pii, undefined, input.contact), network: network.id, domain: input.domain, age: input.age,
    status: 'pending_guardian', createdBy: 'guardian-signup',
  })).user.user_id;
  const g = encryptPerson(pii, input.guardianName, input.guardian);
  await client.query(
    `INSERT INTO signals.guardians (ward_user_id, name_encrypted, phone_encrypted, email_encrypted, phone_index, email_index,
       declaration_accepted_at, same_contact_acknowledged)
     VALUES ($1, $2, $3, $4, $5, $6, now(), $7)
     ON CONFLICT (ward_user_id) DO UPDATE SET name_encrypted = EXCLUDED.name_encrypted, phone_encrypted = EXCLUDED.phone_encrypted,
       email_encrypted = EXCLUDED.email_encrypted, phone_index = EXCLUDED.phone_index, email_index = EXCLUDED.email_index,
       declaration_accepted_at = now(), same_contact_acknowledged = EXCLUDED.same_contact_acknowledged, confirmed_at = NULL`,
    [userId, g.name_encrypted, g.phone_encrypted, g.email_encrypted, g.phone_index, g.email_index, input.sameContactAcknowledged]);
  const channel = await sendGuardianCode(client, pii, network, userId, 'guardian_code');
  return { userId, channel };
}

/**
 * Consumes `otp` in the minor's guardian scope: the guardian on record's consent to be replaced.
 * @returns undefined when right, else the refusal (403 `GUARDIAN_OTP_INVALID` / `GUARDIAN_OTP_EXPIRED`,
 *   429 `GUARDIAN_OTP_TOO_MANY_TRIES` with Retry-After), as the action's guardian step answers.
 */
async function proveCurrentGuardian(client: PoolClient, pii: PiiCrypto, wardUserId: string, otp: string): Promise<PeopleError | undefined> {
  try {
    await consumeCode(client, pii, guardianScope(wardUserId), otp);
    return undefined;
  } catch (err) {
    if (!(err instanceof OneTimeCodeError)) throw err;
    if (err.code === 'OTP_TOO_MANY_TRIES') return new PeopleError(429, 'GUARDIAN_OTP_TOO_MANY_TRIES', err.message, { 'Retry-After': String(err.retryAfterSeconds) });
    if (err.code === 'OTP_EXPIRED') return new PeopleError(403, 'GUARDIAN_OTP_EXPIRED', `currentGuardianOtp: ${err.message}`);
    return new PeopleError(403, 'GUARDIAN_OTP_INVALID', 'currentGuardianOtp: the code is not right');
  }
}

/**
 * Creates a code in the minor's guardian scope and enqueues it to the guardian (e-mail when the
 * guardian gave one, else SMS).
 * @throws OneTimeCodeError `OTP_SEND_LIMIT`; Error when the user has no guardian.
 */
export async function sendGuardianCode(
  client: PoolClient, pii: PiiCrypto, network: Network, wardUserId: string, kind: 'guardian_code' | 'action_guardian_code',
): Promise<'email' | 'sms'> {
  const guardian = await guardianContact(client, pii, wardUserId);
  if (!guardian) throw new Error(`user ${wardUserId} has no guardian`);
  const code = await createCode(client, pii, guardianScope(wardUserId));
  return enqueueMessage(client, pii, { kind, contact: guardian.contact, name: guardian.name, code, networkName: network.name });
}

/** The guardian of a minor's user, decrypted, or null. */
export async function guardianContact(db: Queryable, pii: PiiCrypto, wardUserId: string): Promise<{ name: string; contact: Contact } | null> {
  const { rows } = await db.query<{ name_encrypted: string; phone_encrypted: string | null; email_encrypted: string | null }>(
    'SELECT name_encrypted, phone_encrypted, email_encrypted FROM signals.guardians WHERE ward_user_id = $1', [wardUserId]);
  const r = rows[0];
  if (!r) return null;
  return {
    name: pii.decrypt(r.name_encrypted),
    contact: { phone: r.phone_encrypted ? pii.decrypt(r.phone_encrypted) : undefined, email: r.email_encrypted ? pii.decrypt(r.email_encrypted) : undefined },
  };
}

/**
 * Whether a client must ask for the date of birth before signing this contact up: false only when
 * a user holds the contact and its age is known (then the guardian rule is already decided).
 */
export async function requiresDob(db: Queryable, pii: PiiCrypto, contact: Contact): Promise<boolean> {
  const user = await findUserByKeys(db, contactKeys(pii, contact));
  return !user || user.age === null;
}
