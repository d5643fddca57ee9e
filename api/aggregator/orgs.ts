/**
 * `POST /v1/orgs/create` (spec): organisations register themselves, no credential. Registered only
 * when ORG_HIERARCHY_ENABLED=true; otherwise 404. Creates a pending organisation (lib/aggregator/
 * organisations.ts) and enqueues the review e-mail to NETWORK_ADMIN_EMAIL, in one transaction.
 * 201 `{org_id, slug, status, message}`; a pending registration with the same owner e-mail answers
 * 200 with that organisation (and a fresh review e-mail). At most ORG_SIGNUP_RATE_LIMIT_PER_IP
 * registrations per client IP and ORG_SIGNUP_RATE_LIMIT_PER_EMAIL per owner e-mail within
 * ORG_SIGNUP_RATE_LIMIT_WINDOW_SECONDS (429 with Retry-After). Errors in shape C.
 */
import { Router } from 'express';
import { parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js/max';
import { z } from 'zod';
import { registerOrganisation } from '../../lib/aggregator/organisations.ts';
import { createOrgSignupRateLimit } from '../../lib/aggregator/registration-rate-limit.ts';
import type { PlatformContext } from '../../lib/context.ts';
import type { Network } from '../../lib/network/config.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { HttpError } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

const text = (max = 200) => z.string().trim().min(1).max(max);

/**
 * A consent given now or earlier and valid beyond now (`given_at ≤ now < valid_till`), `value` true.
 * Shared with the aggregator registration.
 */
export const consentSchema = z.object({
  value: z.literal(true, { error: 'consent.value must be true: registration needs consent' }),
  given_at: z.iso.datetime({ offset: true }),
  valid_till: z.iso.datetime({ offset: true }),
}).superRefine((c, ctx) => {
  const now = Date.now();
  if (Date.parse(c.given_at) > now + 60_000) ctx.addIssue({ code: 'custom', path: ['given_at'], message: 'consent.given_at may not be in the future' });
  if (Date.parse(c.valid_till) <= now) ctx.addIssue({ code: 'custom', path: ['valid_till'], message: 'consent.valid_till must be in the future' });
});

/** A phone number normalised to E.164 (libphonenumber-js, `region` for numbers without a country code). */
export function phoneSchema(region: string) {
  return z.string().trim().min(3).max(30).transform((raw, ctx) => {
    const phone = parsePhoneNumberFromString(raw, region as CountryCode);
    if (!phone?.isValid()) {
      ctx.addIssue({ code: 'custom', message: `not a valid phone number (got "${raw.slice(0, 40)}")` });
      return z.NEVER;
    }
    return phone.number as string;
  });
}

/** The body of `POST /v1/orgs/create` for `network` (its aggregator types and phone region). */
export function orgCreateBody(network: Network) {
  const aggregatorTypes = Object.keys(network.aggregatorTypes);
  return z.object({
    display_name: text(),
    state: text(100).optional(),
    owner: z.object({ name: text(), email: z.email().max(320).transform((e) => e.toLowerCase()), phone: phoneSchema(network.defaultPhoneRegion) }),
    consent: consentSchema,
    website: z.url({ protocol: /^https?$/ }).optional(),
    aggregator_type: z.array(z.enum(aggregatorTypes as [string, ...string[]])).optional(),
    organisation_type: text(100).optional(),
    organisation_sub_type_educational: text(100).optional(),
    organisation_sub_type_non_educational: text(100).optional(),
    management_type: text(100).optional(),
    address: z.object({
      streetAddress: text().optional(), addressLocality: text().optional(), addressDistrict: text().optional(),
      addressRegion: text().optional(), postalCode: text(20).optional(), addressCountry: text(100).optional(),
    }).optional(),
  });
}

export function orgRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const body = orgCreateBody(ctx.network);
  const signups = createOrgSignupRateLimit(ctx.pool, {
    perIp: ctx.config.ORG_SIGNUP_RATE_LIMIT_PER_IP, perEmail: ctx.config.ORG_SIGNUP_RATE_LIMIT_PER_EMAIL,
    durationSeconds: ctx.config.ORG_SIGNUP_RATE_LIMIT_WINDOW_SECONDS,
  });

  router.post('/orgs/create', async (req, res) => {
    if (!ctx.config.ORG_HIERARCHY_ENABLED) throw new HttpError(404, `No route for ${req.method} ${req.path} (organisation registration is off: ORG_HIERARCHY_ENABLED)`);
    const input = parse(body, req.body);
    // Counted once the body is valid (a refused body sends no e-mail), before anything is written.
    const retryAfter = await signups.consume(req.ip ?? req.socket.remoteAddress ?? 'unknown', ctx.pii.blindIndex('email', input.owner.email).toString('hex'));
    if (retryAfter !== null) {
      throw new HttpError(429, `Too many organisation registrations from your address or for this owner e-mail; try again in ${retryAfter} s`, {
        code: 'rate_limited', headers: { 'Retry-After': String(retryAfter) },
      });
    }
    const org = await withTransaction(ctx.pool, (client) => registerOrganisation(client, ctx.pii, input));
    res.status(org.created ? 201 : 200).json({
      org_id: org.orgId, slug: org.slug, status: org.status,
      message: org.created
        ? 'Registration received; the network admin has been asked to review it. The owner gets an e-mail with the decision.'
        : 'A registration with this owner e-mail is already pending review; the network admin has been reminded.',
    });
  });
  return router;
}

const orgCreatedSchema = z.object({ org_id: z.uuid(), slug: z.string(), status: z.string(), message: z.string() });

/** Docs of `orgRoutes` (no credential). */
export function orgRouteDocs(network: Network): RouteDoc[] {
  return [{
    method: 'POST', path: '/v1/orgs/create', summary: 'Register an organisation (reviewed by the network admin)', tags: ['registration'], security: 'none',
    description: 'Mounted always; answers 404 unless ORG_HIERARCHY_ENABLED=true.',
    body: { schema: orgCreateBody(network) },
    responses: {
      201: { description: 'Registered, pending review', schema: orgCreatedSchema },
      200: { description: 'A registration with this owner e-mail is already pending: the admin is reminded', schema: orgCreatedSchema },
    },
    errors: { 404: 'Organisation registration is off (ORG_HIERARCHY_ENABLED)', 429: 'Too many registrations from this address or for this owner e-mail (ORG_SIGNUP_RATE_LIMIT_*; Retry-After)' },
  }];
}
