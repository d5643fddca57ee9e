/**
 * `POST /api/v1/match-score/calculate` (spec "Signals service"): the local match score of itemA
 * and itemB (item inputs), from their index entries read from the search service over HTTP
 * (`POST /v1/index/entries`, timeout SEARCH_TIMEOUT_MS) and the explainable signals of
 * lib/match-score.ts. Errors in shape A.
 *
 * - 400: invalid body, an item of another network, an unknown domain or item_type;
 * - 403 `interaction_not_allowed`: the interaction matrix allows neither A→B nor B→A;
 * - 422 `same_item`: itemA and itemB are one item; `item_mismatch`: the id is indexed with other
 *   identity values;
 * - 200 without a score, with `unavailable_reason`: `not_indexed` (an item has no index entry yet),
 *   `model_mismatch` (embeddings of different model versions), `search_unavailable` (the search
 *   service timed out, was unreachable or failed).
 */
import { Router, type Request } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { formatModelVersion, sameModelVersion } from '../../lib/search/embeddings/index.ts';
import { computeMatchScore, MATCH_SCORE_VERSION, type MatchSide } from '../../lib/signals/match-score.ts';
import { interactionAllowed, type Network } from '../../lib/network/config.ts';
import { fetchIndexEntries, SearchRejectedError, SearchUnavailableError, type IndexEntry } from '../../lib/clients/search-client.ts';
import { HttpError, type FieldErrors } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, summarise } from '../http/validation.ts';

export const MATCH_PROVIDER = 'local';

/** Spec "Item input"; keys it does not list (e.g. those of a whole item record) are ignored. */
const itemInputSchema = z.object({
  item_network: z.string().min(1),
  item_domain: z.string().min(1),
  item_type: z.string().min(1),
  item_id: z.uuid(),
  item_instance_url: z.string().nullable(),
  item_schema_url: z.string().nullable(),
  item_state: z.unknown().refine((v) => v !== undefined, 'Required'),
  lifecycle_status: z.string().optional(),
  item_latitude: z.number().min(-90).max(90).optional(),
  item_longitude: z.number().min(-180).max(180).optional(),
});
type MatchItemInput = z.output<typeof itemInputSchema>;
export const matchScoreRequestSchema = z.strictObject({ itemA: itemInputSchema, itemB: itemInputSchema });

const SIDES = ['itemA', 'itemB'] as const;

/** @throws HttpError 400 naming each field that does not fit the network. */
function checkAgainstNetwork(network: Network, body: { itemA: MatchItemInput; itemB: MatchItemInput }): void {
  const fields: FieldErrors = {};
  const problem = (field: string, message: string) => (fields[field] ??= []).push(message);
  for (const side of SIDES) {
    const item = body[side];
    if (item.item_network !== network.id) problem(`${side}.item_network`, `must be ${network.id}`);
    const domain = network.domains.get(item.item_domain);
    if (!domain) problem(`${side}.item_domain`, `must be one of ${[...network.domains.keys()].join(', ')}`);
    else if (item.item_type !== domain.itemType) problem(`${side}.item_type`, `${domain.name} items have item_type ${domain.itemType}`);
    if ((item.item_latitude === undefined) !== (item.item_longitude === undefined)) {
      problem(`${side}.${item.item_latitude === undefined ? 'item_latitude' : 'item_longitude'}`, 'item_latitude and item_longitude go together');
    }
  }
  if (Object.keys(fields).length) throw new HttpError(400, `Invalid request body: ${summarise(fields)}`, { code: 'invalid_request', fields });
}

/** The state to compare: the request's when it is an object (or a JSON string of one), else the indexed one. */
function stateOf(input: unknown, entry: IndexEntry): Record<string, unknown> {
  let value = input;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      value = undefined;
    }
  }
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value as Record<string, unknown> : entry.item.item_state;
}

function sideOf(network: Network, input: MatchItemInput, entry: IndexEntry): MatchSide {
  return {
    domain: network.domains.get(input.item_domain)!,
    state: stateOf(input.item_state, entry),
    locations: input.item_latitude !== undefined && input.item_longitude !== undefined
      ? [{ lat: input.item_latitude, lng: input.item_longitude }]
      : entry.item.item_locations.map((l) => ({ lat: l.lat, lng: l.lng })),
    entry,
  };
}

const unavailable = (reason: string, reasoning: string, raw: Record<string, unknown>) => ({
  provider: MATCH_PROVIDER, version: MATCH_SCORE_VERSION, model_provider: MATCH_PROVIDER,
  unavailable_reason: reason, reasoning, raw_response: raw,
});

export function matchScoreRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/match-score/calculate', async (req: Request, res) => {
    const body = parse(matchScoreRequestSchema, req.body ?? {});
    checkAgainstNetwork(ctx.network, body);
    const { itemA, itemB } = body;
    if (itemA.item_id === itemB.item_id) throw new HttpError(422, 'itemA and itemB are the same item', { code: 'same_item' });
    const end = (item: MatchItemInput) => ({ network: item.item_network, domain: item.item_domain });
    if (!interactionAllowed(ctx.network, end(itemA), end(itemB)) && !interactionAllowed(ctx.network, end(itemB), end(itemA))) {
      throw new HttpError(403, `The interaction matrix relates no ${itemA.item_domain} item with a ${itemB.item_domain} item`, { code: 'interaction_not_allowed' });
    }

    let entries: Map<string, IndexEntry>;
    try {
      entries = await fetchIndexEntries(ctx, [itemA.item_id, itemB.item_id]);
    } catch (err) {
      if (!(err instanceof SearchUnavailableError) && !(err instanceof SearchRejectedError)) throw err;
      req.log.error({ err: err.message }, 'match score: the search service could not give the index entries');
      res.json(unavailable('search_unavailable', 'No score: the search index could not be read right now; try again later.',
        { search_error: err.message }));
      return;
    }
    const missing = SIDES.filter((side) => !entries.has(body[side].item_id));
    if (missing.length) {
      res.json(unavailable('not_indexed', `No score: ${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} not indexed yet.`,
        { not_indexed: missing.map((side) => ({ side, item_id: body[side].item_id })) }));
      return;
    }
    const [entryA, entryB] = [entries.get(itemA.item_id)!, entries.get(itemB.item_id)!];
    for (const side of SIDES) {
      const input = body[side];
      const indexed = entries.get(input.item_id)!.item;
      if (indexed.item_network !== input.item_network || indexed.item_domain !== input.item_domain || indexed.item_type !== input.item_type) {
        throw new HttpError(422, `${side}: item ${input.item_id} is a ${indexed.item_network}/${indexed.item_domain}/${indexed.item_type} item`, { code: 'item_mismatch' });
      }
    }
    if (!sameModelVersion(entryA.model, entryB.model)) {
      res.json(unavailable('model_mismatch', 'No score: the two items were embedded by different model versions; re-indexing will align them.',
        { model_versions: { itemA: formatModelVersion(entryA.model), itemB: formatModelVersion(entryB.model) } }));
      return;
    }

    const match = computeMatchScore(sideOf(ctx.network, itemA, entryA), sideOf(ctx.network, itemB, entryB), ctx.config.MATCH_SCORE_BANDS);
    res.json({
      provider: MATCH_PROVIDER, score: match.score, band: match.band, confidence: match.confidence, version: match.version,
      model_provider: MATCH_PROVIDER, model: match.model, reasoning: match.reasoning, signals: match.signals,
      raw_response: match.raw,
    });
  });
  return router;
}

/** The answer (spec "POST /api/v1/match-score/calculate"): a score, or `unavailable_reason` without one. */
export const matchScoreResponseSchema = z.object({
  provider: z.string(),
  score: z.number().min(0).max(100).optional(),
  band: z.string().optional(),
  confidence: z.number().optional(),
  version: z.string().optional(),
  prompt_version: z.string().optional(),
  model_provider: z.string().optional(),
  model: z.string().optional(),
  reasoning: z.string().optional(),
  unavailable_reason: z.enum(['not_indexed', 'model_mismatch', 'search_unavailable']).optional(),
  signals: z.array(z.looseObject({ name: z.string(), impact: z.string(), summary: z.string() })).optional(),
  raw_response: z.unknown(),
});

/** Docs of `matchScoreRoutes` (api/http/openapi.ts). */
export const matchScoreRouteDocs: RouteDoc[] = [{
  method: 'POST', path: '/api/v1/match-score/calculate', summary: 'Explainable match score of two items', tags: ['match score'], security: 'apiKey',
  body: { schema: matchScoreRequestSchema },
  responses: { 200: { description: 'The score, or why there is none (`unavailable_reason`)', schema: matchScoreResponseSchema } },
  errors: {
    403: 'The interaction matrix relates neither item to the other (interaction_not_allowed)',
    422: 'itemA and itemB are one item (same_item), or an id is indexed with other identity values (item_mismatch)',
  },
}];
