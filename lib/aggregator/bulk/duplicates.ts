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

/**
 * The form a key is remembered in: a canonical decimal integer of up to 15 digits (no sign, no
 * leading zero: exact as a double) as that number, any other value as its string. Distinct
 * strings keep distinct forms (a number never equals a string in a Map). Many files' external ids
 * are such integers; as numbers the tracker holds no string per key: 14.7 instead of 21.1 MB for
 * the 267,000 ids of the PMGSY file, held through staging, the worker's peak of memory (issue 17).
 */
function keyForm(value: string): string | number {
  return value.length <= 15 && /^[1-9]\d*$/.test(value) ? Number(value) : value;
}

/**
 * A tracker of the keys seen in a file, in file order: `check(outcome, rowNumber)` answers the
 * earlier rows a passed row repeats (undefined when none) and, when none, claims its keys. A row
 * that failed coercion claims nothing. Memory: 55-80 bytes per distinct key (keyForm).
 */
export function createRepeatTracker(domain: Domain): (outcome: RowOutcome, rowNumber: number) => Repeat[] | undefined {
  const fields = keyFields(domain);
  const firstRows = { phone: new Map<string | number, number>(), email: new Map<string | number, number>(), externalId: new Map<string | number, number>() };
  return (outcome, rowNumber) => {
    if (!outcome.ok) return undefined;
    const { identity, externalId } = outcome.participant;
    const keys: [keyof typeof firstRows, string | undefined, string | undefined][] = [
      ['phone', fields.phone, identity.phone], ['email', fields.email, identity.email], ['externalId', fields.externalId, externalId],
    ];
    let repeats: Repeat[] | undefined;
    for (const [kind, field, value] of keys) {
      const first = value === undefined ? undefined : firstRows[kind].get(keyForm(value));
      if (first !== undefined) (repeats ??= []).push([field!, first]);
    }
    if (!repeats) for (const [kind, , value] of keys) if (value !== undefined) firstRows[kind].set(keyForm(value), rowNumber);
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
