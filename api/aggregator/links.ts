/**
 * Registration-link endpoints (spec "POST /v1/links/create", "POST /v1/links/{id}/activate",
 * "Registration link status"; the rest decided in docs/decisions.md, "Registration, links and approval"):
 *
 * - `POST /v1/links/create`          {domain, slug?, context?, status?, registration_mode?, expires_at?} → 201 link
 * - `GET  /v1/links?page=&limit=`    the caller's links, newest first
 * - `GET  /v1/links/{id}`            one link with its metrics
 * - `PATCH /v1/links/{id}`           change a draft (409 once live or retired)
 * - `POST /v1/links/{id}/activate`   draft → live (live: unchanged; retired or expired: 409)
 * - `POST /v1/links/{id}/retire`     draft|live → retired (retired: unchanged)
 *
 * Another aggregator's link is 404. Errors in shape C.
 */
import { Router, type Response } from 'express';
import { z } from 'zod';
import {
  generatedSlug, getLink, insertLink, LINK_SLUG_PATTERN, linkView, listLinks, moveLink, updateDraftLink, type LinkRow,
} from '../../lib/aggregator/links.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { assertDomainAllowed, callerOf, requireRole } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, PG_INT_MAX } from '../http/validation.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const slugSchema = z.string().min(3, 'slug must be 3 to 60 characters').max(60, 'slug must be 3 to 60 characters')
  .regex(LINK_SLUG_PATTERN, 'slug must be lower-case letters and digits in words joined by single hyphens, e.g. delhi-camp-2025');
const futureDate = z.iso.datetime({ offset: true, error: 'expires_at must be an ISO-8601 date-time, e.g. 2030-01-31T00:00:00Z' })
  .transform((v) => new Date(v))
  .refine((d) => d.getTime() > Date.now(), 'expires_at must be in the future');
const contextSchema = z.record(z.string(), z.unknown())
  .refine((c) => JSON.stringify(c).length <= 16_384, 'context must be at most 16 KiB of JSON');

export const linkCreateBody = z.object({
  domain: z.string().min(1),
  slug: slugSchema.optional(),
  context: contextSchema.optional(),
  status: z.enum(['draft', 'live'], { error: 'status must be draft or live' }).optional(),
  registration_mode: z.string().min(1).optional(),
  expires_at: futureDate.optional(),
});
export const linkPatchBody = z.strictObject({
  domain: z.string().min(1).optional(),
  slug: slugSchema.optional(),
  context: contextSchema.optional(),
  registration_mode: z.string().min(1).optional(),
  expires_at: futureDate.nullable().optional(),
});
export const linkListQuery = z.object({
  page: z.coerce.number().int().min(1).max(PG_INT_MAX).default(1),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});

/** The registration-link routes (mount under `/v1` after bearerAuth). */
export function linkRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const view = (row: LinkRow) => linkView(row, ctx.urls.aggregator);

  /** 400 unless the network declares `domain` and `mode`; 403 unless the caller's types allow the domain. */
  const checkDomainAndMode = (res: Response, domain: string | undefined, mode: string | undefined) => {
    if (domain !== undefined) {
      if (!ctx.network.domains.has(domain)) {
        throw new HttpError(400, `domain must be one of ${[...ctx.network.domains.keys()].join(', ')}`, { fields: { domain: ['unknown domain'] } });
      }
      assertDomainAllowed(res, domain);
    }
    if (mode !== undefined && !ctx.network.registrationModes.includes(mode)) {
      throw new HttpError(400, `registration_mode must be one of ${ctx.network.registrationModes.join(', ')}`, { fields: { registration_mode: ['unknown registration mode'] } });
    }
  };

  const linkIn = async (res: Response, id: string): Promise<LinkRow> => {
    const link = UUID.test(id) ? await getLink(ctx.pool, callerOf(res).aggregatorId, id) : null;
    if (!link) throw new HttpError(404, `No registration link ${id}`, { code: 'link_not_found' });
    return link;
  };

  router.post('/links/create', requireRole('admin', 'operator'), async (req, res) => {
    const body = parse(linkCreateBody, req.body);
    checkDomainAndMode(res, body.domain, body.registration_mode);
    const caller = callerOf(res);
    const input = {
      domain: body.domain,
      registrationMode: body.registration_mode ?? ctx.network.registrationModes[0],
      status: body.status ?? 'draft',
      context: body.context ?? {},
      expiresAt: body.expires_at ?? null,
    } as const;
    const scope = { aggregatorId: caller.aggregatorId, orgId: caller.orgId };
    let link = await insertLink(ctx.pool, scope, { ...input, slug: body.slug ?? generatedSlug(body.domain) });
    // A generated slug that happens to be taken is simply drawn again.
    for (let i = 0; !link && !body.slug && i < 3; i++) link = await insertLink(ctx.pool, scope, { ...input, slug: generatedSlug(body.domain) });
    if (!link) throw new HttpError(409, `slug ${body.slug} is already used by another registration link of your organisation`, { code: 'slug_taken', fields: { slug: ['already used'] } });
    res.status(201).location(`/v1/links/${link.link_id}`).json(view(link));
  });

  router.get('/links', async (req, res) => {
    const page = parse(linkListQuery, req.query, 'query');
    const { links, total } = await listLinks(ctx.pool, callerOf(res).aggregatorId, page);
    res.json({ links: links.map(view), page: page.page, limit: page.limit, total, has_more: page.page * page.limit < total });
  });

  router.get('/links/:id', async (req, res) => {
    res.json(view(await linkIn(res, String(req.params.id))));
  });

  router.patch('/links/:id', requireRole('admin', 'operator'), async (req, res) => {
    const existing = await linkIn(res, String(req.params.id));
    const body = parse(linkPatchBody, req.body ?? {});
    checkDomainAndMode(res, body.domain, body.registration_mode);
    const outcome = await updateDraftLink(ctx.pool, existing.aggregator_id, existing.link_id, {
      slug: body.slug, domain: body.domain, registrationMode: body.registration_mode, context: body.context,
      expiresAt: body.expires_at,
    });
    if (!outcome) throw new HttpError(404, `No registration link ${req.params.id}`, { code: 'link_not_found' });
    if (outcome.result === 'slug_taken') throw new HttpError(409, `slug ${body.slug} is already used by another registration link of your organisation`, { code: 'slug_taken', fields: { slug: ['already used'] } });
    if (outcome.result === 'not_draft') throw new HttpError(409, `Registration link is ${outcome.link.status}: only a draft link can be changed`, { code: 'link_not_draft' });
    res.json(view(outcome.link));
  });

  router.post('/links/:id/activate', requireRole('admin', 'operator'), async (req, res) => {
    const existing = await linkIn(res, String(req.params.id));
    if (existing.status === 'retired') throw new HttpError(409, 'Registration link is retired and cannot be activated; create a new link', { code: 'link_retired' });
    if (existing.status === 'draft' && existing.expires_at && existing.expires_at.getTime() <= Date.now()) {
      throw new HttpError(409, `Registration link expired at ${existing.expires_at.toISOString()}; change expires_at first`, { code: 'link_expired' });
    }
    const moved = await moveLink(ctx.pool, existing.aggregator_id, existing.link_id, ['draft'], 'live');
    // Retired meanwhile by a concurrent request: the compare-and-set above left it alone.
    if (moved!.link.status === 'retired') throw new HttpError(409, 'Registration link is retired and cannot be activated; create a new link', { code: 'link_retired' });
    res.json(view(moved!.link));
  });

  router.post('/links/:id/retire', requireRole('admin', 'operator'), async (req, res) => {
    const existing = await linkIn(res, String(req.params.id));
    const moved = await moveLink(ctx.pool, existing.aggregator_id, existing.link_id, ['draft', 'live'], 'retired');
    res.json(view(moved!.link));
  });

  return router;
}

/** Path parameter of a link (a UUID in either case; anything else, or another aggregator's link, is 404). */
export const linkIdParams = z.object({ id: z.string().regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/).meta({ format: 'uuid', description: 'registration link id' }) });
/** A registration link (lib/aggregator/links.ts `linkView`; spec "Registration link status"). */
export const linkSchema = z.object({
  link_id: z.uuid(), slug: z.string(), domain: z.string(), status: z.enum(['draft', 'live', 'retired']), registration_mode: z.string(),
  context: z.record(z.string(), z.unknown()), expires_at: z.string().nullable(),
  public_url: z.string().nullable().meta({ description: 'the form page; null while draft' }), qr_url: z.string().nullable(), qr_expires_at: z.string().nullable(),
  metrics: z.object({ total: z.int(), passed: z.int(), failed: z.int(), skipped: z.int() }), created_at: z.string(), updated_at: z.string(),
}).meta({ id: 'RegistrationLink' });
const TAGS = ['registration links'];
const one = (description: string) => ({ 200: { description, schema: linkSchema } });
const notFound = { 404: 'No such link of the caller' };
const writer = { 403: 'Role viewer, or the caller may not onboard this domain' };

/** Docs of `linkRoutes`. */
export const linkRouteDocs: RouteDoc[] = [
  {
    method: 'POST', path: '/v1/links/create', summary: 'Create a registration link (draft unless status live)', tags: TAGS, security: 'bearer',
    body: { schema: linkCreateBody, example: API_EXAMPLES.link },
    responses: { 201: { description: 'Created', schema: linkSchema, headers: z.object({ location: z.string() }) } },
    errors: { ...writer, 409: 'The slug is taken in the organisation' },
  },
  {
    method: 'GET', path: '/v1/links', summary: 'The caller\'s links, newest first', tags: TAGS, security: 'bearer', query: linkListQuery,
    responses: { 200: { description: 'A page of links', schema: z.object({ links: z.array(linkSchema), page: z.int(), limit: z.int(), total: z.int(), has_more: z.boolean() }) } },
  },
  { method: 'GET', path: '/v1/links/:id', summary: 'One link with its metrics', tags: TAGS, security: 'bearer', params: linkIdParams, responses: one('The link'), errors: notFound },
  {
    method: 'PATCH', path: '/v1/links/:id', summary: 'Change a draft link', tags: TAGS, security: 'bearer', params: linkIdParams, body: { schema: linkPatchBody },
    responses: one('The link changed'), errors: { ...writer, ...notFound, 409: 'The link is not a draft, or the slug is taken' },
  },
  {
    method: 'POST', path: '/v1/links/:id/activate', summary: 'Make a draft link live (a live one is unchanged)', tags: TAGS, security: 'bearer', params: linkIdParams,
    responses: one('The live link'), errors: { 403: 'Role viewer', ...notFound, 409: 'The link is retired or has expired' },
  },
  {
    method: 'POST', path: '/v1/links/:id/retire', summary: 'Retire a link (a retired one is unchanged)', tags: TAGS, security: 'bearer', params: linkIdParams,
    responses: one('The retired link'), errors: { 403: 'Role viewer', ...notFound },
  },
];
