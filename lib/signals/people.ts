/**
 * People (users) of the signals service: one user per person, owned by the platform's identity.
 * Identity fields are encrypted at rest and found again through HMAC blind indexes of the E.164
 * phone and the lower-cased e-mail (DESIGN.md "Data rules", lib/platform/crypto.ts), unique across
 * the platform: one person, one user, however many aggregators know them.
 */
import { randomUUID } from 'node:crypto';
import { parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js/max';
import type { PiiCrypto } from '../platform/crypto.ts';
import type { Queryable } from '../platform/db.ts';
import type { ItemPerson } from '../network/items.ts';

export const USER_STATUSES = ['active', 'disabled', 'pending_guardian'] as const;
export type UserStatus = (typeof USER_STATUSES)[number];

/** A person's contact, normalised: phone in E.164, e-mail lower-cased and trimmed. */
export interface Contact {
  phone?: string;
  email?: string;
}

/** The blind indexes of a contact (`blindIndex('phone' | 'email', …)`, as for participants). */
export interface ContactKeys {
  phoneIndex?: Buffer;
  emailIndex?: Buffer;
}

export interface UserRecord {
  user_id: string;
  network: string;
  domain: string | null;
  status: UserStatus;
  age: number | null;
  created_by: string;
  created_at: string;
}

/** A user with its identity decrypted. */
export interface UserProfile extends UserRecord {
  name: string | null;
  phone: string | null;
  email: string | null;
}

/**
 * The E.164 form of `raw` (libphonenumber-js, numbers without a country code in `region`), or
 * null when it is not a possible phone number.
 */
export function normalisePhone(raw: string, region: string): string | null {
  const parsed = parsePhoneNumberFromString(raw.trim(), region as CountryCode);
  return parsed?.isValid() ? parsed.number : null;
}

/** Lower-cased, trimmed e-mail (the form its blind index is computed from). */
export function normaliseEmail(raw: string): string {
  return raw.trim().toLowerCase();
}

/** Blind indexes of a normalised contact. */
export function contactKeys(pii: PiiCrypto, contact: Contact): ContactKeys {
  return {
    phoneIndex: contact.phone ? pii.blindIndex('phone', contact.phone) : undefined,
    emailIndex: contact.email ? pii.blindIndex('email', contact.email) : undefined,
  };
}

const USER_COLUMNS = `user_id, network, domain, status, created_by,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  (age + extract(year FROM age(current_date, age_given_on)))::int AS age`;

/** The user holding the phone or the e-mail index (phone first), or null. */
export async function findUserByKeys(db: Queryable, keys: ContactKeys): Promise<UserRecord | null> {
  if (!keys.phoneIndex && !keys.emailIndex) return null;
  const { rows } = await db.query<UserRecord>(
    `SELECT ${USER_COLUMNS} FROM signals.users
      WHERE phone_index = $1 OR email_index = $2
      ORDER BY (phone_index = $1) DESC NULLS LAST LIMIT 1`,
    [keys.phoneIndex ?? null, keys.emailIndex ?? null]);
  return rows[0] ?? null;
}

/** A user by id, or null. */
export async function getUser(db: Queryable, userId: string): Promise<UserRecord | null> {
  const { rows } = await db.query<UserRecord>(`SELECT ${USER_COLUMNS} FROM signals.users WHERE user_id = $1`, [userId]);
  return rows[0] ?? null;
}

/** A user with its name, phone and e-mail decrypted, or null. */
export async function getUserProfile(db: Queryable, pii: PiiCrypto, userId: string): Promise<UserProfile | null> {
  const { rows } = await db.query<UserRecord & { name_encrypted: string | null; phone_encrypted: string | null; email_encrypted: string | null }>(
    `SELECT ${USER_COLUMNS}, name_encrypted, phone_encrypted, email_encrypted FROM signals.users WHERE user_id = $1`, [userId]);
  const r = rows[0];
  if (!r) return null;
  const dec = (v: string | null) => (v === null ? null : pii.decrypt(v));
  const { name_encrypted, phone_encrypted, email_encrypted, ...user } = r;
  return { ...user, name: dec(name_encrypted), phone: dec(phone_encrypted), email: dec(email_encrypted) };
}

/** What a new user is made of: ciphertexts and blind indexes only (never plaintext). */
export interface EncryptedPerson {
  name_encrypted?: string | null;
  phone_encrypted?: string | null;
  email_encrypted?: string | null;
  /** Blind indexes (32 bytes). */
  phone_index?: Buffer | null;
  email_index?: Buffer | null;
}

/** Encrypts a person's name and normalised contact, with their blind indexes. */
export function encryptPerson(pii: PiiCrypto, name: string | undefined, contact: Contact): EncryptedPerson {
  const keys = contactKeys(pii, contact);
  return {
    name_encrypted: name === undefined ? null : pii.encrypt(name),
    phone_encrypted: contact.phone ? pii.encrypt(contact.phone) : null,
    email_encrypted: contact.email ? pii.encrypt(contact.email) : null,
    phone_index: keys.phoneIndex ?? null,
    email_index: keys.emailIndex ?? null,
  };
}

/**
 * Inserts a user, or — when its phone or e-mail index is already taken (the unique indexes are the
 * final guard against a concurrent insert) — returns the user that holds it, with `created: false`.
 * @throws Error when the person has neither a phone nor an e-mail index.
 */
export async function findOrCreateUser(
  db: Queryable,
  person: EncryptedPerson & { network: string; domain?: string | null; age?: number | null; status: UserStatus; createdBy: string },
): Promise<{ user: UserRecord; created: boolean }> {
  if (!person.phone_index && !person.email_index) throw new Error('a user needs a phone or an e-mail');
  const keys = { phoneIndex: person.phone_index ?? undefined, emailIndex: person.email_index ?? undefined };
  const existing = await findUserByKeys(db, keys);
  if (existing) return { user: existing, created: false };
  const { rows } = await db.query<UserRecord>(
    `INSERT INTO signals.users (network, domain, name_encrypted, phone_encrypted, email_encrypted, phone_index, email_index,
       age, age_given_on, status, created_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $8::int IS NOT NULL THEN current_date END, $9, $10)
     ON CONFLICT DO NOTHING
     RETURNING ${USER_COLUMNS}`,
    [person.network, person.domain ?? null, person.name_encrypted ?? null, person.phone_encrypted ?? null, person.email_encrypted ?? null,
      person.phone_index ?? null, person.email_index ?? null, person.age ?? null, person.status, person.createdBy]);
  if (rows[0]) return { user: rows[0], created: true };
  const raced = await findUserByKeys(db, keys);
  if (!raced) throw new Error('user insert conflicted but no user holds its keys');
  return { user: raced, created: false };
}

/** Sets a user's status. */
export async function setUserStatus(db: Queryable, userId: string, status: UserStatus): Promise<void> {
  await db.query('UPDATE signals.users SET status = $2, updated_at = now() WHERE user_id = $1', [userId, status]);
}

/** The user linked to an item (`signals.items.user_id`), or null. */
export async function userOfItem(db: Queryable, itemId: string): Promise<string | null> {
  const { rows } = await db.query<{ user_id: string | null }>('SELECT user_id FROM signals.items WHERE item_id = $1', [itemId]);
  return rows[0]?.user_id ?? null;
}


/**
 * Why `person` is not a well-formed encrypted person of this platform, or null: every ciphertext
 * must decrypt with the PII key, each blind index must be the one of the decrypted value, and a
 * phone or an e-mail must be there (so plaintext, foreign keys and mismatched pairs are refused).
 */
export function itemPersonProblem(pii: PiiCrypto, person: ItemPerson): string | null {
  if (!person.phone_index && !person.email_index) return 'person: phone_index or email_index is required';
  for (const kind of ['phone', 'email'] as const) {
    const cipher = person[`${kind}_encrypted`];
    const index = person[`${kind}_index`];
    if (Boolean(cipher) !== Boolean(index)) return `person: ${kind}_encrypted and ${kind}_index go together`;
    if (!cipher || !index) continue;
    let plain: string;
    try {
      plain = pii.decrypt(cipher);
    } catch {
      return `person.${kind}_encrypted: not a value encrypted with this platform's PII key`;
    }
    if (pii.blindIndex(kind, plain).toString('hex') !== index.toLowerCase()) return `person.${kind}_index: not the blind index of ${kind}_encrypted`;
  }
  if (person.name_encrypted) {
    try {
      pii.decrypt(person.name_encrypted);
    } catch {
      return "person.name_encrypted: not a value encrypted with this platform's PII key";
    }
  }
  return null;
}

/**
 * Links each item to the user of its person: the user holding the phone or the e-mail index (phone
 * first), or a new active user made from the person's ciphertexts (created_by the item's creator;
 * its age from the item's public `age` field when the domain has one). Items of one call naming the
 * same phone or e-mail share one new user. Set-based (a few statements whatever the number of
 * items), inside the caller's transaction, after the items are stored.
 * @returns per item id: the user id and whether the user was created by this call.
 */
export async function linkItemsToPeople(
  db: Queryable,
  network: string,
  links: { itemId: string; domain: string; createdBy: string | null; person: ItemPerson; age?: unknown }[],
): Promise<Map<string, { userId: string; created: boolean }>> {
  const linked = new Map<string, { userId: string; created: boolean }>();
  if (links.length === 0) return linked;
  const keyOf = (kind: 'phone' | 'email', hex: string | undefined) => (hex ? `${kind}:${hex.toLowerCase()}` : undefined);
  const keysOf = (p: ItemPerson) => [keyOf('phone', p.phone_index), keyOf('email', p.email_index)].filter((k): k is string => Boolean(k));
  const owners = new Map<string, { userId: string; created: boolean }>();
  const lookUp = async (keys: string[]) => {
    const phones = keys.filter((k) => k.startsWith('phone:')).map((k) => Buffer.from(k.slice(6), 'hex'));
    const emails = keys.filter((k) => k.startsWith('email:')).map((k) => Buffer.from(k.slice(6), 'hex'));
    const { rows } = await db.query<{ user_id: string; phone_index: Buffer | null; email_index: Buffer | null }>(
      `SELECT user_id, phone_index, email_index FROM signals.users WHERE phone_index = ANY($1::bytea[]) OR email_index = ANY($2::bytea[])`,
      [phones, emails]);
    for (const r of rows) {
      for (const k of [keyOf('phone', r.phone_index?.toString('hex')), keyOf('email', r.email_index?.toString('hex'))]) {
        if (k && !owners.has(k)) owners.set(k, { userId: r.user_id, created: false });
      }
    }
  };
  await lookUp([...new Set(links.flatMap((l) => keysOf(l.person)))]);

  // People no user holds yet: one new user per person (items sharing a phone or e-mail share it).
  const fresh: { user_id: string; link: (typeof links)[number] }[] = [];
  for (const link of links) {
    const keys = keysOf(link.person);
    if (keys.some((k) => owners.has(k))) continue;
    const userId = randomUUID();
    for (const k of keys) owners.set(k, { userId, created: true });
    fresh.push({ user_id: userId, link });
  }
  if (fresh.length) {
    const ageOf = (a: unknown) => (Number.isInteger(a) && (a as number) >= 0 && (a as number) <= 120 ? a as number : null);
    const { rows } = await db.query<{ user_id: string }>(
      `INSERT INTO signals.users (user_id, network, domain, name_encrypted, phone_encrypted, email_encrypted, phone_index, email_index,
         age, age_given_on, status, created_by)
       SELECT x.user_id, $2, x.domain, x.name_encrypted, x.phone_encrypted, x.email_encrypted, decode(x.phone_index, 'hex'),
              decode(x.email_index, 'hex'), x.age, CASE WHEN x.age IS NOT NULL THEN current_date END, 'active', x.created_by
         FROM json_to_recordset($1::json) AS x(user_id uuid, domain text, name_encrypted text, phone_encrypted text, email_encrypted text,
           phone_index text, email_index text, age integer, created_by text)
       ON CONFLICT DO NOTHING RETURNING user_id`,
      [JSON.stringify(fresh.map(({ user_id, link: { person: p, ...l } }) => ({
        user_id, domain: l.domain, name_encrypted: p.name_encrypted ?? null, phone_encrypted: p.phone_encrypted ?? null,
        email_encrypted: p.email_encrypted ?? null, phone_index: p.phone_index?.toLowerCase() ?? null, email_index: p.email_index?.toLowerCase() ?? null,
        age: ageOf(l.age), created_by: l.createdBy ?? 'items',
      }))), network]);
    const inserted = new Set(rows.map((r) => r.user_id));
    const lost = fresh.filter((f) => !inserted.has(f.user_id));
    if (lost.length) {
      // Taken meanwhile by a concurrent writer (the unique indexes are the final guard): use its user.
      const keys = lost.flatMap((f) => keysOf(f.link.person));
      for (const k of keys) owners.delete(k);
      await lookUp(keys);
    }
  }
  for (const link of links) {
    const owner = keysOf(link.person).map((k) => owners.get(k)).find(Boolean);
    if (!owner) throw new Error(`no user for the person of item ${link.itemId}`);
    linked.set(link.itemId, owner);
  }
  await db.query(
    `UPDATE signals.items i SET user_id = x.user_id FROM unnest($1::uuid[], $2::uuid[]) AS x(item_id, user_id)
      WHERE i.item_id = x.item_id AND i.user_id IS DISTINCT FROM x.user_id`,
    [[...linked.keys()], [...linked.values()].map((o) => o.userId)]);
  return linked;
}
