/**
 * `POST /v1/relevance` (spec "Search service"): how relevant a target item is to a source item, as
 * a percentage from the cosine similarity of their stored embeddings: max(0, cosine) × 100,
 * rounded to two decimals (negative similarity reads as unrelated, 0).
 *
 * Preconditions and their errors (shape A): 403 `interaction_not_allowed` when the interaction
 * matrix does not let source reach target; 404 `item_not_indexed` / `item_not_live` when either
 * item is not in the index under the given network, domain and type, or is not live; 409
 * `model_version_mismatch` when their embeddings come from different model versions.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { cosineSimilarity, formatModelVersion, sameModelVersion, type ModelVersion } from '../../lib/search/embeddings/index.ts';
import { interactionAllowed } from '../../lib/network/config.ts';
import { HttpError } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

const itemRef = z.strictObject({
  network: z.string().min(1),
  domain: z.string().min(1),
  type: z.string().min(1),
  id: z.uuid(),
});
export const relevanceRequestSchema = z.strictObject({ source: itemRef, target: itemRef });

interface IndexedItem {
  item_id: string;
  item_network: string;
  item_domain: string;
  item_type: string;
  lifecycle_status: string;
  model: ModelVersion;
  embedding: number[];
}

/** The relevance percentage of a cosine similarity. */
export function relevancePercent(cosine: number): number {
  return Math.round(Math.min(1, Math.max(0, cosine)) * 10_000) / 100;
}

export function relevanceRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/relevance', async (req, res) => {
    const { source, target } = parse(relevanceRequestSchema, req.body);
    if (!interactionAllowed(ctx.network, source, target)) {
      throw new HttpError(403, `The interaction matrix does not let ${source.network}/${source.domain} reach ${target.network}/${target.domain}`,
        { code: 'interaction_not_allowed' });
    }
    const { rows } = await ctx.pool.query<IndexedItem>(
      `SELECT item_id::text AS item_id, item_network, item_domain, item_type, lifecycle_status, search.embedding_array(embedding) AS embedding,
              json_build_object('model_id', model_id, 'quantization', model_quantization, 'dimensions', model_dimensions) AS model
         FROM search.items WHERE item_id = ANY($1::uuid[])`, [[source.id, target.id]]);
    const indexed = (role: 'source' | 'target', ref: z.infer<typeof itemRef>): IndexedItem => {
      const row = rows.find((r) => r.item_id === ref.id);
      if (!row || row.item_network !== ref.network || row.item_domain !== ref.domain || row.item_type !== ref.type) {
        throw new HttpError(404, `The ${role} item ${ref.id} is not indexed as a ${ref.network}/${ref.domain}/${ref.type} item`, { code: 'item_not_indexed' });
      }
      if (row.lifecycle_status !== 'live') {
        throw new HttpError(404, `The ${role} item ${ref.id} is ${row.lifecycle_status}, not live`, { code: 'item_not_live' });
      }
      return row;
    };
    const a = indexed('source', source);
    const b = indexed('target', target);
    if (!sameModelVersion(a.model, b.model)) {
      throw new HttpError(409, `The items are embedded with different model versions (${formatModelVersion(a.model)} and ${formatModelVersion(b.model)}); `
        + 'they become comparable once re-indexing completes', { code: 'model_version_mismatch' });
    }
    res.json({ score: relevancePercent(cosineSimilarity(a.embedding, b.embedding)) });
  });
  return router;
}

export const relevanceResponseSchema = z.object({ score: z.number().min(0).max(100).meta({ description: 'percentage, two decimals' }) });

/** Docs of `relevanceRoutes` (api/http/openapi.ts). */
export const relevanceRouteDocs: RouteDoc[] = [{
  method: 'POST', path: '/v1/relevance', summary: 'Relevance (0..100) of a target item to a source item', tags: ['relevance'], security: 'apiKey',
  body: {
    schema: relevanceRequestSchema,
    example: {
      source: { network: 'local-discovery', domain: 'seeker', type: 'seeker_profile', id: '2f1c1f9e-4a8b-4f57-9d0e-7c3b8a6e5d41' },
      target: { network: 'local-discovery', domain: 'provider', type: 'facility', id: '8b0f3c2a-1d4e-4b6f-a7c9-5e2d1f0a9b38' },
    },
  },
  responses: { 200: { description: 'The score', schema: relevanceResponseSchema, example: { score: 73.42 } } },
  errors: {
    403: 'The interaction matrix does not let source reach target (interaction_not_allowed)',
    404: 'An item is not indexed under these values (item_not_indexed) or not live (item_not_live)',
    409: 'The items are embedded with different model versions (model_version_mismatch)',
  },
}];
