/**
 * `ldp console --aggregator ID [--role admin|operator|viewer] [--ttl 10m] [--url URL]`: prints a
 * short-lived, single-use sign-in link for the operator console (api/console/routes.ts): a token
 * of the built-in issuer with the aggregator's claims for the purpose `console-login` only
 * (`issueForPurpose`: no bearer route accepts it), exchanged once at /console/login for a session.
 * The base URL is the one `ldp upload` uses (--url, AGGREGATOR_URL, else the running instance of
 * DATA_DIR).
 */
import { findAggregator } from '../../lib/aggregator/aggregators.ts';
import { CONSOLE_LINK_PURPOSE } from '../../lib/aggregator/console/sessions.ts';
import { ROLES } from '../../lib/platform/tokens.ts';
import { CliError, withPlatformContext } from '../command-context.ts';
import { parseDuration } from './aggregator.ts';
import { aggregatorUrl } from './upload.ts';

/** The longest a console link may live: it is a bearer credential until used. */
const MAX_LINK_SECONDS = 3600;

export async function consoleLink(opts: { aggregator: string; role: string; ttl: string; url?: string }): Promise<void> {
  if (!(ROLES as readonly string[]).includes(opts.role)) throw new CliError(`--role must be one of ${ROLES.join(', ')}`);
  const ttl = parseDuration(opts.ttl);
  if (ttl > MAX_LINK_SECONDS) throw new CliError('--ttl must be at most 1h: a console link is for signing in now');
  const base = await aggregatorUrl(opts);
  const token = await withPlatformContext(async (ctx) => {
    const agg = await findAggregator(ctx.pool, opts.aggregator);
    if (!agg) throw new CliError(`No aggregator with id ${opts.aggregator}`);
    return ctx.tokens.issueForPurpose(CONSOLE_LINK_PURPOSE, `console:${agg.aggregator_id}:${opts.role}`, ttl, {
      aggregator_id: agg.aggregator_id, org_id: agg.org_id, aggregator_type: agg.types, roles: [opts.role],
    });
  });
  process.stdout.write(`${new URL(`/console/login?token=${encodeURIComponent(token)}`, base).href}\n`);
}
