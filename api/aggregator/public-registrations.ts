/**
 * Public registration through a registration link (spec "POST /public/v1/aggregators/{orgSlug}/
 * registrations/{slug}"), no credential:
 *
 * - `GET  …/registrations/{slug}` what a form needs: link, domain, mode, participant JSON Schema
 *   with labels and closed sets, consent texts
 * - `POST …/registrations/{slug}` one registration → 201 `{outcome: passed, …}` or 409 `{outcome: skipped, …}`
 *
 * Unknown, draft or retired link → 404; expired → 410; invalid body → 400 naming each field;
 * more than REGISTRATION_RATE_LIMIT_POINTS submissions per link and client IP within the window →
 * 429 with `Retry-After`. Errors in shape C; the outcome bodies are the spec's own.
 */
import { Router, type Request, type Response } from 'express';
import type { FieldError } from '../../lib/aggregator/bulk/row-coercion.ts';
import { findPublicLink, type LinkRow } from '../../lib/aggregator/links.ts';
import { registrationForm, submitRegistration, type SubmissionResult } from '../../lib/aggregator/public-registration.ts';
import { createRegistrationRateLimit, type RegistrationRateLimit } from '../../lib/aggregator/registration-rate-limit.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { z } from 'zod';
import { collectFieldErrors, HttpError, type FieldErrors } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';

/**
 * The link published at `orgSlug`/`slug` that accepts registrations now.
 * @throws HttpError 404 (unknown, draft or retired), 410 (expired)
 */
export async function openPublicLink(ctx: PlatformContext, orgSlug: string, slug: string): Promise<LinkRow> {
  const link = await findPublicLink(ctx.pool, orgSlug, slug);
  if (!link || link.status !== 'live') throw new HttpError(404, `No open registration link ${orgSlug}/${slug}`, { code: 'link_not_found' });
  if (link.expires_at && link.expires_at.getTime() <= Date.now()) {
    throw new HttpError(410, `Registration link ${orgSlug}/${slug} expired at ${link.expires_at.toISOString()}`, { code: 'link_expired' });
  }
  return link;
}

/** Field errors in the shape of HttpError's `fields`. */
export function fieldMap(errors: FieldError[]): FieldErrors {
  return collectFieldErrors(errors);
}

/**
 * Counts the request against the link's rate limit, then registers `body`.
 * @throws HttpError 429 with Retry-After when the limit trips.
 */
export async function limitAndSubmit(ctx: PlatformContext, limit: RegistrationRateLimit, req: Request, link: LinkRow, body: unknown): Promise<SubmissionResult> {
  const retryAfter = await limit.consume(link.link_id, req.ip ?? req.socket.remoteAddress ?? 'unknown');
  if (retryAfter !== null) {
    throw new HttpError(429, `Too many registrations through this link from your address; try again in ${retryAfter} s`, {
      code: 'rate_limited', headers: { 'Retry-After': String(retryAfter) },
    });
  }
  return submitRegistration({ pool: ctx.pool, pii: ctx.pii, network: ctx.network, instanceUrl: ctx.urls.aggregator }, link, body);
}

/** A per-link limiter from the configuration. */
export function registrationRateLimit(ctx: PlatformContext): RegistrationRateLimit {
  return createRegistrationRateLimit(ctx.pool, ctx.config.REGISTRATION_RATE_LIMIT_POINTS, ctx.config.REGISTRATION_RATE_LIMIT_WINDOW_SECONDS);
}

/** The public registration routes (mount under `/public/v1`, no credential). */
export function publicRegistrationRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const limit = registrationRateLimit(ctx);
  const path = '/aggregators/:orgSlug/registrations/:slug';

  router.get(path, async (req, res) => {
    const link = await openPublicLink(ctx, String(req.params.orgSlug), String(req.params.slug));
    res.json(registrationForm(ctx.network, link));
  });

  router.post(path, async (req, res: Response) => {
    const link = await openPublicLink(ctx, String(req.params.orgSlug), String(req.params.slug));
    const result = await limitAndSubmit(ctx, limit, req, link, req.body);
    if (result.status === 400) {
      const fields = fieldMap(result.errors);
      throw new HttpError(400, `Invalid registration: ${result.errors.map((e) => e.message).join('; ')}`, { code: 'invalid_registration', fields });
    }
    res.status(result.status).json(result.body);
  });

  return router;
}

/** Path parameters of a registration link (read as strings by the handlers; unknown ones are 404). */
export const publicLinkParams = z.object({
  orgSlug: z.string().meta({ description: 'the organisation\'s slug' }),
  slug: z.string().meta({ description: 'the link\'s slug' }),
});
/** The registration body: validated at runtime against the participant JSON Schema of the link's domain (network config), hence open here. */
export const publicRegistrationBody = z.looseObject({}).meta({
  description: 'The participant\'s fields and consents, validated at runtime against the participant JSON Schema of the link\'s domain as `GET` of this path answers it (`schema`, `fields`; network configuration), so open here. 400 names each bad field.',
});
const linkSummarySchema = z.object({
  org_slug: z.string(), org_name: z.string(), slug: z.string(), domain: z.string(), domain_label: z.string(),
  registration_mode: z.string(), status: z.string(), expires_at: z.string().nullable(), context: z.unknown(),
});
const registrationFormSchema = z.object({
  link: linkSummarySchema,
  schema: z.looseObject({}).meta({ description: 'the participant JSON Schema of the link\'s domain' }),
  fields: z.array(z.object({
    name: z.string(), label: z.string(), description: z.string().nullable(), kind: z.string(), item_kind: z.string().nullable(),
    enum: z.array(z.unknown()).nullable(), required: z.boolean(), identity: z.string().nullable(), minimum: z.number().nullable(), maximum: z.number().nullable(),
  })),
  consent: z.object({ required: z.boolean(), texts: z.record(z.string(), z.string()) }),
});
const outcomeFields = {
  registration_mode: z.string(), submission_shape: z.enum(['account', 'account_and_profile']),
  owned_elsewhere: z.boolean().meta({ description: 'another aggregator already holds this person' }),
};
const linkErrors = { 404: 'No open link (unknown, draft or retired)', 410: 'The link has expired' };

/** Docs of `publicRegistrationRoutes` (public, no credential). */
export const publicRegistrationRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/public/v1/aggregators/:orgSlug/registrations/:slug', summary: 'What a registration form needs', tags: ['public registration'], security: 'none',
    params: publicLinkParams, responses: { 200: { description: 'The link, its participant schema, fields and consent texts', schema: registrationFormSchema } }, errors: linkErrors,
  },
  {
    method: 'POST', path: '/public/v1/aggregators/:orgSlug/registrations/:slug', summary: 'Register one participant through a link', tags: ['public registration'], security: 'none',
    params: publicLinkParams, body: { schema: publicRegistrationBody, example: API_EXAMPLES.public_registration },
    responses: {
      201: { description: 'Registered', schema: z.object({ outcome: z.literal('passed'), submission_id: z.uuid(), lifecycle_status: z.string().nullable(), ...outcomeFields }) },
      409: { description: 'Already registered with this aggregator: nothing changed', schema: z.object({ outcome: z.literal('skipped'), message: z.string(), lifecycle_status: z.string().nullable(), ...outcomeFields }) },
    },
    errors: { ...linkErrors, 429: 'Too many registrations through this link from this address (Retry-After)' },
  },
];
