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
import { HttpError, type FieldErrors } from '../http/errors.ts';

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
  const fields: FieldErrors = {};
  for (const e of errors) (fields[e.field] ??= []).push(e.message);
  return fields;
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
