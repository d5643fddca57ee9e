/**
 * The duplicate rules of bulk onboarding (docs/decisions.md "Bulk onboarding", Duplicates), shared
 * by the real run (tasks/bulk-upload-stage.ts, tasks/bulk-upload-chunk.ts) and the dry run
 * (lib/aggregator/bulk/preview.ts), so that both give a row the same outcome:
 * - a row that passed coercion and repeats the phone, e-mail or external id of an earlier row of
 *   the file that passed is skipped ("phone repeats row 17 of this file");
 * - a row whose key is already registered with the aggregator is skipped.
 */
import type { Domain } from '../../network/config.ts';
import type { ParticipantKeys, RegisteredKeys, RegisteredParticipant } from '../participants.ts';
import type { FieldError, RowOutcome } from './row-coercion.ts';

/** A field and the earlier row of the file that has the same value in it. */
export type Repeat = [field: string, rowNumber: number];

/** The duplicate keys of a domain's participants, by field name. */
export function keyFields(domain: Domain): { phone?: string; email?: string; externalId?: string } {
  return {
    phone: domain.fields.find((f) => f.identity === 'phone')?.name,
    email: domain.fields.find((f) => f.identity === 'email')?.name,
    externalId: domain.fields.find((f) => f.externalId)?.name,
  };
}

/** Longest decimal integer kept as a number: exact as a double (< 2^53). */
const MAX_NUMBER_DIGITS = 15;
const CANONICAL_INTEGER = /^[1-9]\d*$/;

/**
 * First row numbers of integer keys in two typed arrays (open addressing, linear probing), for
 * the keys `createKeyRows` keeps as numbers. A Map held them at ~55 bytes per key in the V8 heap, its
 * table doubling in the large-object space (14.7 MB for the 267,000 ids of the PMGSY file, and
 * 22 MB while it grew), and V8 lets the heap grow to twice what survives: the tracker drove the
 * worker's peak RSS during staging (issue 17). Here: 12 bytes per slot, at most 3/4 full, outside
 * the V8 heap (6.3 MB for that file, 9.4 MB while growing).
 */
class IntegerKeyRows {
  private keys = new Float64Array(1024);
  /** Row number per slot; 0 = empty (row numbers start at 1). */
  private rows = new Int32Array(1024);
  private size = 0;

  /** The first row of `key` (a non-negative integer < 2^53), or undefined. */
  get(key: number): number | undefined {
    const row = this.rows[this.slot(key)];
    return row === 0 ? undefined : row;
  }

  /** Remembers `rowNumber` (≥ 1) for `key`; an earlier row stays. */
  set(key: number, rowNumber: number): void {
    let slot = this.slot(key);
    if (this.rows[slot] !== 0) return;
    if ((this.size + 1) * 4 > this.rows.length * 3) {
      this.grow();
      slot = this.slot(key);
    }
    this.keys[slot] = key;
    this.rows[slot] = rowNumber;
    this.size++;
  }

  /** The slot holding `key`, or the empty slot where it would go. */
  private slot(key: number): number {
    const mask = this.rows.length - 1;
    // Both 32-bit halves of the key mixed (murmur3's finaliser), so ids in any range spread.
    let h = Math.imul((key >>> 0) ^ Math.imul(Math.floor(key / 4294967296), 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    for (let slot = h & mask; ; slot = (slot + 1) & mask) {
      if (this.rows[slot] === 0 || this.keys[slot] === key) return slot;
    }
  }

  private grow(): void {
    const { keys, rows } = this;
    this.keys = new Float64Array(keys.length * 2);
    this.rows = new Int32Array(rows.length * 2);
    for (let i = 0; i < rows.length; i++) {
      if (rows[i] !== 0) {
        const slot = this.slot(keys[i]);
        this.keys[slot] = keys[i];
        this.rows[slot] = rows[i];
      }
    }
  }
}

/**
 * First rows of one kind of key. A key that is a canonical decimal integer of up to 15 digits (no
 * sign, no leading zero: exact as a double; a phone's E.164 digits without the `+`, which E.164
 * always has) is kept as that number in an IntegerKeyRows, any other value as its string in a Map:
 * "7" and "007" stay distinct. Many files' external ids and every normalised phone are such
 * integers.
 */
function createKeyRows(kind: 'phone' | 'email' | 'externalId') {
  const numbers = new IntegerKeyRows();
  const strings = new Map<string, number>();
  const numberOf = (value: string): number | undefined => {
    // A phone without its `+` (not E.164) stays a string, distinct from the same digits with it.
    const digits = kind !== 'phone' ? value : value.charCodeAt(0) === 43 ? value.slice(1) : undefined;
    return digits !== undefined && digits.length <= MAX_NUMBER_DIGITS && CANONICAL_INTEGER.test(digits) ? Number(digits) : undefined;
  };
  return {
    get(value: string): number | undefined {
      const n = numberOf(value);
      return n === undefined ? strings.get(value) : numbers.get(n);
    },
    set(value: string, rowNumber: number): void {
      const n = numberOf(value);
      if (n === undefined) {
        if (!strings.has(value)) strings.set(value, rowNumber);
      } else {
        numbers.set(n, rowNumber);
      }
    },
  };
}

/**
 * A tracker of the keys seen in a file, in file order: `check(outcome, rowNumber)` answers the
 * earlier rows a passed row repeats (undefined when none) and, when none, claims its keys. A row
 * that failed coercion claims nothing. Memory: 12-24 bytes per integer key (an external id or
 * phone, createKeyRows), ~80 per other key.
 */
export function createRepeatTracker(domain: Domain): (outcome: RowOutcome, rowNumber: number) => Repeat[] | undefined {
  const fields = keyFields(domain);
  const firstRows = { phone: createKeyRows('phone'), email: createKeyRows('email'), externalId: createKeyRows('externalId') };
  return (outcome, rowNumber) => {
    if (!outcome.ok) return undefined;
    const { identity, externalId } = outcome.participant;
    const keys: [keyof typeof firstRows, string | undefined, string | undefined][] = [
      ['phone', fields.phone, identity.phone], ['email', fields.email, identity.email], ['externalId', fields.externalId, externalId],
    ];
    let repeats: Repeat[] | undefined;
    for (const [kind, field, value] of keys) {
      const first = value === undefined ? undefined : firstRows[kind].get(value);
      if (first !== undefined) (repeats ??= []).push([field!, first]);
    }
    if (!repeats) for (const [kind, , value] of keys) if (value !== undefined) firstRows[kind].set(value, rowNumber);
    return repeats;
  };
}

/** The reasons of a row skipped for repeating earlier rows of the file. */
export function repeatReasons(repeats: Repeat[]): FieldError[] {
  return repeats.map(([field, row]) => ({ field, message: `${field} repeats row ${row} of this file` }));
}

/**
 * The reasons a row with `keys` is skipped as already registered (empty when it is not), given
 * what `findRegistered` found. A participant of this same upload (a retried chunk's neighbour)
 * is reported as the repeat of its row.
 */
export function registeredReasons(domain: Domain, uploadId: string, keys: ParticipantKeys, registered: RegisteredKeys): FieldError[] {
  const fields = keyFields(domain);
  const reason = (field: string | undefined, found: RegisteredParticipant | undefined): FieldError | null => {
    if (!found || !field) return null;
    return found.bulk_upload_id === uploadId && found.row_number !== null
      ? { field, message: `${field} repeats row ${found.row_number} of this file` }
      : { field, message: `${field} already registered with this aggregator` };
  };
  return [
    reason(fields.phone, keys.phoneIndex && registered.phone.get(keys.phoneIndex.toString('hex'))),
    reason(fields.email, keys.emailIndex && registered.email.get(keys.emailIndex.toString('hex'))),
    reason(fields.externalId, keys.externalId === undefined ? undefined : registered.externalId.get(keys.externalId)),
  ].filter((r): r is FieldError => r !== null);
}
