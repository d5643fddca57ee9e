/**
 * The support-request handler both services mount (aggregator `POST /v1/support`, signals
 * `POST /api/v1/support/`), over lib/network/support.ts: validate (400), size limits (413), the
 * submitter's allowance (429 + Retry-After), then store and enqueue the e-mail; answers
 * `{ok: true, reference}`. Error shapes are the service's (C on the aggregator, A on signals).
 */
import express, { type Request, type RequestHandler, type Response } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import {
  consumeSupportAllowance, createSupportRateLimiter, decodeAttachments, fileSupportRequest, SUPPORT_BODY_LIMIT_BYTES,
  supportRequestSchema, SupportRequestError, type SupportRequest,
} from '../../lib/network/support.ts';
import { HttpError } from './errors.ts';
import { JSON_TYPES, routeBody } from './service-app.ts';
import { z } from 'zod';
import type { RouteDoc, RouteSecurity } from './route-doc.ts';
import { parse } from './validation.ts';

export interface SupportRouteOptions {
  service: 'signals' | 'aggregator';
  /** Who files the request (recorded): the token subject, the API key id. */
  filedBy(res: Response): string;
  /** Whose allowance of 5 per hour the request takes. */
  submitter(req: Request, res: Response, request: SupportRequest): string;
}

/**
 * The handler (see the module comment), its body parser first: attachments need more than
 * HTTP_BODY_LIMIT (SUPPORT_BODY_LIMIT_BYTES: 10 MiB of attachments in base64, plus the text), so
 * the path is one of `createServiceApp`'s `ownBodyPaths` and the body is read only once the
 * service's authentication, mounted before, has let the caller in.
 */
export function supportHandler(ctx: PlatformContext, options: SupportRouteOptions): RequestHandler[] {
  const limiter = createSupportRateLimiter(ctx.pool);
  return [...routeBody(express.json({ limit: SUPPORT_BODY_LIMIT_BYTES, type: JSON_TYPES })), async (req, res) => {
    const request = parse(supportRequestSchema, req.body);
    try {
      const attachments = decodeAttachments(request.attachments);
      await consumeSupportAllowance(limiter, options.submitter(req, res, request));
      const { reference } = await fileSupportRequest(ctx, { service: options.service, filedBy: options.filedBy(res), request, attachments });
      res.status(200).json({ ok: true, reference });
    } catch (err) {
      if (err instanceof SupportRequestError) {
        throw new HttpError(err.status, err.message, {
          code: err.status === 429 ? 'rate_limited' : err.status === 413 ? 'payload_too_large' : 'invalid_request',
          fields: err.field ? { [err.field]: [err.message] } : undefined,
          headers: err.retryAfterSeconds ? { 'Retry-After': String(err.retryAfterSeconds) } : undefined,
        });
      }
      throw err;
    }
  }];
}

/** The doc of a support route mounted at `path` (same request schema as the handler). */
export function supportRouteDoc(path: string, security: RouteSecurity, example?: unknown): RouteDoc {
  return {
    method: 'POST', path, summary: 'File a support request (e-mailed to support by a task)', tags: ['support'], security,
    description: 'At most 5 requests an hour per submitter. Attachments are base64 in `data` (10 MiB in all).',
    body: { schema: supportRequestSchema, ...(example !== undefined ? { example } : {}) },
    responses: { 200: { description: 'Filed', schema: z.object({ ok: z.literal(true), reference: z.string().meta({ description: 'quote it to support' }) }) } },
    errors: { 413: 'Attachments too large', 429: 'Too many support requests from this submitter (Retry-After)' },
  };
}
