/**
 * People endpoints of the signals service (x-api-key):
 * - `POST /api/v1/auth/signup`                    spec fields; errors in shape B
 * - `POST /api/v1/consent/u18/signup/guardian`     spec fields; errors in shape B
 * - `POST /api/v1/auth/u18-precheck`               {network, email | phoneNumber} → {requiresDob}; shape A
 * Rate limits per identifier and per client IP (429 with Retry-After). Decisions: docs/decisions.md,
 * "People, consent and actions".
 */
import { Router, type ErrorRequestHandler, type Express, type Request, type RequestHandler } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { OneTimeCodeError } from '../../lib/signals/one-time-codes.ts';
import { normaliseEmail, normalisePhone, type Contact } from '../../lib/signals/people.ts';
import { createRateLimit, RateLimitedError } from '../../lib/signals/rate-limits.ts';
import { guardianSignup, PeopleError, requiresDob, signup } from '../../lib/signals/signup.ts';
import { HttpError } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

/** Paths whose errors are in shape B (spec "Errors": signup; by decision also the guardian signup). */
export const SHAPE_B_PATHS = ['/api/v1/auth/signup', '/api/v1/consent/u18/signup/guardian'];

/**
 * Makes every error of SHAPE_B_PATHS — including the body parser's (malformed JSON, too large),
 * which run before any route — answer in shape B. Call right after createServiceApp.
 */
export function useShapeB(app: Express): void {
  const mark: RequestHandler = (_req, res, next) => { res.locals.errorShape = 'B'; next(); };
  const markError: ErrorRequestHandler = (err, _req, res, next) => { res.locals.errorShape = 'B'; next(err); };
  for (const p of SHAPE_B_PATHS) app.use(p, markError, mark);
}

const email = z.email().max(320);
const phone = z.string().min(3).max(20);
export const signupSchema = z.strictObject({
  name: z.string().trim().min(1).max(200),
  email: email.optional(),
  phoneNumber: phone.optional(),
  domain: z.string().min(1).optional(),
  age: z.number().int().min(0).max(120).optional(),
});
export const guardianSchema = z.strictObject({
  network: z.string().min(1),
  domain: z.string().min(1),
  email: email.optional(),
  phoneNumber: phone.optional(),
  age: z.number().int().min(0).max(120),
  guardianName: z.string().trim().min(1).max(200),
  guardianEmail: email.optional(),
  guardianPhone: phone.optional(),
  guardianDeclarationAccepted: z.boolean(),
  sameContactAcknowledged: z.boolean().optional(),
  // Beyond the spec's fields (review of issue 29): the guardian on record's consent to be replaced.
  currentGuardianOtp: z.string().regex(/^\d{6}$/).optional()
    .meta({ description: 'Only to replace the guardian of a minor still pending: a code sent to the guardian on record' }),
});
export const precheckSchema = z.strictObject({
  network: z.string().min(1),
  email: email.optional(),
  phoneNumber: phone.optional(),
});

export function peopleRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const hour = 3600;
  const perIdentifier = createRateLimit(ctx.pool, 'signup-id', ctx.config.SIGNUP_LIMIT_PER_IDENTIFIER, hour);
  const perIp = createRateLimit(ctx.pool, 'signup-ip', ctx.config.SIGNUP_LIMIT_PER_IP, hour);
  const precheckPerIp = createRateLimit(ctx.pool, 'precheck-ip', ctx.config.SIGNUP_LIMIT_PER_IP * 4, hour);
  const region = ctx.network.defaultPhoneRegion;

  /** Normalised contact; 400 naming the field when the phone is not a phone number. */
  const contactOf = (fields: { email?: string; phone?: string }, names: { email: string; phone: string }, required: boolean): Contact => {
    const contact: Contact = {};
    if (fields.email !== undefined) contact.email = normaliseEmail(fields.email);
    if (fields.phone !== undefined) {
      const e164 = normalisePhone(fields.phone, region);
      if (!e164) throw new HttpError(400, `${names.phone}: not a valid phone number`, { code: 'invalid_request', fields: { [names.phone]: ['not a valid phone number'] } });
      contact.phone = e164;
    }
    if (required && !contact.email && !contact.phone) {
      throw new HttpError(400, `${names.email} or ${names.phone} is required`, { code: 'invalid_request', fields: { [names.email]: ['required without ' + names.phone] } });
    }
    return contact;
  };
  const checkDomain = (domain: string | undefined) => {
    if (domain !== undefined && !ctx.network.domains.has(domain)) {
      throw new HttpError(400, `domain must be one of ${[...ctx.network.domains.keys()].join(', ')}`, { code: 'invalid_request' });
    }
  };
  const checkNetwork = (network: string) => {
    if (network !== ctx.network.id) throw new HttpError(400, `network must be ${ctx.network.id}`, { code: 'invalid_request' });
  };
  const limit = async (req: Request, contact: Contact) => {
    try {
      await perIdentifier.consume(...[contact.email, contact.phone].filter((v): v is string => Boolean(v)).map((v) => ctx.pii.blindIndex('rate', v).toString('hex')));
      await perIp.consume(req.ip ?? 'unknown');
    } catch (err) {
      throw asHttp(err);
    }
  };

  router.post('/auth/signup', async (req, res) => {
    const body = parse(signupSchema, req.body);
    checkDomain(body.domain);
    const contact = contactOf({ email: body.email, phone: body.phoneNumber }, { email: 'email', phone: 'phoneNumber' }, true);
    await limit(req, contact);
    const result = await withTransaction(ctx.pool, (client) => signup(client, ctx.pii, ctx.network, {
      name: body.name, contact, domain: body.domain, age: body.age,
    })).catch((err) => { throw asHttp(err); });
    res.status(result.alreadyRegistered ? 200 : 201).json({ ok: true, alreadyRegistered: result.alreadyRegistered });
  });

  router.post('/consent/u18/signup/guardian', async (req, res) => {
    const body = parse(guardianSchema, req.body);
    checkNetwork(body.network);
    checkDomain(body.domain);
    if (!body.guardianDeclarationAccepted) {
      throw new HttpError(400, 'guardianDeclarationAccepted must be true', { code: 'GUARDIAN_DECLARATION_REQUIRED' });
    }
    const contact = contactOf({ email: body.email, phone: body.phoneNumber }, { email: 'email', phone: 'phoneNumber' }, true);
    const guardian = contactOf({ email: body.guardianEmail, phone: body.guardianPhone }, { email: 'guardianEmail', phone: 'guardianPhone' }, true);
    await limit(req, contact);
    const result = await withTransaction(ctx.pool, (client) => guardianSignup(client, ctx.pii, ctx.network, ctx.config.GUARDIAN_MAX_WARDS, {
      domain: body.domain, contact, age: body.age, guardianName: body.guardianName, guardian,
      sameContactAcknowledged: body.sameContactAcknowledged ?? false, currentGuardianOtp: body.currentGuardianOtp,
    })).catch((err) => { throw asHttp(err); });
    // A wrong proof was committed (the wrong try counts), then refused.
    if ('refusal' in result) throw asHttp(result.refusal);
    res.status(201).json({ otpSent: true });
  });

  router.post('/auth/u18-precheck', async (req, res) => {
    const body = parse(precheckSchema, req.body);
    checkNetwork(body.network);
    const contact = contactOf({ email: body.email, phone: body.phoneNumber }, { email: 'email', phone: 'phoneNumber' }, true);
    await precheckPerIp.consume(req.ip ?? 'unknown').catch((err) => { throw asHttp(err); });
    res.json({ requiresDob: await requiresDob(ctx.pool, ctx.pii, contact) });
  });

  return router;
}

/** Domain refusals as HTTP errors (anything else is rethrown as it is). */
export function asHttp(err: unknown): unknown {
  if (err instanceof PeopleError) return new HttpError(err.status, err.message, { code: err.code, headers: err.headers });
  if (err instanceof RateLimitedError) return new HttpError(429, err.message, { code: 'RATE_LIMITED', headers: { 'Retry-After': String(err.retryAfterSeconds) } });
  if (err instanceof OneTimeCodeError) {
    const status = err.code === 'OTP_SEND_LIMIT' || err.code === 'OTP_TOO_MANY_TRIES' ? 429 : err.code === 'OTP_EXPIRED' ? 410 : 401;
    return new HttpError(status, err.message, { code: err.code, headers: err.retryAfterSeconds ? { 'Retry-After': String(err.retryAfterSeconds) } : undefined });
  }
  return err;
}

const rateLimited = 'Too many requests for this contact or from this address (Retry-After)';

/** Docs of `peopleRoutes` (signup and the guardian signup answer errors in shape B). */
export const peopleRouteDocs: RouteDoc[] = [
  {
    method: 'POST', path: '/api/v1/auth/signup', summary: 'Sign up a person (email or phoneNumber required)', tags: ['people'], security: 'apiKey', errorShape: 'B',
    body: { schema: signupSchema, example: API_EXAMPLES.signup },
    responses: {
      201: { description: 'Signed up', schema: z.object({ ok: z.literal(true), alreadyRegistered: z.literal(false) }) },
      200: { description: 'The contact was already registered (nothing changed)', schema: z.object({ ok: z.literal(true), alreadyRegistered: z.literal(true) }) },
    },
    errors: { 409: 'Under the guardian consent age: use the guardian signup (GUARDIAN_CONSENT_REQUIRED)', 429: rateLimited },
  },
  {
    method: 'POST', path: '/api/v1/consent/u18/signup/guardian', summary: 'Sign up a minor with a guardian\'s consent', tags: ['people'], security: 'apiKey', errorShape: 'B',
    body: { schema: guardianSchema, example: API_EXAMPLES.guardian_signup },
    responses: { 201: { description: 'Signed up, pending the guardian\'s one-time code', schema: z.object({ otpSent: z.literal(true) }) } },
    errors: {
      403: 'currentGuardianOtp wrong (GUARDIAN_OTP_INVALID) or expired/used (GUARDIAN_OTP_EXPIRED)',
      409: 'NOT_A_MINOR, SAME_CONTACT_NOT_ALLOWED, ALREADY_REGISTERED, TOO_MANY_WARDS, or GUARDIAN_ALREADY_SET (a minor still pending has another guardian: currentGuardianOtp needed)',
      429: `${rateLimited}; GUARDIAN_OTP_TOO_MANY_TRIES`,
    },
  },
  {
    method: 'POST', path: '/api/v1/auth/u18-precheck', summary: 'Whether signing up this contact needs a date of birth', tags: ['people'], security: 'apiKey',
    body: { schema: precheckSchema, example: API_EXAMPLES.u18_precheck },
    responses: { 200: { description: 'The answer', schema: z.object({ requiresDob: z.boolean() }) } },
    errors: { 429: 'Too many prechecks from this address (Retry-After)' },
  },
];
