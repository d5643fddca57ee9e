/**
 * Rendering of the operator console: Eta templates (api/console/views, HTML-escaped by default)
 * and the message catalogue (api/console/i18n/{en,hi}.json). The language comes from the
 * `ldp_lang` cookie (the switch in the page header) or else the browser's Accept-Language.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Eta } from 'eta';
import type { Request, RequestHandler, Response } from 'express';
import { HttpError } from '../http/errors.ts';
import type { Caller } from '../http/auth.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const LANGUAGES = ['en', 'hi'] as const;
export type Language = (typeof LANGUAGES)[number];
export const LANG_COOKIE = 'ldp_lang';

type Catalogue = Record<string, string>;
const catalogues: Record<Language, Catalogue> = {
  en: JSON.parse(readFileSync(path.join(HERE, 'i18n', 'en.json'), 'utf8')) as Catalogue,
  hi: JSON.parse(readFileSync(path.join(HERE, 'i18n', 'hi.json'), 'utf8')) as Catalogue,
};

const eta = new Eta({ views: path.join(HERE, 'views'), cache: true, autoTrim: [false, 'nl'] });

/** The language of `req`: the cookie's when set to a known one, else the best of Accept-Language, else English. */
export function languageOf(req: Request): Language {
  const chosen = (req.cookies as Record<string, string> | undefined)?.[LANG_COOKIE];
  if ((LANGUAGES as readonly string[]).includes(chosen ?? '')) return chosen as Language;
  return (req.acceptsLanguages(...LANGUAGES) || 'en') as Language;
}

/**
 * The translator of `lang`: `t('uploads.title', {n: 3})` gives the catalogue text with `{n}`
 * replaced; a key missing in Hindi falls back to English, a key missing everywhere shows itself.
 */
export function translator(lang: Language): (key: string, vars?: Record<string, string | number>) => string {
  return (key, vars = {}) => (catalogues[lang][key] ?? catalogues.en[key] ?? key)
    .replace(/\{(\w+)\}/g, (whole, name: string) => (name in vars ? String(vars[name]) : whole));
}

/** Both catalogues' keys, for the test that keeps them in step. */
export function catalogueKeys(): Record<Language, string[]> {
  return { en: Object.keys(catalogues.en), hi: Object.keys(catalogues.hi) };
}

/** Renders view `name` inside the layout with the request's language, caller and CSRF token, and sends it with `status`. */
export function renderPage(req: Request, res: Response, name: string, data: Record<string, unknown>, status = 200): void {
  const lang = languageOf(req);
  const caller = res.locals.caller as Caller | undefined;
  const it = {
    ...data, lang, t: translator(lang), caller, csrf: res.locals.csrfToken as string,
    can: (...roles: string[]) => Boolean(caller?.roles.some((r) => roles.includes(r))),
    path: req.originalUrl,
  };
  res.status(status).type('html').set('Cache-Control', 'no-store').send(eta.render(name, it));
}

/** 403 page unless the signed-in caller has one of `roles` (the API's rule for the same action). */
export function consoleRole(...roles: string[]): RequestHandler {
  return (req, res, next) => {
    if (!res.locals.caller?.roles.some((r: string) => roles.includes(r))) {
      throw new HttpError(403, translator(languageOf(req))('error.role', { roles: roles.join(', ') }), { code: 'insufficient_role' });
    }
    next();
  };
}

