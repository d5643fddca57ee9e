/**
 * Console pages for registration links (`/console/links`, `/console/links/{id}`): list with
 * submissions per link, create, activate, retire, and the public URL with its QR code (SVG from
 * `qrcode`, the same as the public `/qr.svg` route) to copy or download. The rules are the API's
 * (api/aggregator/links.ts): roles admin and operator change links; a retired or expired link is
 * not activated.
 */
import { Router, type Request, type Response } from 'express';
import QRCode from 'qrcode';
import { z } from 'zod';
import { generatedSlug, getLink, insertLink, LINK_SLUG_PATTERN, linkView, listLinks, moveLink, type LinkRow } from '../../lib/aggregator/links.ts';
import type { PlatformContext } from '../../lib/context.ts';
import type { Caller } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';
import { consoleRole, languageOf, renderPage, translator } from './render.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const pageQuery = z.object({ page: z.coerce.number().int().min(1).max(100_000).default(1) });
const callerOf = (res: Response) => res.locals.caller as Caller;

export function linkPages(ctx: PlatformContext): Router {
  const router = Router();
  const view = (row: LinkRow) => linkView(row, ctx.urls.aggregator);

  const linkOf = async (req: Request, res: Response): Promise<LinkRow> => {
    const id = String(req.params.id);
    const link = UUID.test(id) ? await getLink(ctx.pool, callerOf(res).aggregatorId, id.toLowerCase()) : null;
    if (!link) throw new HttpError(404, translator(languageOf(req))('links.notfound', { id }));
    return link;
  };

  router.get('/links', async (req, res) => {
    const { page } = parse(pageQuery, req.query, 'query');
    const caller = callerOf(res);
    const { links, total } = await listLinks(ctx.pool, caller.aggregatorId, { page, limit: 50 });
    const domains = [...caller.domains].map((name) => ({ name, label: ctx.network.domains.get(name)?.label ?? name }));
    renderPage(req, res, 'links', { links: links.map(view), total, page, hasMore: page * 50 < total, domains });
  });

  router.post('/links', consoleRole('admin', 'operator'), async (req, res) => {
    const t = translator(languageOf(req));
    const body = req.body as Record<string, string>;
    const caller = callerOf(res);
    const domain = String(body.domain ?? '');
    if (!caller.domains.has(domain)) throw new HttpError(400, t('links.domain.invalid'), { fields: { domain: ['unknown domain'] } });
    const slug = String(body.slug ?? '').trim();
    if (slug && (slug.length < 3 || slug.length > 60 || !LINK_SLUG_PATTERN.test(slug))) {
      throw new HttpError(400, t('links.slug.invalid'), { fields: { slug: ['invalid'] } });
    }
    const input = { domain, registrationMode: ctx.network.registrationModes[0], status: 'draft', context: {}, expiresAt: null } as const;
    const scope = { aggregatorId: caller.aggregatorId, orgId: caller.orgId };
    let link = await insertLink(ctx.pool, scope, { ...input, slug: slug || generatedSlug(domain) });
    for (let i = 0; !link && !slug && i < 3; i++) link = await insertLink(ctx.pool, scope, { ...input, slug: generatedSlug(domain) });
    if (!link) throw new HttpError(409, t('links.slug.taken', { slug }));
    res.redirect(303, `/console/links/${link.link_id}`);
  });

  router.get('/links/:id', async (req, res) => {
    const link = view(await linkOf(req, res));
    const qrSvg = link.public_url ? await QRCode.toString(link.public_url, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 }) : null;
    renderPage(req, res, 'link', { link, qrSvg, qrData: qrSvg && `data:image/svg+xml;base64,${Buffer.from(qrSvg).toString('base64')}` });
  });

  router.post('/links/:id/activate', consoleRole('admin', 'operator'), async (req, res) => {
    const t = translator(languageOf(req));
    const existing = await linkOf(req, res);
    if (existing.status === 'retired') throw new HttpError(409, t('links.retired'));
    if (existing.status === 'draft' && existing.expires_at && existing.expires_at.getTime() <= Date.now()) throw new HttpError(409, t('links.expired'));
    await moveLink(ctx.pool, existing.aggregator_id, existing.link_id, ['draft'], 'live');
    res.redirect(303, `/console/links/${existing.link_id}`);
  });

  router.post('/links/:id/retire', consoleRole('admin', 'operator'), async (req, res) => {
    const existing = await linkOf(req, res);
    await moveLink(ctx.pool, existing.aggregator_id, existing.link_id, ['draft', 'live'], 'retired');
    res.redirect(303, `/console/links/${existing.link_id}`);
  });

  return router;
}
