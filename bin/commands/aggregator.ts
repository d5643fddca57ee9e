/** `ldp aggregator create|approve` and `ldp token`: aggregators, their approval and their bearer tokens (built-in issuer). */
import { createAggregator, findAggregator } from '../../lib/aggregator/aggregators.ts';
import { decideAggregator, RegistrationConflict } from '../../lib/aggregator/registrations.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { ROLES } from '../../lib/platform/tokens.ts';
import { CliError, withPlatformContext } from '../command-context.ts';

const list = (value: string) => value.split(',').map((s) => s.trim()).filter(Boolean);

/** Creates an approved aggregator and its organisation; prints `{aggregator_id, org_id, org_slug}`. */
export async function aggregatorCreate(opts: { name: string; types: string; orgSlug?: string }): Promise<void> {
  const record = await withPlatformContext((ctx) => withTransaction(ctx.pool, (client) =>
    createAggregator(client, ctx.network, { name: opts.name, types: list(opts.types), orgSlug: opts.orgSlug })))
    .catch((err: Error) => {
      throw err.message.startsWith('Unknown aggregator type') ? new CliError(err.message) : err;
    });
  process.stdout.write(`${JSON.stringify({ aggregator_id: record.aggregator_id, org_id: record.org_id, org_slug: record.org_slug })}\n`);
}

/** Parses durations such as `90s`, `30m`, `1h`, `7d` into seconds. @throws CliError */
export function parseDuration(value: string): number {
  const match = /^(\d+)\s*(s|m|h|d)?$/.exec(value.trim());
  if (!match || Number(match[1]) === 0) throw new CliError(`--ttl must be a duration such as 30m, 1h or 7d, not ${value}`);
  return Number(match[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[(match[2] ?? 's') as 's' | 'm' | 'h' | 'd'];
}

/**
 * Mints a bearer token and prints it alone: for an aggregator (`--aggregator ID`), or a person's
 * (user) token with subject `--user SUB` (e.g. to register an aggregator).
 */
export async function token(opts: { aggregator?: string; user?: string; ttl: string; roles: string }): Promise<void> {
  const ttl = parseDuration(opts.ttl);
  if (Boolean(opts.aggregator) === Boolean(opts.user)) throw new CliError('Give either --aggregator ID or --user SUBJECT');
  if (opts.user) {
    const subject = opts.user;
    process.stdout.write(`${await withPlatformContext((ctx) => ctx.tokens.issueUser(subject, ttl))}\n`);
    return;
  }
  const aggregatorId = opts.aggregator!;
  const roles = list(opts.roles);
  const badRole = roles.find((r) => !(ROLES as readonly string[]).includes(r));
  if (badRole || roles.length === 0) throw new CliError(`--roles must be a comma-separated subset of ${ROLES.join(', ')}`);
  const jwt = await withPlatformContext(async (ctx) => {
    const agg = await findAggregator(ctx.pool, aggregatorId);
    if (!agg) throw new CliError(`No aggregator with id ${aggregatorId}`);
    return ctx.tokens.issue({
      sub: `aggregator:${agg.aggregator_id}`, aggregator_id: agg.aggregator_id, org_id: agg.org_id,
      aggregator_type: agg.types, roles,
    }, ttl);
  });
  process.stdout.write(`${jwt}\n`);
}

/**
 * Approves a pending aggregator registration (as its signed review link would): aggregator and its
 * own pending organisation approved, login enabled, organisation push and e-mail enqueued.
 * Prints `{aggregator_id, status}`. @throws CliError when the aggregator is unknown, not pending, or
 * joins an existing organisation that has not approved it yet.
 */
export async function aggregatorApprove(aggregatorId: string): Promise<void> {
  await withPlatformContext(async (ctx) => {
    let decided;
    try {
      decided = await withTransaction(ctx.pool, (client) => decideAggregator(client, aggregatorId, 'approve', null));
    } catch (err) {
      // It joins an organisation that has not approved it: the network admin comes second.
      if (err instanceof RegistrationConflict) throw new CliError(err.message);
      throw err;
    }
    if (!decided) {
      const agg = await findAggregator(ctx.pool, aggregatorId);
      throw new CliError(agg ? `Aggregator ${aggregatorId} is ${agg.status}, not pending` : `No aggregator with id ${aggregatorId}`);
    }
  });
  process.stdout.write(`${JSON.stringify({ aggregator_id: aggregatorId, status: 'approved' })}\n`);
}
