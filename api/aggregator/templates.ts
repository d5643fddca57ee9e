/**
 * `GET /v1/bulk-uploads/template` (spec rules 1–5): the bulk-upload template of a participant
 * domain as a CSV or XLSX attachment (lib/bulk/template.ts), gated on the caller's aggregator types.
 *
 * Query: `participant_type` — a domain of the network; when omitted, the caller's only allowed
 * domain (400 asking for it when the caller may onboard several); `format` — csv (default) or xlsx.
 * Errors: 400 (shape C, naming the field) for an unknown participant_type or format; 403 when the
 * caller's aggregator types may not onboard that domain.
 */
import { Router } from 'express';
import { z } from 'zod';
import { csvTemplate, TEMPLATE_CONTENT_TYPES, templateFileName, xlsxTemplate, type TemplateFormat } from '../../lib/aggregator/bulk/template.ts';
import type { PlatformContext } from '../../lib/context.ts';
import type { Network } from '../../lib/network/config.ts';
import { assertDomainAllowed, callerOf } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

/** The template query for `network`: participant_type one of its domains, format csv (default) or xlsx. */
export function templateQuerySchema(network: Network) {
  const domains = [...network.domains.keys()] as [string, ...string[]];
  return z.object({
    participant_type: z.enum(domains, { message: `must be one of ${domains.join(', ')}` }).optional()
      .meta({ description: 'a participant domain of the network; default: the caller\'s only allowed one' }),
    format: z.enum(['csv', 'xlsx'], { message: 'must be csv or xlsx' }).default('csv'),
  });
}

/** Routes mounted under `/v1` after `bearerAuth`. */
export function templateRoutes(ctx: PlatformContext): Router {
  const domains = [...ctx.network.domains.keys()];
  const querySchema = templateQuerySchema(ctx.network);
  // The network is fixed for the process, so each template is generated once.
  const cache = new Map<string, Promise<Buffer>>();

  const router = Router();
  router.get('/bulk-uploads/template', async (req, res) => {
    const query = parse(querySchema, req.query, 'query');
    const caller = callerOf(res);
    const domainName = query.participant_type ?? defaultDomain(caller.domains, domains);
    assertDomainAllowed(res, domainName);
    const domain = ctx.network.domains.get(domainName)!;
    const format: TemplateFormat = query.format;
    const key = `${domainName}.${format}`;
    let body = cache.get(key);
    if (!body) {
      body = format === 'csv' ? Promise.resolve(Buffer.from(csvTemplate(ctx.network, domain))) : xlsxTemplate(ctx.network, domain);
      cache.set(key, body);
      body.catch(() => cache.delete(key));
    }
    const bytes = await body;
    // The name is [a-z0-9_-] only (network id and domain name patterns), so quoting it is enough (RFC 6266).
    res.status(200)
      .set('content-disposition', `attachment; filename="${templateFileName(ctx.network, domain, format)}"`)
      .type(TEMPLATE_CONTENT_TYPES[format])
      .send(bytes);
  });
  return router;
}

/** The caller's only allowed domain; otherwise 400 asking for participant_type (403 when none is allowed). */
function defaultDomain(allowed: Set<string>, domains: string[]): string {
  const mine = domains.filter((d) => allowed.has(d));
  if (mine.length === 1) return mine[0];
  if (mine.length === 0) {
    throw new HttpError(403, 'This aggregator\'s types may not onboard any participant type, so it has no bulk-upload template', { code: 'domain_not_allowed' });
  }
  throw new HttpError(400, `Invalid query: participant_type is required, as this aggregator may onboard ${mine.join(' and ')} participants`, {
    code: 'invalid_request', fields: { participant_type: [`required: one of ${mine.join(', ')}`] },
  });
}

/** Docs of `templateRoutes` for `network` (api/http/openapi.ts); the CSV example is the first domain's template. */
export function templateRouteDocs(network: Network): RouteDoc[] {
  const [first] = network.domains.values();
  return [{
    method: 'GET', path: '/v1/bulk-uploads/template', summary: 'Bulk-upload template of a participant type (CSV or XLSX attachment)',
    tags: ['bulk uploads'], security: 'bearer', query: templateQuerySchema(network),
    responses: {
      200: {
        description: 'The template as an attachment: CSV (header and one example row) or XLSX (instructions, allowed values, samples, a grid with dropdowns)',
        content: [
          { type: 'text/csv', schema: z.string(), ...(first ? { example: csvTemplate(network, first) } : {}) },
          { type: TEMPLATE_CONTENT_TYPES.xlsx },
        ],
        headers: z.object({ 'content-disposition': z.string().meta({ description: 'attachment; filename="<network>-<participant_type>-template.<format>"' }) }),
      },
    },
    errors: { 403: 'The caller\'s aggregator types may not onboard this participant type (domain_not_allowed)' },
  }];
}
