/**
 * The active network configuration: `fixtures/networks/<NETWORK>.json`, validated at start.
 *
 * It declares the participant domains (each with one item type and a JSON Schema, draft 2020-12),
 * `csv_array_delimiter`, registration modes, aggregator types (which domains each may onboard),
 * go-live rules and the interaction matrix. Each participant schema is compiled once with Ajv.
 * Actions that can be performed declare their statuses, the status at which contact details are
 * revealed and a JSON Schema of their requirements; `people` holds the guardian consent age and the
 * current consent version (issue 7; docs/decisions.md "People, consent and actions").
 *
 * Field annotations read from the schemas (besides the standard `title`, `description`, `examples`):
 * - `x-identity`: "name" | "phone" | "email" — identity fields, encrypted at rest (DESIGN.md data rules)
 * - `x-private`: true — never leaves the aggregator (not part of the item pushed to signals)
 * - `x-vectorize`: true — embedded for search, as `label: value` lines
 * - `x-matchable`: true — compared field by field by the match score
 * - `x-external-id`: true — the operator's own id, used to skip rows already onboarded
 * - `x-location`: "latitude" | "longitude" — becomes `item_locations`
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { z } from 'zod';

export const NETWORKS_DIR = fileURLToPath(new URL('../../fixtures/networks/', import.meta.url));

const ANNOTATIONS = ['x-identity', 'x-private', 'x-vectorize', 'x-matchable', 'x-external-id', 'x-location'];

const endpoint = z.object({ network: z.string().min(1), domain: z.string().min(1) });
const networkFileSchema = z.object({
  id: z.string().regex(/^[a-z0-9][a-z0-9-]*$/),
  name: z.string().min(1),
  version: z.string().min(1),
  default_phone_region: z.string().regex(/^[A-Z]{2}$/),
  csv_array_delimiter: z.string().min(1).max(3).default('|'),
  registration_modes: z.array(z.string().min(1)).min(1),
  aggregator_types: z.record(z.string(), z.object({ label: z.string(), domains: z.array(z.string()).min(1) })),
  domains: z.record(z.string().regex(/^[a-z][a-z0-9_]*$/), z.object({
    label: z.string().min(1),
    item_type: z.string().min(1),
    schema_version: z.string().min(1),
    go_live_required: z.array(z.string()),
    schema: z.record(z.string(), z.unknown()),
  })).refine((d) => Object.keys(d).length > 0, 'at least one domain'),
  actions: z.record(z.string(), z.object({
    interactions: z.array(z.object({ from: endpoint, to: endpoint })),
    // People and actions (issue 7): an action type with `statuses` can be performed (POST /api/v1/action/perform).
    label: z.string().min(1).optional(),
    /** Status → the statuses it may move to, or terminal. The first status is where an action starts. */
    statuses: z.record(z.string().regex(/^[a-z][a-z0-9_]*$/), z.object({
      next: z.array(z.string()).default([]),
      terminal: z.boolean().default(false),
    })).optional(),
    /** The status at which each side sees the other's contact details; set: consent is required to perform. */
    reveals_pii_on_status: z.string().optional(),
    /** JSON Schema (draft 2020-12) of `requirements_snapshot`. */
    requirements_schema: z.record(z.string(), z.unknown()).optional(),
  })),
  /** People (issue 7): the age under which a guardian must consent, and the current consent version. */
  people: z.object({
    guardian_consent_age: z.number().int().min(1).max(120).default(18),
    consent_version: z.number().int().min(1).default(1),
  }).default({ guardian_consent_age: 18, consent_version: 1 }),
  // Issue 8: the aggregator registration schema, and the item type organisations are pushed to signals as.
  aggregator_registration: z.object({ version: z.string().min(1), schema: z.record(z.string(), z.unknown()) }).optional(),
  organisation: z.object({ domain: z.string().regex(/^[a-z][a-z0-9_]*$/), item_type: z.string().min(1), schema: z.record(z.string(), z.unknown()) }).optional(),
});

export type NetworkFile = z.infer<typeof networkFileSchema>;

export type FieldKind = 'string' | 'number' | 'integer' | 'boolean' | 'array';

/** One top-level field of a participant schema, with its annotations read out. */
export interface FieldInfo {
  name: string;
  /** `title`, else the name. */
  label: string;
  description?: string;
  kind: FieldKind;
  /** For arrays: the kind of the items. */
  itemKind?: Exclude<FieldKind, 'array'>;
  /** Closed set of values (for arrays: of the items). */
  enum?: (string | number)[];
  required: boolean;
  format?: string;
  /** `maxLength` (for arrays: of the items). */
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  examples: unknown[];
  identity?: 'name' | 'phone' | 'email';
  private: boolean;
  vectorize: boolean;
  matchable: boolean;
  externalId: boolean;
  location?: 'latitude' | 'longitude';
}

export interface Domain {
  name: string;
  label: string;
  itemType: string;
  /** `$id` of the participant schema. */
  schemaId: string;
  schemaVersion: string;
  schema: Record<string, unknown>;
  /** Ajv validator, compiled once. */
  validate: ValidateFunction;
  fields: FieldInfo[];
  goLiveRequired: string[];
}

export interface Network {
  id: string;
  name: string;
  version: string;
  defaultPhoneRegion: string;
  csvArrayDelimiter: string;
  registrationModes: string[];
  aggregatorTypes: NetworkFile['aggregator_types'];
  domains: Map<string, Domain>;
  actions: NetworkFile['actions'];
  /** The aggregator registration schema (POST /v1/aggregator-registrations/create), compiled. */
  aggregatorRegistration?: { version: string; schema: Record<string, unknown>; validate: ValidateFunction };
  /** Organisations as items in signals: their item domain and type, and the item_state schema. */
  organisation?: { domain: string; itemType: string; schemaId: string; validate: ValidateFunction };
  /** Ajv validators of the actions' `requirements_schema`, by action type (issue 7). */
  actionRequirements: Map<string, ValidateFunction>;
  people: NetworkFile['people'];
}

/** Thrown when a network file is missing or inconsistent; the message says where. */
export class NetworkConfigError extends Error {
  name = 'NetworkConfigError';
}

/** A new Ajv for draft 2020-12 with formats and our annotation keywords (strict mode kept on). */
export function createAjv(): Ajv2020 {
  const ajv = new Ajv2020({ allErrors: true, strict: true });
  const addFormats = addFormatsModule as unknown as (a: Ajv2020) => void;
  addFormats(ajv);
  ajv.addVocabulary(ANNOTATIONS);
  return ajv;
}

function fieldInfo(name: string, prop: Record<string, any>, required: boolean): FieldInfo {
  const kind: FieldKind = prop.type;
  if (!['string', 'number', 'integer', 'boolean', 'array'].includes(kind)) {
    throw new NetworkConfigError(`field "${name}": type must be string, number, integer, boolean or array`);
  }
  const items = kind === 'array' ? (prop.items ?? {}) : undefined;
  return {
    name,
    label: prop.title ?? name,
    description: prop.description,
    kind,
    itemKind: items?.type,
    enum: kind === 'array' ? items?.enum : prop.enum,
    required,
    format: prop.format,
    maxLength: kind === 'array' ? items?.maxLength : prop.maxLength,
    minimum: prop.minimum,
    maximum: prop.maximum,
    examples: prop.examples ?? [],
    identity: prop['x-identity'],
    private: prop['x-private'] === true,
    vectorize: prop['x-vectorize'] === true,
    matchable: prop['x-matchable'] === true,
    externalId: prop['x-external-id'] === true,
    location: prop['x-location'],
  };
}

/**
 * Builds a Network from parsed JSON: validates its structure, compiles each participant schema
 * with Ajv and checks cross-references (go-live fields, aggregator-type domains, interactions).
 * @throws NetworkConfigError naming the offending part.
 */
export function parseNetwork(json: unknown, ajv = createAjv()): Network {
  const parsed = networkFileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new NetworkConfigError(`${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  const file = parsed.data;
  const domains = new Map<string, Domain>();
  for (const [name, d] of Object.entries(file.domains)) {
    const where = `domains.${name}`;
    const schema = d.schema as Record<string, any>;
    if (typeof schema.$id !== 'string') throw new NetworkConfigError(`${where}.schema: $id is required`);
    let validate: ValidateFunction;
    try {
      validate = ajv.compile(schema);
    } catch (err) {
      throw new NetworkConfigError(`${where}.schema: ${(err as Error).message}`);
    }
    const required = new Set<string>(schema.required ?? []);
    const fields = Object.entries<Record<string, any>>(schema.properties ?? {}).map(([field, prop]) => {
      try {
        return fieldInfo(field, prop, required.has(field));
      } catch (err) {
        throw new NetworkConfigError(`${where}.schema: ${(err as Error).message}`);
      }
    });
    const names = new Set(fields.map((f) => f.name));
    for (const f of d.go_live_required) {
      // Signals applies the rule to the pushed item, which never holds private fields.
      if (!names.has(f)) throw new NetworkConfigError(`${where}.go_live_required: unknown field "${f}"`);
      if (fields.find((x) => x.name === f)!.private) throw new NetworkConfigError(`${where}.go_live_required: "${f}" is private`);
    }
    const locations = fields.filter((f) => f.location).map((f) => f.location).sort().join(',');
    if (locations && locations !== 'latitude,longitude') {
      throw new NetworkConfigError(`${where}.schema: x-location needs exactly one latitude and one longitude field`);
    }
    domains.set(name, {
      name, label: d.label, itemType: d.item_type, schemaId: schema.$id, schemaVersion: d.schema_version,
      schema, validate, fields, goLiveRequired: d.go_live_required,
    });
  }
  for (const [type, t] of Object.entries(file.aggregator_types)) {
    for (const domain of t.domains) {
      if (!domains.has(domain)) throw new NetworkConfigError(`aggregator_types.${type}: unknown domain "${domain}"`);
    }
  }
  const actionRequirements = new Map<string, ValidateFunction>();
  for (const [action, a] of Object.entries(file.actions)) {
    checkActionStatuses(action, a);
    if (a.requirements_schema) {
      try {
        actionRequirements.set(action, ajv.compile(a.requirements_schema));
      } catch (err) {
        throw new NetworkConfigError(`actions.${action}.requirements_schema: ${(err as Error).message}`);
      }
    }
    for (const i of a.interactions) {
      for (const end of [i.from, i.to]) {
        if (end.network === file.id && !domains.has(end.domain)) {
          throw new NetworkConfigError(`actions.${action}: unknown domain "${end.domain}"`);
        }
      }
    }
  }
  const compileExtra = (where: string, schema: Record<string, unknown>) => {
    try {
      return ajv.compile(schema);
    } catch (err) {
      throw new NetworkConfigError(`${where}: ${(err as Error).message}`);
    }
  };
  let aggregatorRegistration: Network['aggregatorRegistration'];
  if (file.aggregator_registration) {
    const { version, schema } = file.aggregator_registration;
    const types = ((schema as any).properties?.type?.enum ?? []) as string[];
    const unknownType = types.find((t) => !file.aggregator_types[t]);
    if (unknownType) throw new NetworkConfigError(`aggregator_registration.schema: type "${unknownType}" is not an aggregator type`);
    aggregatorRegistration = { version, schema, validate: compileExtra('aggregator_registration.schema', schema) };
  }
  let organisation: Network['organisation'];
  if (file.organisation) {
    const { domain, item_type: itemType, schema } = file.organisation;
    if (domains.has(domain)) throw new NetworkConfigError(`organisation.domain: "${domain}" is a participant domain`);
    if (typeof schema.$id !== 'string') throw new NetworkConfigError('organisation.schema: $id is required');
    organisation = { domain, itemType, schemaId: schema.$id, validate: compileExtra('organisation.schema', schema) };
  }
  return {
    aggregatorRegistration, organisation,
    id: file.id, name: file.name, version: file.version, defaultPhoneRegion: file.default_phone_region,
    csvArrayDelimiter: file.csv_array_delimiter, registrationModes: file.registration_modes,
    aggregatorTypes: file.aggregator_types, domains, actions: file.actions, actionRequirements, people: file.people,
  };
}

/** Checks an action's status graph: known targets, terminal statuses without moves, a reachable PII status. */
function checkActionStatuses(action: string, a: NetworkFile['actions'][string]): void {
  const where = `actions.${action}`;
  if (!a.statuses) {
    if (a.reveals_pii_on_status || a.requirements_schema) throw new NetworkConfigError(`${where}: reveals_pii_on_status and requirements_schema need statuses`);
    return;
  }
  const names = Object.keys(a.statuses);
  if (names.length === 0) throw new NetworkConfigError(`${where}.statuses: at least one status`);
  for (const [status, s] of Object.entries(a.statuses)) {
    if (s.terminal && s.next.length) throw new NetworkConfigError(`${where}.statuses.${status}: a terminal status has no next statuses`);
    for (const n of s.next) if (!names.includes(n)) throw new NetworkConfigError(`${where}.statuses.${status}: unknown next status "${n}"`);
  }
  if (a.reveals_pii_on_status && !names.includes(a.reveals_pii_on_status)) {
    throw new NetworkConfigError(`${where}.reveals_pii_on_status: unknown status "${a.reveals_pii_on_status}"`);
  }
}

/** Reads and validates `<dir>/<id>.json`. @throws NetworkConfigError when missing or invalid. */
export async function loadNetwork(id: string, dir = NETWORKS_DIR): Promise<Network> {
  let text: string;
  try {
    text = await readFile(`${dir}/${id}.json`, 'utf8');
  } catch {
    throw new NetworkConfigError(`NETWORK=${id}: no file ${id}.json in ${dir}`);
  }
  try {
    return parseNetwork(JSON.parse(text));
  } catch (err) {
    throw new NetworkConfigError(`NETWORK=${id}: ${(err as Error).message}`);
  }
}


/** The participant domains an aggregator with these aggregator types may onboard. */
export function domainsForAggregatorTypes(network: Network, types: string[]): Set<string> {
  return new Set(types.flatMap((t) => network.aggregatorTypes[t]?.domains ?? []));
}

/**
 * Whether the interaction matrix lets `from` act on or relate to `to`: true when any action
 * (or only `actionType`, when given) lists that pair. Cross-network pairs count as listed.
 */
export function interactionAllowed(
  network: Network,
  from: { network: string; domain: string },
  to: { network: string; domain: string },
  actionType?: string,
): boolean {
  const actions = actionType ? [network.actions[actionType]].filter(Boolean) : Object.values(network.actions);
  return actions.some((a) => a.interactions.some((i) =>
    i.from.network === from.network && i.from.domain === from.domain && i.to.network === to.network && i.to.domain === to.domain));
}

/**
 * Lifecycle status of a new or changed item under the go-live rules: `live` when every field of
 * the domain's `go_live_required` has a value (non-empty string or array), otherwise `draft`.
 */
export function goLiveStatus(domain: Domain, state: Record<string, unknown>): 'live' | 'draft' {
  const present = (v: unknown) => v !== undefined && v !== null && v !== '' && !(Array.isArray(v) && v.length === 0);
  return domain.goLiveRequired.every((f) => present(state[f])) ? 'live' : 'draft';
}
