/**
 * Aggregator registration (spec "POST /v1/aggregator-registrations/create"), reached with a bearer
 * token of a non-aggregator identity (a user token of the built-in issuer or of the OIDC issuer):
 *
 * - `POST /v1/aggregator-registrations/create` body per the network's aggregator registration
 *   schema v1 → 201 `{aggregator_id, org_slug, status: pending, message}`; an aggregator's token,
 *   or an identity that already registered → 409; `org_id` unknown → 404, not approved → 409;
 *   with `org_id`, that organisation approves first (a review link e-mailed to its contact), then
 *   the network admin
 * - `POST /v1/aggregator-registrations/token` the login once approved: exchanges the registrant's
 *   user token for an aggregator token (1 h, role admin); 403 while pending or rejected; an
 *   aggregator's token → 403 `person_token_required` (else the token handed out here, which names
 *   the same issuer and subject, would buy the next one forever)
 *
 * Errors in shape C.
 */
import { Router, type Request } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { registerAggregator, RegistrationConflict, validateAggregatorRegistration } from '../../lib/aggregator/registrations.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { TokenError, type VerifiedToken } from '../../lib/platform/tokens.ts';
import { z } from 'zod';
import type { Network } from '../../lib/network/config.ts';
import { collectFieldErrors, HttpError } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';

/** Lifetime of the aggregator token handed out by the login exchange. */
const AGGREGATOR_TOKEN_TTL_SECONDS = 3600;

export function aggregatorRegistrationRoutes(ctx: PlatformContext): Router {
  const router = Router();

  const identityOf = async (req: Request): Promise<VerifiedToken> => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(req.header('authorization') ?? '');
    if (!match) throw new HttpError(401, 'Missing bearer token: register with the token of your identity provider login', { code: 'missing_token', headers: { 'WWW-Authenticate': 'Bearer realm="ldp"' } });
    try {
      return await ctx.tokens.verifyAny(match[1]);
    } catch (err) {
      if (err instanceof TokenError) throw new HttpError(401, `Invalid bearer token: ${err.message}`, { code: 'invalid_token', headers: { 'WWW-Authenticate': 'Bearer realm="ldp", error="invalid_token"' } });
      throw err;
    }
  };

  router.post('/aggregator-registrations/create', async (req, res) => {
    const identity = await identityOf(req);
    if (identity.aggregator) throw new HttpError(409, `This token is already aggregator ${identity.aggregator.aggregator_id}'s; register with a person's token`, { code: 'already_aggregator' });
    const checked = validateAggregatorRegistration(ctx.network, req.body);
    if (!checked.ok) {
      const fields = collectFieldErrors(checked.problems);
      throw new HttpError(400, `Invalid aggregator registration (schema version ${ctx.network.aggregatorRegistration?.version ?? 'none'}): ${checked.problems.map((p) => p.message).join('; ')}`, { fields });
    }
    if (checked.value.invite !== undefined) throw new HttpError(422, 'invite: invitations are not available yet; register without one or with org_id', { code: 'invites_unsupported', fields: { invite: ['not supported yet'] } });
    let created;
    try {
      created = await withTransaction(ctx.pool, (client) => registerAggregator(client, ctx.pii, { issuer: identity.issuer, subject: identity.sub }, checked.value));
    } catch (err) {
      if (err instanceof RegistrationConflict) {
        throw new HttpError(err.code === 'org_not_found' ? 404 : 409, err.message, { code: err.code, ...(err.code === 'already_registered' ? {} : { fields: { org_id: [err.message] } }) });
      }
      throw err;
    }
    res.status(201).json({
      aggregator_id: created.aggregatorId, org_slug: created.orgSlug, status: created.status,
      message: created.awaits === 'organisation'
        ? `Registration received and waiting for the approval of organisation ${created.orgSlug}, then the network admin’s; login is enabled once approved.`
        : 'Registration received and waiting for the network admin’s approval; login is enabled once approved.',
    });
  });

  router.post('/aggregator-registrations/token', async (req, res) => {
    const identity = await identityOf(req);
    // The login is the person's: a token with aggregator claims is what this route hands out, not what it takes.
    if (identity.aggregator) {
      throw new HttpError(403, `This token is aggregator ${identity.aggregator.aggregator_id}'s, not a person's: log in with the registrant's own token`, { code: 'person_token_required' });
    }
    const { rows: [row] } = await ctx.pool.query<{ aggregator_id: string; org_id: string; types: string[]; status: string; enabled: boolean }>(
      `SELECT a.aggregator_id, a.org_id, a.types, a.status, u.enabled
         FROM aggregator.users u JOIN aggregator.aggregators a USING (aggregator_id)
        WHERE u.issuer = $1 AND u.subject = $2`, [identity.issuer, identity.sub]);
    if (!row) throw new HttpError(404, 'This identity has registered no aggregator', { code: 'registration_not_found' });
    if (row.status !== 'approved' || !row.enabled) throw new HttpError(403, `Aggregator registration is ${row.status}; login is enabled once approved`, { code: 'aggregator_not_approved' });
    const token = await ctx.tokens.issue({
      sub: identity.sub, aggregator_id: row.aggregator_id, org_id: row.org_id, aggregator_type: row.types, roles: ['admin'],
    }, AGGREGATOR_TOKEN_TTL_SECONDS);
    res.json({ access_token: token, token_type: 'Bearer', expires_in: AGGREGATOR_TOKEN_TTL_SECONDS, aggregator_id: row.aggregator_id });
  });

  return router;
}

/**
 * The registration body: validated at runtime by Ajv against the network's aggregator registration
 * JSON Schema (`aggregator_registration.schema`), rendered here as that schema (without `$schema`/`$id`).
 */
export function aggregatorRegistrationBody(network: Network) {
  const { $schema: _schema, $id: _id, ...schema } = network.aggregatorRegistration?.schema ?? {};
  return z.looseObject({}).meta({
    description: `The network's aggregator registration, schema version ${network.aggregatorRegistration?.version ?? 'none'} (network configuration, \`aggregator_registration.schema\`), validated at runtime; 400 names each bad field.`,
    ...(network.aggregatorRegistration ? { override: ({ jsonSchema }: { jsonSchema: Record<string, unknown> }) => { for (const k of Object.keys(jsonSchema)) if (k !== 'description') delete jsonSchema[k]; Object.assign(jsonSchema, schema); } } : {}),
  });
}

/** Docs of `aggregatorRegistrationRoutes` (bearer token of a person, not of an aggregator). */
export function aggregatorRegistrationRouteDocs(network: Network): RouteDoc[] {
  return [
    {
      method: 'POST', path: '/v1/aggregator-registrations/create', summary: 'Register an aggregator (reviewed by the network admin)', tags: ['registration'], security: 'bearer',
      description: 'The bearer token is a person\'s (built-in issuer or the OIDC issuer), never an aggregator\'s. With `org_id`, the existing organisation approves first (a review link e-mailed to its contact), then the network admin.',
      body: { schema: aggregatorRegistrationBody(network) },
      responses: { 201: { description: 'Registered, pending approval', schema: z.object({ aggregator_id: z.uuid(), org_slug: z.string(), status: z.string(), message: z.string() }) } },
      errors: { 404: 'org_id names no organisation', 409: 'An aggregator\'s token, an identity that already registered, or an organisation not approved', 422: 'Invitations are not supported yet' },
    },
    {
      method: 'POST', path: '/v1/aggregator-registrations/token', summary: 'Exchange the registrant\'s token for an aggregator token once approved', tags: ['registration'], security: 'bearer',
      responses: { 200: { description: 'An aggregator token (role admin)', schema: z.object({ access_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.int(), aggregator_id: z.uuid() }) } },
      description: 'The bearer token is the registrant\'s (a person\'s: built-in issuer or the OIDC issuer), never an aggregator\'s: an aggregator token is not traded for a new one.',
      errors: { 403: 'The registration is pending or rejected (`aggregator_not_approved`), or the token is an aggregator\'s (`person_token_required`)', 404: 'This identity has registered no aggregator' },
    },
  ];
}
