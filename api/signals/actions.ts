/**
 * Action endpoints of the signals service (x-api-key; a session cookie or bearer token names the
 * party acting; errors in shape A). The actor policy: docs/decisions.md, "Trust II (issue 29)",
 * "The actor policy (actions)".
 * - `POST /api/v1/action/perform`         spec body, header x-acting-org-id optional → {results, summary}
 * - `POST /api/v1/action/{id}/status`     {action_status, update_count, note?, guardian_otp?} → the action
 * - `GET  /api/v1/action/{id}`            the action, its events and (once revealed, to its parties) contacts
 * A refused action answers the refusal's status with a shape-A body that also carries the
 * results envelope (`results[0].status: failed`, its `error` and `message`).
 */
import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { ActionError, actionView, getAction, moveActionStatus, performAction, type Actor } from '../../lib/signals/actions.ts';
import { HttpError } from '../http/errors.ts';
import { errorShapeSchemas } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, PG_INT_MAX } from '../http/validation.ts';
import { identify } from './identity.ts';

const itemRef = z.object({
  item_network: z.string().min(1),
  item_domain: z.string().min(1),
  item_type: z.string().min(1),
  item_id: z.uuid(),
});
export const performSchema = z.strictObject({
  action_type: z.string().min(1),
  source_item: itemRef,
  target_item: itemRef.extend({ item_instance_url: z.url() }),
  requirements_snapshot: z.record(z.string(), z.unknown()).optional(),
  acting_as_user_id: z.string().min(1).optional(),
  consent: z.object({ acknowledged: z.boolean(), version: z.number().int().min(1).max(PG_INT_MAX), brand: z.string().nullable().optional() }).optional(),
  guardian_otp: z.string().length(6).optional(),
});
export const statusSchema = z.strictObject({
  action_status: z.string().min(1).max(64),
  update_count: z.number().int().min(0).max(PG_INT_MAX),
  note: z.string().max(1000).optional(),
  guardian_otp: z.string().length(6).optional().meta({ description: 'the guardian\'s code, when the move reveals the contacts of a target who is a minor' }),
});
export const actionIdParam = z.object({ id: z.uuid() });

/**
 * The roles of an aggregator's token that act on actions and see their contacts. A viewer only
 * reads, as on the aggregator service, which keeps decrypted contacts from viewers
 * (docs/decisions.md, "Foundation" and "Actors and routes").
 */
const ACTING_ROLES = ['admin', 'operator'];

/**
 * The actor of a request: its person (session or bearer) when present, else its API key. An
 * aggregator's token without an acting role stands for no side: it reads as the API key alone
 * (no contacts) and, for a perform or a move (`acting`), is refused.
 * @throws ActionError 403 `insufficient_role`; HttpError 401 for a bad token or a stale session cookie
 */
async function actorOf(ctx: PlatformContext, req: Request, res: Response, acting: boolean): Promise<Actor> {
  const who = await identify(ctx, req, { strictCookie: true });
  if (who?.kind === 'user') return { kind: 'user', userId: who.userId };
  if (who?.kind === 'aggregator') {
    if (who.roles.some((r) => ACTING_ROLES.includes(r))) return { kind: 'aggregator', aggregatorId: who.aggregatorId, orgId: who.orgId };
    if (acting) throw new ActionError(403, 'insufficient_role', `An aggregator acts on actions with one of the roles ${ACTING_ROLES.join(', ')}; a viewer only reads them`);
  }
  return { kind: 'api_key', keyId: (res.locals.apiKey as { keyId: string }).keyId };
}

const asHttp = (err: unknown) => (err instanceof ActionError ? new HttpError(err.status, err.message, { code: err.code, headers: err.headers }) : err);

export function actionRoutes(ctx: PlatformContext): Router {
  const router = Router();

  router.post('/action/perform', async (req, res) => {
    const input = parse(performSchema, req.body);
    const orgHeader = req.header('x-acting-org-id');
    try {
      const actor = await actorOf(ctx, req, res, true);
      const action = await performAction(ctx, input, actor, orgHeader === undefined || orgHeader === '' ? undefined : orgHeader);
      res.status(201).json({
        results: [{
          index: 0, status: 'success', action_id: action.action_id, action_type: action.action_type, action_status: action.action_status,
          update_count: action.update_count, source_item_id: action.source_item_id, target_item_id: action.target_item_id,
        }],
        summary: { total: 1, succeeded: 1, failed: 0 },
      });
    } catch (err) {
      if (!(err instanceof ActionError)) throw err;
      res.status(err.status).set(err.headers ?? {}).json({
        error: err.code, message: err.message,
        results: [{ index: 0, status: 'failed', action_type: input.action_type, error: err.code, message: err.message,
          source_item_id: input.source_item.item_id, target_item_id: input.target_item.item_id }],
        summary: { total: 1, succeeded: 0, failed: 1 },
      });
    }
  });

  router.post('/action/:id/status', async (req, res) => {
    const { id } = parse(actionIdParam, req.params, 'path');
    const body = parse(statusSchema, req.body);
    const actor = await actorOf(ctx, req, res, true).catch((err) => { throw asHttp(err); });
    const action = await moveActionStatus(ctx, id, {
      status: body.action_status, updateCount: body.update_count, note: body.note, guardianOtp: body.guardian_otp,
    }, actor).catch((err) => { throw asHttp(err); });
    res.json(await actionView(ctx.pool, ctx.pii, ctx.network, action, actor));
  });

  router.get('/action/:id', async (req, res) => {
    const { id } = parse(actionIdParam, req.params, 'path');
    const actor = await actorOf(ctx, req, res, false);
    const action = await getAction(ctx.pool, id);
    if (!action) throw new HttpError(404, `No action ${id}`, { code: 'action_not_found' });
    res.json(await actionView(ctx.pool, ctx.pii, ctx.network, action, actor));
  });

  return router;
}

const performResultSchema = z.object({
  index: z.int(), status: z.enum(['success', 'failed']), action_id: z.uuid().optional(), action_type: z.string(), action_status: z.string().optional(),
  update_count: z.int().optional(), source_item_id: z.uuid(), target_item_id: z.uuid(), error: z.string().optional(), message: z.string().optional(),
});
const performSummarySchema = z.object({ total: z.int(), succeeded: z.int(), failed: z.int() });
const refusedSchema = z.object({
  error: z.string(), message: z.string(), results: z.array(performResultSchema), summary: performSummarySchema,
}).meta({ description: 'Shape A, with the results envelope of the refused action' });
/** An action as `actionView` (lib/signals/actions.ts) shows it. */
const actionViewSchema = z.looseObject({
  action_id: z.uuid(), action_type: z.string(), action_status: z.string(), update_count: z.int(), terminal: z.boolean(),
  source_item_id: z.uuid(), target_item_id: z.uuid(), target_instance_url: z.string().nullable(),
  acting_org_id: z.string().nullable(), acting_as_user_id: z.string().nullable(),
}).meta({ id: 'Action', description: 'An action, its events and (once revealed, to its parties only) the parties\' contacts' });
const refusal = (description: string) => ({ description, schema: refusedSchema });
const actingHeaders = z.object({ 'x-acting-org-id': z.string().optional().meta({ description: 'the organisation an aggregator acts for' }) });
const actorNote = 'Besides the API key, a person\'s session cookie or `Authorization: Bearer <JWT>` of a person or an aggregator makes them the actor; '
  + 'an aggregator stands for the items and people it onboarded. The API key alone stands for no party: it performs and moves nothing (403 `person_token_required`) and never sees contacts. '
  + 'An aggregator\'s token acts with role admin or operator; a viewer\'s reads as the API key alone and performs and moves nothing (403 `insufficient_role`).';

/** Docs of `actionRoutes`. */
export const actionRouteDocs: RouteDoc[] = [
  {
    method: 'POST', path: '/api/v1/action/perform', summary: 'Perform an action between two items', tags: ['actions'], security: 'apiKey', headers: actingHeaders,
    description: `${actorNote} A refused action answers its status with a shape-A body that also carries the results envelope (\`results[0].status: failed\`).`,
    body: { schema: performSchema },
    responses: {
      201: { description: 'Performed', schema: z.object({ results: z.array(performResultSchema), summary: performSummarySchema }) },
      400: { description: 'Invalid request (shape A), or the action is refused as invalid (with the results envelope)', schema: z.union([errorShapeSchemas.A, refusedSchema]) },
      403: refusal('Not allowed: API key alone (`person_token_required`), an aggregator\'s viewer (`insufficient_role`), not the source side (`source_not_owned`), interaction matrix, organisation, guardian consent'),
      404: refusal('An item, user or organisation is not found'),
      409: refusal('An action is already open, or the source is not live'),
      422: refusal('The consent version is outdated'),
      429: refusal('Too many guardian codes (Retry-After)'),
    },
  },
  {
    method: 'POST', path: '/api/v1/action/:id/status', summary: 'Move an action to another status', tags: ['actions'], security: 'apiKey', description: actorNote,
    params: actionIdParam, body: { schema: statusSchema },
    responses: { 200: { description: 'The action after the move', schema: actionViewSchema } },
    errors: {
      401: 'Missing or invalid API key, a bad bearer token or a stale session cookie',
      403: 'API key alone (`person_token_required`), an aggregator\'s viewer (`insufficient_role`), not a party (`not_a_party`), a cancel not by the source side (`cancel_not_allowed`), '
        + 'a move into the status that reveals contacts not by the target side (`target_side_only`), or, when the target\'s person is a minor, '
        + 'without the guardian\'s code (`GUARDIAN_OTP_REQUIRED`: a code was sent; `GUARDIAN_OTP_INVALID`, `GUARDIAN_OTP_EXPIRED`, `GUARDIAN_CONSENT_REQUIRED`)',
      404: 'No such action', 409: 'Stale update_count, terminal action or transition not allowed',
      429: 'Too many guardian codes sent or wrong tries (`GUARDIAN_OTP_SEND_LIMIT`, `GUARDIAN_OTP_TOO_MANY_TRIES`; Retry-After)',
    },
  },
  {
    method: 'GET', path: '/api/v1/action/:id', summary: 'One action with its events', tags: ['actions'], security: 'apiKey',
    description: `${actorNote} Any caller may read an action; \`contacts\` is filled only for a party once \`pii_revealed\`, else null; `
      + 'a minor\'s entry stays null unless their guardian gave a code for this action.',
    params: actionIdParam, responses: { 200: { description: 'The action', schema: actionViewSchema } },
    errors: { 401: 'Missing or invalid API key, a bad bearer token or a stale session cookie', 404: 'No such action' },
  },
];
