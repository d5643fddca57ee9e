/** Turning one table row into a typed, validated participant. */
import type { Domain, Network } from '../network.ts';
import type { ColumnMapping } from './header-match.ts';

export interface FieldError {
  field: string;
  message: string;
}

export interface CoercedParticipant {
  /** Every mapped field with a value, typed per schema (identity fields included). */
  profile: Record<string, unknown>;
  /** Phone in E.164, e-mail lower-cased. */
  identity: { name?: string; phone?: string; email?: string };
  /** The x-external-id field's value. */
  externalId?: string;
  /** From the x-location fields when both are present. */
  locations: { lat: number; lng: number; label?: string }[];
}

export type RowOutcome = { ok: true; participant: CoercedParticipant } | { ok: false; errors: FieldError[] };

/** Compile once per job; the returned function is called per row and must be fast. */
export function createRowCoercer(_network: Network, _domain: Domain, _mapping: ColumnMapping): (values: string[]) => RowOutcome {
  throw new Error('row coercion is not implemented yet');
}
