/**
 * The public registration form page of a registration link (`public_url`), server-rendered:
 *
 * - `GET  /r/{orgSlug}/{slug}`         an accessible HTML form generated from the participant schema
 *   of the link's domain (labels, required marks, dropdowns for closed sets, multi-selects for
 *   lists of closed sets, a phone field, consent checkboxes)
 * - `POST /r/{orgSlug}/{slug}`         the form's url-encoded submission, registered by the same
 *   code as the public API (rate limit included); answers a page with the outcome: registered,
 *   already registered (409), field errors next to their fields (400), rate-limited (429)
 * - `GET  /r/{orgSlug}/{slug}/qr.svg`  a QR code of the page's public URL (qrcode library, SVG)
 *
 * Plain HTML forms: works without JavaScript. Unknown, draft or retired links are 404 pages,
 * expired ones 410.
 */
import express, { Router, type Request, type Response } from 'express';
import QRCode from 'qrcode';
import type { FieldError } from '../../lib/aggregator/bulk/row-coercion.ts';
import { formPath, type LinkRow } from '../../lib/aggregator/links.ts';
import { CONSENT_FIELDS, consentTexts, domainForMode, type SubmissionResult } from '../../lib/aggregator/public-registration.ts';
import type { FieldInfo } from '../../lib/network/config.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { HttpError } from '../http/errors.ts';
import { z } from 'zod';
import type { RouteDoc } from '../http/route-doc.ts';
import { limitAndSubmit, openPublicLink, publicLinkParams, registrationRateLimit } from './public-registrations.ts';

type FormValues = Record<string, string | string[] | undefined>;

/** Escapes text for HTML element content and quoted attribute values. */
export function escapeHtml(value: unknown): string {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const STYLE = `body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;line-height:1.5;color:#1a1a1a}
label{display:block;font-weight:600;margin-top:1rem}.hint{font-weight:400;color:#555;font-size:.9rem;display:block}
input,select,textarea{font:inherit;width:100%;box-sizing:border-box;padding:.4rem;border:1px solid #767676;border-radius:4px}
input[type=checkbox]{width:auto;margin-right:.5rem}.check{display:flex;align-items:flex-start;font-weight:400}
.req{color:#b00020}.error{color:#b00020;margin:.2rem 0}[aria-invalid=true]{border-color:#b00020;border-width:2px}
.summary{border:2px solid #b00020;padding:.5rem 1rem}.ok{border:2px solid #1b5e20;padding:.5rem 1rem}
button{font:inherit;margin-top:1.5rem;padding:.6rem 1.4rem;background:#0b57d0;color:#fff;border:0;border-radius:4px;cursor:pointer}
.qr{margin-top:2rem;color:#555;font-size:.9rem}.qr img{width:8rem;height:8rem;display:block}`;

/** A complete HTML page with the shared style. */
export function htmlPage(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title><style>${STYLE}</style></head>
<body><main>
${body}
</main></body>
</html>`;
}

const arrayOfClosedSet = (f: FieldInfo) => f.kind === 'array' && f.enum !== undefined;
const listOfText = (f: FieldInfo) => f.kind === 'array' && f.enum === undefined;

/** One form control with its label, hint and error, named by the field. */
function control(f: FieldInfo, value: string | string[] | undefined, errors: string[] | undefined): string {
  const id = `f-${f.name}`;
  const describedBy = [f.description || listOfText(f) ? `${id}-hint` : '', errors ? `${id}-error` : ''].filter(Boolean).join(' ');
  const attrs = `id="${id}" name="${escapeHtml(f.name)}"${f.required ? ' aria-required="true"' : ''}${errors ? ' aria-invalid="true"' : ''}${describedBy ? ` aria-describedby="${describedBy}"` : ''}`;
  const values = Array.isArray(value) ? value : value === undefined ? [] : [value];
  const hintText = [f.description, listOfText(f) ? 'One per line.' : '', arrayOfClosedSet(f) ? 'Choose one or more.' : ''].filter(Boolean).join(' ');
  let input: string;
  if (arrayOfClosedSet(f)) {
    input = `<select ${attrs} multiple size="${Math.min(6, f.enum!.length)}">${f.enum!.map((o) => `<option${values.includes(String(o)) ? ' selected' : ''}>${escapeHtml(o)}</option>`).join('')}</select>`;
  } else if (f.enum) {
    input = `<select ${attrs}><option value="">— choose —</option>${f.enum.map((o) => `<option value="${escapeHtml(o)}"${values[0] === String(o) ? ' selected' : ''}>${escapeHtml(String(o).replaceAll('_', ' '))}</option>`).join('')}</select>`;
  } else if (listOfText(f)) {
    input = `<textarea ${attrs} rows="3">${escapeHtml(values.join('\n'))}</textarea>`;
  } else if (f.kind === 'boolean') {
    input = `<select ${attrs}><option value="">— choose —</option><option value="yes"${values[0] === 'yes' ? ' selected' : ''}>Yes</option><option value="no"${values[0] === 'no' ? ' selected' : ''}>No</option></select>`;
  } else {
    const type = f.identity === 'phone' ? 'tel' : f.identity === 'email' ? 'email' : f.kind === 'string' ? 'text' : 'number';
    const autocomplete = f.identity === 'phone' ? 'tel' : f.identity === 'email' ? 'email' : f.identity === 'name' ? 'name' : '';
    const range = type === 'number' ? `${f.minimum !== undefined ? ` min="${f.minimum}"` : ''}${f.maximum !== undefined ? ` max="${f.maximum}"` : ''} step="${f.kind === 'integer' ? 1 : 'any'}"` : '';
    input = `<input ${attrs} type="${type}"${autocomplete ? ` autocomplete="${autocomplete}"` : ''}${range} value="${escapeHtml(values[0] ?? '')}">`;
  }
  return `<div class="field">
<label for="${id}">${escapeHtml(f.label)}${f.required ? ' <span class="req" aria-hidden="true">*</span><span class="visually-hidden"> (required)</span>' : ''}${hintText ? `<span class="hint" id="${id}-hint">${escapeHtml(hintText)}</span>` : ''}</label>
${errors ? `<p class="error" id="${id}-error">${errors.map(escapeHtml).join(' ')}</p>` : ''}${input}
</div>`;
}

/** The form page of `link`, with `values` filled in and `errors` beside their fields. */
export function formPage(ctx: PlatformContext, link: LinkRow, values: FormValues = {}, errors: FieldError[] = []): string {
  const domain = domainForMode(ctx.network.domains.get(link.domain)!, link.registration_mode);
  const byField = new Map<string, string[]>();
  for (const e of errors) byField.set(e.field, [...(byField.get(e.field) ?? []), e.message]);
  const consentRequired = link.registration_mode === 'account_only';
  const texts = consentTexts(ctx.network, link.org_name);
  const path = formPath(link.org_slug, link.slug);
  const known = new Set([...domain.fields.map((f) => f.name), ...CONSENT_FIELDS]);
  const summary = errors.length ? `<div class="summary" role="alert" tabindex="-1" id="problems"><h2>Please correct ${errors.length === 1 ? 'this problem' : `these ${errors.length} problems`}</h2><ul>${
    errors.map((e) => `<li>${known.has(e.field) ? `<a href="#f-${escapeHtml(e.field)}">${escapeHtml(e.message)}</a>` : escapeHtml(e.message)}</li>`).join('')}</ul></div>` : '';
  const consent = CONSENT_FIELDS.map((name) => {
    const id = `f-${name}`;
    const err = byField.get(name);
    return `<div class="field">${err ? `<p class="error" id="${id}-error">${err.map(escapeHtml).join(' ')}</p>` : ''}<label class="check" for="${id}"><input type="checkbox" id="${id}" name="${name}" value="true"${values[name] ? ' checked' : ''}${consentRequired ? ' aria-required="true"' : ''}${err ? ` aria-invalid="true" aria-describedby="${id}-error"` : ''}>${escapeHtml(texts[name])}${consentRequired ? ' <span class="req" aria-hidden="true">*</span>' : ''}</label></div>`;
  }).join('\n');
  return htmlPage(`Register with ${link.org_name}`, `<h1>Register with ${escapeHtml(link.org_name)}</h1>
<p>${escapeHtml(domain.label)} registration on the ${escapeHtml(ctx.network.name)}. Fields marked <span class="req">*</span> are required.</p>
${summary}
<form method="post" action="${escapeHtml(path)}" novalidate>
${domain.fields.map((f) => control(f, values[f.name], byField.get(f.name))).join('\n')}
<fieldset><legend>Consent</legend>
${consent}
</fieldset>
<button type="submit">Register</button>
</form>
<div class="qr"><img src="${escapeHtml(path)}/qr.svg" alt="QR code of this page's address, to share it">Share this form: scan the code.</div>
<style>.visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}</style>`);
}

/** The page shown for a submission's outcome. */
function outcomePage(link: LinkRow, result: Exclude<SubmissionResult, { status: 400 }>): string {
  const body = result.body as { message?: string; submission_id?: string };
  return result.status === 201
    ? htmlPage('Registered', `<div class="ok" role="status"><h1>You are registered</h1><p>Thank you. ${escapeHtml(link.org_name)} has received your registration.</p><p>Reference: <code>${escapeHtml(body.submission_id)}</code></p></div>`)
    : htmlPage('Already registered', `<div class="summary" role="status"><h1>Already registered</h1><p>${escapeHtml(body.message)}</p></div>`);
}

/** Turns the url-encoded form body into the public registration's body (lists from lines and multi-selects). */
function submissionOf(ctx: PlatformContext, link: LinkRow, form: Record<string, unknown>): Record<string, unknown> {
  const domain = domainForMode(ctx.network.domains.get(link.domain)!, link.registration_mode);
  const body: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries(form)) {
    const field = domain.fields.find((f) => f.name === key);
    const value = Array.isArray(raw) ? raw.map(String) : String(raw ?? '');
    if (field && listOfText(field)) body[key] = (Array.isArray(value) ? value : [value]).flatMap((v) => v.split(/\r?\n/)).map((v) => v.trim()).filter(Boolean);
    else if (field?.kind === 'array') body[key] = Array.isArray(value) ? value : [value];
    else if (value !== '') body[key] = value;
  }
  return body;
}

/** The form-page routes (mount at the root of the aggregator service, no credential). */
export function registrationFormRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const limit = registrationRateLimit(ctx);
  const path = '/r/:orgSlug/:slug';

  /** Renders a link problem (404, 410, 429) as an HTML page instead of a JSON error. */
  const problemPage = (res: Response, err: unknown) => {
    if (!(err instanceof HttpError) || ![404, 410, 429].includes(err.status)) throw err;
    const title = { 404: 'Registration link not found', 410: 'Registration closed', 429: 'Too many registrations' }[err.status as 404 | 410 | 429];
    const text = { 404: 'This registration link does not exist or is not open. Check the address with whoever shared it.', 410: 'This registration link has expired.', 429: err.message }[err.status as 404 | 410 | 429];
    res.status(err.status).set(err.headers ?? {}).type('html').send(htmlPage(title, `<h1>${escapeHtml(title)}</h1><p role="alert">${escapeHtml(text)}</p>`));
  };
  const linkOf = (req: Request) => openPublicLink(ctx, String(req.params.orgSlug), String(req.params.slug));

  router.get(path, async (req, res) => {
    try {
      res.type('html').send(formPage(ctx, await linkOf(req)));
    } catch (err) {
      problemPage(res, err);
    }
  });

  router.get(`${path}/qr.svg`, async (req, res) => {
    try {
      const link = await linkOf(req);
      const url = new URL(formPath(link.org_slug, link.slug), ctx.urls.aggregator).href;
      res.type('image/svg+xml').set('cache-control', 'public, max-age=3600').send(await QRCode.toString(url, { type: 'svg', margin: 2, errorCorrectionLevel: 'M' }));
    } catch (err) {
      problemPage(res, err);
    }
  });

  router.post(path, express.urlencoded({ extended: false, limit: ctx.config.HTTP_BODY_LIMIT, parameterLimit: 200 }), async (req, res) => {
    try {
      const link = await linkOf(req);
      const form = (req.body ?? {}) as Record<string, unknown>;
      const result = await limitAndSubmit(ctx, limit, req, link, submissionOf(ctx, link, form));
      if (result.status === 400) {
        res.status(400).type('html').send(formPage(ctx, link, form as FormValues, result.errors));
        return;
      }
      res.status(result.status).type('html').send(outcomePage(link, result));
    } catch (err) {
      problemPage(res, err);
    }
  });

  return router;
}

/** An HTML page answer. */
export const htmlDoc = (description: string) => ({ description, content: [{ type: 'text/html', schema: z.string() }] });
const linkPages = { 404: htmlDoc('No open link (unknown, draft or retired)'), 410: htmlDoc('The link has expired') };

/** Docs of `registrationFormRoutes` (public pages, no credential). */
export const registrationFormRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/r/:orgSlug/:slug', summary: 'The registration form page of a link', tags: ['public registration'], security: 'none',
    params: publicLinkParams, responses: { 200: htmlDoc('The form'), ...linkPages },
  },
  {
    method: 'GET', path: '/r/:orgSlug/:slug/qr.svg', summary: 'A QR code of the form page\'s address', tags: ['public registration'], security: 'none',
    params: publicLinkParams,
    responses: { 200: { description: 'The QR code', content: [{ type: 'image/svg+xml', schema: z.string() }] }, ...linkPages },
  },
  {
    method: 'POST', path: '/r/:orgSlug/:slug', summary: 'Submit the registration form', tags: ['public registration'], security: 'none',
    description: 'The form\'s url-encoded fields, registered as by the public API (fields of the link\'s participant schema, validated at runtime).',
    params: publicLinkParams,
    body: { schema: z.record(z.string(), z.union([z.string(), z.array(z.string())])), contentType: 'application/x-www-form-urlencoded' },
    responses: {
      201: htmlDoc('Registered'), 400: htmlDoc('The form again, each problem beside its field'), 409: htmlDoc('Already registered'),
      429: htmlDoc('Too many registrations from this address (Retry-After)'), ...linkPages,
    },
  },
];
