/**
 * Action endpoints of the signals service (x-api-key; optional session cookie or bearer token for
 * the acting person; errors in shape A):
 * - `POST /api/v1/action/perform`         spec body, header x-acting-org-id optional → {results, summary}
 * - `POST /api/v1/action/{id}/status`     {action_status, update_count, note?} → the action
 * - `GET  /api/v1/action/{id}`            the action, its events and (once revealed) contacts
 * A refused action answers the refusal's status with a shape-A body that also carries the
 * results envelope (`results[0].status: failed`, its `error` and `message`).
 */
import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { ActionError, actionView, getAction, moveActionStatus, performAction, type Actor } from '../../lib/signals/actions.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';
import { identify } from './identity.ts';

const itemRef = z.object({
  item_network: z.string().min(1),
  item_domain: z.string().min(1),
  item_type: z.string().min(1),
  item_id: z.uuid(),
});
const performSchema = z.strictObject({
  action_type: z.string().min(1),
  source_item: itemRef,
  target_item: itemRef.extend({ item_instance_url: z.url() }),
  requirements_snapshot: z.record(z.string(), z.unknown()).optional(),
  acting_as_user_id: z.string().min(1).optional(),
  consent: z.object({ acknowledged: z.boolean(), version: z.number().int().min(1), brand: z.string().nullable().optional() }).optional(),
  guardian_otp: z.string().length(6).optional(),
});
const statusSchema = z.strictObject({
  action_status: z.string().min(1).max(64),
  update_count: z.number().int().min(0),
  note: z.string().max(1000).optional(),
});
const idParam = z.object({ id: z.uuid() });

/** The actor of a request: its person (session or bearer) when present, else its API key. */
async function actorOf(ctx: PlatformContext, req: Request, res: Response): Promise<Actor> {
  const who = await identify(ctx, req, { strictCookie: true });
  if (who?.kind === 'user') return { kind: 'user', userId: who.userId };
  if (who?.kind === 'aggregator') return { kind: 'aggregator', aggregatorId: who.aggregatorId, orgId: who.orgId };
  return { kind: 'api_key', keyId: (res.locals.apiKey as { keyId: string }).keyId };
}

const asHttp = (err: unknown) => (err instanceof ActionError ? new HttpError(err.status, err.message, { code: err.code, headers: err.headers }) : err);

export function actionRoutes(ctx: PlatformContext): Router {
  const router = Router();

  router.post('/action/perform', async (req, res) => {
    const input = parse(performSchema, req.body);
    const orgHeader = req.header('x-acting-org-id');
    const actor = await actorOf(ctx, req, res);
    try {
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
    const { id } = parse(idParam, req.params, 'path');
    const body = parse(statusSchema, req.body);
    const actor = await actorOf(ctx, req, res);
    const action = await withTransaction(ctx.pool, (client) => moveActionStatus(client, ctx.network, id, {
      status: body.action_status, updateCount: body.update_count, note: body.note,
    }, actor)).catch((err) => { throw asHttp(err); });
    res.json(await actionView(ctx.pool, ctx.pii, ctx.network, action));
  });

  router.get('/action/:id', async (req, res) => {
    const { id } = parse(idParam, req.params, 'path');
    const action = await getAction(ctx.pool, id);
    if (!action) throw new HttpError(404, `No action ${id}`, { code: 'action_not_found' });
    res.json(await actionView(ctx.pool, ctx.pii, ctx.network, action));
  });

  return router;
}
