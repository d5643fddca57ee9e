/** Request validation with zod: failures become 400 errors that name each field. */
import type { z } from 'zod';
import { HttpError, type FieldErrors } from './errors.ts';

/** Per-field messages of a zod error, keyed by dotted path (`(root)` for the whole value). */
export function fieldErrors(error: z.ZodError, prefix = ''): FieldErrors {
  const fields: FieldErrors = {};
  for (const issue of error.issues) {
    const key = [prefix, ...issue.path.map(String)].filter(Boolean).join('.') || '(root)';
    (fields[key] ??= []).push(issue.message);
  }
  return fields;
}

/** One-line summary of field errors: `a.b: message; c: message`. */
export function summarise(fields: FieldErrors): string {
  return Object.entries(fields).map(([k, msgs]) => `${k}: ${msgs.join(', ')}`).join('; ');
}

/**
 * Parses `value` with `schema`. `what` names the input in the message (`request body`, `query`).
 * @throws HttpError 400 `invalid_request` with `fields` for every problem.
 */
export function parse<S extends z.ZodType>(schema: S, value: unknown, what = 'request body'): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const fields = fieldErrors(result.error);
  throw new HttpError(400, `Invalid ${what}: ${summarise(fields)}`, { code: 'invalid_request', fields });
}
