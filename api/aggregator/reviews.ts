/**
 * The review pages of the signed links e-mailed to the network admin — and, for an aggregator
 * joining an existing organisation, to that organisation's contact (`join` reviews)
 * (lib/aggregator/review-links.ts):
 *
 * - `GET  /review/{token}`        shows the registration and a confirm form (a GET never decides:
 *   mail scanners open links)
 * - `POST /review/{token}`        decides (approve, or reject with `reason`): single use by
 *   compare-and-set, together with the decision in one transaction
 * - `POST /review/{token}/renew`  for an expired link of a still-pending registration: e-mails a
 *   fresh review (new links, 7 more days)
 *
 * HTML pages; statuses 400 (tampered link; reject without reason), 409 (used, or no longer pending),
 * 410 (expired), 404 (registration gone).
 */
import express, { Router, type Response } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { decideOrganisation, organisationForReview, requestReview } from '../../lib/aggregator/organisations.ts';
import { aggregatorForReview, decideAggregator, decideJoin, RegistrationConflict } from '../../lib/aggregator/registrations.ts';
import {
  getReview, ReviewLinkError, reviewLinkKey, useReview, verifyReviewToken, type ReviewClaims,
} from '../../lib/aggregator/review-links.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { z } from 'zod';
import type { RouteDoc } from '../http/route-doc.ts';
import { escapeHtml, htmlDoc, htmlPage } from './registration-form.ts';

/** A page answer that ends the request. */
class PageAnswer extends Error {
  constructor(readonly status: number, readonly title: string, readonly html: string) {
    super(title);
  }
}

export function reviewRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const form = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 10 });

  const send = (res: Response, err: unknown) => {
    if (!(err instanceof PageAnswer)) throw err;
    res.status(err.status).type('html').set('cache-control', 'no-store').set('referrer-policy', 'no-referrer')
      .send(htmlPage(err.title, `<h1>${escapeHtml(err.title)}</h1>${err.html}`));
  };

  /** The token's claims; expired links answer 410 with a renewal form, tampered ones 400. */
  const claimsOf = async (token: string, allowExpired = false): Promise<ReviewClaims> => {
    try {
      return await verifyReviewToken(await reviewLinkKey(ctx.config), token);
    } catch (err) {
      if (!(err instanceof ReviewLinkError)) throw err;
      if (err.reason === 'expired' && err.claims) {
        if (allowExpired) return err.claims;
        throw new PageAnswer(410, 'Review link expired', `<p role="alert">${escapeHtml(err.message)}</p>
<form method="post" action="/review/${escapeHtml(token)}/renew"><button type="submit">E-mail me a fresh review link</button></form>`);
      }
      throw new PageAnswer(400, 'Invalid review link', `<p role="alert">${escapeHtml(err.message)}</p>`);
    }
  };

  const subjectOf = async (claims: ReviewClaims) => {
    const subject = claims.kind === 'organisation'
      ? await organisationForReview(ctx.pool, ctx.pii, claims.subjectId)
      : await aggregatorForReview(ctx.pool, ctx.pii, claims.subjectId);
    if (!subject) throw new PageAnswer(404, 'Registration not found', '<p role="alert">The registration of this link no longer exists.</p>');
    return subject;
  };

  const usedPage = (used: { used_intent: string | null; used_at: Date | null }) => new PageAnswer(409, 'Review link already used',
    `<p role="alert">This link was already used: the registration was ${used.used_intent === 'approve' ? 'approved' : 'rejected'} at ${escapeHtml(used.used_at?.toISOString())}.</p>`);

  router.get('/review/:token', async (req, res) => {
    try {
      const token = String(req.params.token);
      const claims = await claimsOf(token);
      const review = await getReview(ctx.pool, claims.reviewId);
      if (review?.used_at) throw usedPage(review);
      const s = await subjectOf(claims);
      const person = 'owner' in s ? s.owner : s.contact;
      const name = 'display_name' in s ? s.display_name : `${s.name} (organisation ${s.org_name})`;
      const approve = claims.intent === 'approve';
      const what = claims.kind === 'join' ? `aggregator joining your organisation ${'org_name' in s ? s.org_name : ''}` : `${claims.kind} registration`;
      res.type('html').set('cache-control', 'no-store').set('referrer-policy', 'no-referrer').send(htmlPage(`${approve ? 'Approve' : 'Reject'} ${name}`, `
<h1>${approve ? 'Approve' : 'Reject'} the ${escapeHtml(what)}</h1>
<dl><dt>Name</dt><dd>${escapeHtml(name)}</dd><dt>Status</dt><dd>${escapeHtml(s.status)}</dd>
${person ? `<dt>Contact</dt><dd>${escapeHtml(person.name)} &lt;${escapeHtml(person.email)}&gt;, ${escapeHtml(person.phone)}</dd>` : ''}
<dt>Registered</dt><dd>${escapeHtml(s.created_at.toISOString())}</dd>
<dt>Details</dt><dd><pre>${escapeHtml(JSON.stringify(s.registration ?? {}, null, 2))}</pre></dd></dl>
<form method="post" action="/review/${escapeHtml(token)}">
${approve ? '' : '<label for="reason">Reason (sent to the registrant) <span class="req">*</span></label><textarea id="reason" name="reason" rows="3" aria-required="true"></textarea>'}
<button type="submit">${approve ? 'Approve' : 'Reject'}</button>
</form>`));
    } catch (err) {
      send(res, err);
    }
  });

  router.post('/review/:token', form, async (req, res) => {
    try {
      const claims = await claimsOf(String(req.params.token));
      const reason = typeof req.body?.reason === 'string' ? req.body.reason.trim().slice(0, 2000) : '';
      if (claims.intent === 'reject' && !reason) throw new PageAnswer(400, 'Reason required', '<p role="alert">Give the reason for rejecting: it is sent to the registrant. Go back and fill it in.</p>');
      await withTransaction(ctx.pool, async (client) => {
        if (!await useReview(client, claims.reviewId, claims.intent)) {
          const review = await getReview(client, claims.reviewId);
          if (review?.used_at) throw usedPage(review);
          throw new PageAnswer(410, 'Review link expired', '<p role="alert">This review link has expired.</p>');
        }
        let decided;
        try {
          decided = claims.kind === 'organisation' ? await decideOrganisation(client, claims.subjectId, claims.intent, reason || null)
            : claims.kind === 'join' ? await decideJoin(client, claims.subjectId, claims.intent, reason || null)
              : await decideAggregator(client, claims.subjectId, claims.intent, reason || null);
        } catch (err) {
          if (err instanceof RegistrationConflict) throw new PageAnswer(409, 'Awaiting the organisation', `<p role="alert">${escapeHtml(err.message)}.</p>`);
          throw err;
        }
        if (!decided) throw new PageAnswer(409, 'Already decided', '<p role="alert">This registration is no longer pending (decided through another link or the command line).</p>');
      });
      const done = claims.intent === 'approve' ? 'approved' : 'rejected';
      // The organisation's approval of a join is not the last word: the network admin reviews it next.
      const next = claims.kind === 'join' && claims.intent === 'approve' ? 'The network admin reviews it next; the registrant is told by e-mail once decided.' : 'The registrant is told by e-mail.';
      res.type('html').set('cache-control', 'no-store').send(htmlPage(`Registration ${done}`,
        `<div class="ok" role="status"><h1>Registration ${done}</h1><p>${next}</p></div>`));
    } catch (err) {
      send(res, err);
    }
  });

  router.post('/review/:token/renew', async (req, res) => {
    try {
      const claims = await claimsOf(String(req.params.token), true);
      const review = await getReview(ctx.pool, claims.reviewId);
      if (review?.used_at) throw usedPage(review);
      const s = await subjectOf(claims);
      if (s.status !== 'pending' || (claims.kind === 'join' && 'org_approved_at' in s && s.org_approved_at)) {
        throw new PageAnswer(409, 'Already decided', `<p role="alert">This registration is ${escapeHtml(s.status)}${s.status === 'pending' ? ', approved by its organisation' : ''}.</p>`);
      }
      await withTransaction(ctx.pool, (client) => requestReview(client, claims.kind, claims.subjectId));
      const to = claims.kind === 'join' ? 'the organisation\'s contact' : ctx.config.NETWORK_ADMIN_EMAIL;
      res.type('html').send(htmlPage('Fresh review link sent', `<div class="ok" role="status"><h1>Fresh review link sent</h1><p>A new review e-mail is on its way to ${escapeHtml(to)}.</p></div>`));
    } catch (err) {
      send(res, err);
    }
  });

  return router;
}

/** Path parameter of a review link (a signed token, verified by the handler). */
export const reviewTokenParams = z.object({ token: z.string().meta({ description: 'the signed review token of the e-mailed link' }) });
const reviewErrors = { 400: htmlDoc('Tampered link'), 404: htmlDoc('The registration no longer exists'), 409: htmlDoc('Link already used, registration no longer pending, or still awaiting its organisation\'s approval'), 410: htmlDoc('Link expired (with a renewal form)') };

/** Docs of `reviewRoutes` (HTML pages; the signed token is the credential). */
export const reviewRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/review/:token', summary: 'Review page of a registration (never decides)', tags: ['review'], security: 'none',
    params: reviewTokenParams, responses: { 200: htmlDoc('The registration and a confirm form'), ...reviewErrors },
  },
  {
    method: 'POST', path: '/review/:token', summary: 'Approve or reject a registration (single use)', tags: ['review'], security: 'none',
    params: reviewTokenParams, body: { schema: z.object({ reason: z.string().optional().meta({ description: 'required to reject' }) }), contentType: 'application/x-www-form-urlencoded', required: false },
    responses: { 200: htmlDoc('Decided'), ...reviewErrors, 400: htmlDoc('Tampered link, or a rejection without reason') },
  },
  {
    method: 'POST', path: '/review/:token/renew', summary: 'E-mail a fresh review link for an expired one', tags: ['review'], security: 'none',
    params: reviewTokenParams, responses: { 200: htmlDoc('Fresh review link sent'), ...reviewErrors },
  },
];
