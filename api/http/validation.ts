/** Request validation with zod: failures become 400 errors that name each field. */
import type { z } from 'zod';
import { collectFieldErrors, HttpError, type FieldErrors } from './errors.ts';

/**
 * The largest PostgreSQL `integer` (int4): the bound of every integer a request may carry into an
 * int4 column or an OFFSET arithmetic (page numbers, versions, counters). zod's `int()` alone allows
 * up to 2^53 − 1, which PostgreSQL refused with a 500 (issue 15's schema fuzzer).
 */
export const PG_INT_MAX = 2_147_483_647;

/** Per-field messages of a zod error, keyed by dotted path (`(root)` for the whole value). */
export function fieldErrors(error: z.ZodError, prefix = ''): FieldErrors {
  return collectFieldErrors(error.issues.map((issue) => ({
    field: [prefix, ...issue.path.map(String)].filter(Boolean).join('.') || '(root)',
    message: issue.message,
  })));
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

/**
 * The dotted path of the first string or key holding a NUL character in `value` (`(root)` for the
 * value itself), or undefined. Walks iteratively: a body is at most HTTP_BODY_LIMIT bytes, but may
 * be deep. Binary values (a raw body's Buffer) are not fields: skipped.
 */
export function nulPath(value: unknown): string | undefined {
  // Almost no body holds one: a walk that builds no path first (a 1,000-item batch of signals has
  // ~20,000 keys; building each key's path cost ~3 % of the service's CPU in bulk onboarding).
  if (!holdsNul(value)) return undefined;
  const stack: [unknown, string][] = [[value, '']];
  while (stack.length) {
    const [v, path] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\0')) return path || '(root)';
    } else if (v !== null && typeof v === 'object' && !ArrayBuffer.isView(v)) {
      for (const [k, child] of Object.entries(v)) {
        const at = path ? `${path}.${k}` : k;
        if (k.includes('\0')) return at;
        stack.push([child, at]);
      }
    }
  }
  return undefined;
}

/** Whether some string or key in `value` holds a NUL character (nulPath's fast first pass). */
function holdsNul(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v === 'string') {
      if (v.includes('\0')) return true;
    } else if (v !== null && typeof v === 'object' && !ArrayBuffer.isView(v)) {
      for (const k in v) {
        if (k.includes('\0')) return true;
        stack.push((v as Record<string, unknown>)[k]);
      }
    }
  }
  return false;
}

/**
 * Refuses a parsed JSON body holding a NUL character in a value or key: no field takes one, and
 * PostgreSQL cannot store one in text.
 * @throws HttpError 400 `invalid_request` naming the field (`nulPath`).
 */
export function refuseNulInBody(body: unknown): void {
  const field = nulPath(body);
  if (field === undefined) return;
  throw new HttpError(400, `Invalid request body: ${field} contains a NUL character (\\u0000), which no field accepts`, {
    code: 'invalid_request', fields: { [field]: ['contains a NUL character'] },
  });
}
