/**
 * Saved bulk-upload mappings of the caller's aggregator (issue 17; docs/decisions.md "Bulk
 * onboarding II"; lib/aggregator/bulk/saved-mappings.ts). Mounted before the bulk-upload routes,
 * so that `/v1/bulk-uploads/mappings` is never taken for an upload id.
 *
 * - `POST   /v1/bulk-uploads/mappings`          {name, participant_type, mapping, mode?} → 201 {id, version, …}
 * - `GET    /v1/bulk-uploads/mappings`          `{mappings: [...]}`: the newest version of each mapping not retired (`?participant_type=`)
 * - `GET    /v1/bulk-uploads/mappings/{id}`     the newest version (`?version=N` for another), retired ones too
 * - `PUT    /v1/bulk-uploads/mappings/{id}`     {name?, mapping, mode?} → 200 the new version (409 when retired)
 * - `DELETE /v1/bulk-uploads/mappings/{id}`     retires it → 204
 */
import { Router, type Response } from 'express';
import { z } from 'zod';
import {
  createSavedMapping, getSavedMapping, listSavedMappings, retireSavedMapping, updateSavedMapping,
} from '../../lib/aggregator/bulk/saved-mappings.ts';
import { UPLOAD_MODES } from '../../lib/aggregator/bulk/upsert.ts';
import type { PlatformContext } from '../../lib/context.ts';
import type { Domain } from '../../lib/network/config.ts';
import { assertDomainAllowed, callerOf, requireRole } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, PG_INT_MAX } from '../http/validation.ts';
import { mappingOrBadRequest } from './bulk-uploads.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const name = z.string().trim().min(1, 'name must not be empty').max(200);
const mode = z.enum(UPLOAD_MODES).optional()
  .meta({ description: 'the mode of uploads made with this mapping unless they give one: create (default), upsert or update' });
export const mappingCreateBody = z.object({
  name,
  participant_type: z.string().min(1),
  mapping: z.record(z.string(), z.unknown(), { error: 'mapping must be a JSON object' }),
  mode,
});
export const mappingUpdateBody = z.object({
  name: name.optional(),
  mapping: z.record(z.string(), z.unknown(), { error: 'mapping must be a JSON object' }),
  mode: mode.meta({ description: 'the new version\'s mode (default: the current one\'s)' }),
});
export const mappingQuery = z.object({ version: z.coerce.number().int().min(1).max(PG_INT_MAX).optional() });
export const mappingListQuery = z.object({ participant_type: z.string().min(1).optional() });

/** The saved-mapping routes (see the module comment), mounted under `/v1` after `bearerAuth`. */
export function bulkMappingRoutes(ctx: PlatformContext): Router {
  const router = Router();

  const domainOf = (res: Response, participantType: string): Domain => {
    const domain = ctx.network.domains.get(participantType);
    if (!domain) {
      throw new HttpError(400, `participant_type: must be one of ${[...ctx.network.domains.keys()].join(', ')}`,
        { fields: { participant_type: [`unknown participant type ${participantType}`] } });
    }
    assertDomainAllowed(res, participantType);
    return domain;
  };
  const idOf = (raw: unknown): string => {
    const id = String(raw);
    if (!UUID.test(id)) throw new HttpError(404, `No saved mapping ${id}`);
    return id.toLowerCase();
  };

  router.post('/bulk-uploads/mappings', requireRole('admin', 'operator'), async (req, res) => {
    const body = parse(mappingCreateBody, req.body ?? {});
    const domain = domainOf(res, body.participant_type);
    const mapping = mappingOrBadRequest(ctx, domain, body.mapping, 'mapping');
    const caller = callerOf(res);
    const saved = await createSavedMapping(ctx.pool, {
      aggregatorId: caller.aggregatorId, name: body.name, participantType: domain.name, mapping, mode: body.mode, createdBy: caller.subject,
    });
    res.status(201).location(`/v1/bulk-uploads/mappings/${saved.id}`).json(saved);
  });

  router.get('/bulk-uploads/mappings', async (req, res) => {
    const query = parse(mappingListQuery, req.query, 'query');
    res.json({ mappings: await listSavedMappings(ctx.pool, callerOf(res).aggregatorId, query.participant_type) });
  });

  router.get('/bulk-uploads/mappings/:id', async (req, res) => {
    const id = idOf(req.params.id);
    const { version } = parse(mappingQuery, req.query, 'query');
    const saved = await getSavedMapping(ctx.pool, callerOf(res).aggregatorId, id, version);
    if (!saved) throw new HttpError(404, `No saved mapping ${id}${version ? ` version ${version}` : ''}`);
    res.json(saved);
  });

  router.put('/bulk-uploads/mappings/:id', requireRole('admin', 'operator'), async (req, res) => {
    const id = idOf(req.params.id);
    const body = parse(mappingUpdateBody, req.body ?? {});
    const caller = callerOf(res);
    const current = await getSavedMapping(ctx.pool, caller.aggregatorId, id);
    if (!current) throw new HttpError(404, `No saved mapping ${id}`);
    const mapping = mappingOrBadRequest(ctx, domainOf(res, current.participant_type), body.mapping, 'mapping');
    const updated = await updateSavedMapping(ctx.pool, caller.aggregatorId, id, { name: body.name ?? current.name, mapping, mode: body.mode, createdBy: caller.subject });
    if (updated.outcome === 'not_found') throw new HttpError(404, `No saved mapping ${id}`);
    if (updated.outcome === 'retired') throw new HttpError(409, `The saved mapping ${id} is retired; save a new one`, { code: 'mapping_retired' });
    res.json(updated.mapping);
  });

  router.delete('/bulk-uploads/mappings/:id', requireRole('admin', 'operator'), async (req, res) => {
    const id = idOf(req.params.id);
    if (!await retireSavedMapping(ctx.pool, callerOf(res).aggregatorId, id)) throw new HttpError(404, `No saved mapping ${id}`);
    res.status(204).end();
  });

  return router;
}

/** Path parameter of a saved mapping (a UUID in either case; anything else is 404). */
export const mappingIdParams = z.object({ id: z.string().regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/).meta({ format: 'uuid', description: 'saved mapping id' }) });
/** A saved mapping version (lib/aggregator/bulk/saved-mappings.ts `SavedMappingJson`). */
export const savedMappingSchema = z.object({
  id: z.uuid(), version: z.int().min(1), name: z.string(), participant_type: z.string(),
  mapping: z.record(z.string(), z.unknown()).meta({ description: 'the mapping as normalised (README, bulk onboarding: mappings)' }),
  mode: z.enum(UPLOAD_MODES), created_by: z.string(), created_at: z.string(), retired_at: z.string().nullable(), latest_version: z.int().min(1),
}).meta({ id: 'SavedMapping' });
const TAGS = ['bulk uploads'];
const writerErrors = { 403: 'Role viewer, or the caller may not onboard this participant type' };

/** Docs of `bulkMappingRoutes`. */
export const bulkMappingRouteDocs: RouteDoc[] = [
  {
    method: 'POST', path: '/v1/bulk-uploads/mappings', summary: 'Save a mapping for later uploads', tags: TAGS, security: 'bearer',
    body: { schema: mappingCreateBody, example: API_EXAMPLES.saved_mapping },
    responses: { 201: { description: 'Saved (version 1)', schema: savedMappingSchema, headers: z.object({ location: z.string() }) } }, errors: writerErrors,
  },
  {
    method: 'GET', path: '/v1/bulk-uploads/mappings', summary: 'The newest version of each saved mapping not retired', tags: TAGS, security: 'bearer',
    query: mappingListQuery, responses: { 200: { description: 'The mappings', schema: z.object({ mappings: z.array(savedMappingSchema) }) } },
  },
  {
    method: 'GET', path: '/v1/bulk-uploads/mappings/:id', summary: 'One saved mapping (newest version, or ?version=N), retired ones too', tags: TAGS, security: 'bearer',
    params: mappingIdParams, query: mappingQuery, responses: { 200: { description: 'The mapping', schema: savedMappingSchema } }, errors: { 404: 'No such mapping or version' },
  },
  {
    method: 'PUT', path: '/v1/bulk-uploads/mappings/:id', summary: 'Save a new version of a mapping', tags: TAGS, security: 'bearer',
    params: mappingIdParams, body: { schema: mappingUpdateBody },
    responses: { 200: { description: 'The new version', schema: savedMappingSchema } },
    errors: { ...writerErrors, 404: 'No such mapping', 409: 'The mapping is retired' },
  },
  {
    method: 'DELETE', path: '/v1/bulk-uploads/mappings/:id', summary: 'Retire a mapping', tags: TAGS, security: 'bearer',
    params: mappingIdParams, responses: { 204: { description: 'Retired' } }, errors: { 403: 'Role viewer', 404: 'No such mapping' },
  },
];
