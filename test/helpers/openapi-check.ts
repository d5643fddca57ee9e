/**
 * Checks recorded exchanges (test/helpers/exchange-recorder.ts) against a service's OpenAPI 3.1
 * document with Ajv (JSON Schema draft 2020-12, the dialect of OpenAPI 3.1 schemas): the route is
 * documented, the status is one of its responses, the response's content type is documented and a
 * JSON body validates against its schema; for a 2xx answer, the JSON request body, path
 * parameters and query validate too.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Exchange } from './exchange-recorder.ts';

type Doc = Record<string, any>;

export interface Operation {
  template: string;
  method: string;
  operation: Record<string, any>;
  params: Record<string, string>;
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch'];

/** The documented operation serving `method path` (a literal segment wins over a parameter), or undefined. */
export function findOperation(doc: Doc, method: string, path: string): Operation | undefined {
  const candidates: (Operation & { literal: number })[] = [];
  for (const [template, item] of Object.entries<Record<string, any>>(doc.paths ?? {})) {
    const operation = item[method.toLowerCase()];
    if (!operation) continue;
    const names: string[] = [];
    const pattern = template.split('/').map((segment) => {
      const m = /^\{(\w+)\}$/.exec(segment);
      if (!m) return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      names.push(m[1]);
      return '([^/]+)';
    }).join('/');
    const match = new RegExp(`^${pattern}$`).exec(path);
    if (!match) continue;
    const params = Object.fromEntries(names.map((n, i) => [n, decodeURIComponent(match[i + 1])]));
    candidates.push({ template, method: method.toLowerCase(), operation, params, literal: template.replace(/\{\w+\}/g, '').length });
  }
  candidates.sort((a, b) => b.literal - a.literal);
  return candidates[0];
}

/** Validators of the schemas of one document (compiled once each, with the document's components). */
export class OpenApiChecker {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true });
  private readonly coercing = new Ajv2020({ strict: false, allErrors: true, coerceTypes: true });
  private readonly cache = new Map<object, ValidateFunction>();

  constructor(readonly doc: Doc) {
    addFormats.default(this.ajv);
    addFormats.default(this.coercing);
  }

  /** A validator of `schema` (a schema of this document, whose `#/components/...` refs resolve). */
  validator(schema: object, coerce = false): ValidateFunction {
    let validate = this.cache.get(schema);
    if (!validate) {
      validate = (coerce ? this.coercing : this.ajv).compile({ ...schema, components: this.doc.components });
      this.cache.set(schema, validate);
    }
    return validate;
  }

  private problems(schema: object, value: unknown, what: string, coerce = false): string[] {
    const validate = this.validator(schema, coerce);
    return validate(value) ? [] : [`${what}: ${JSON.stringify(validate.errors?.slice(0, 5))}`];
  }

  /** What is wrong with `exchange` against the document (empty when it conforms). */
  check(exchange: Exchange): string[] {
    const found = findOperation(this.doc, exchange.method, exchange.path);
    if (!found) return ['route not documented'];
    const { operation, params } = found;
    const response = operation.responses?.[String(exchange.status)] ?? operation.responses?.default;
    if (!response) return [`status ${exchange.status} not documented (documented: ${Object.keys(operation.responses ?? {}).join(', ')})`];
    const problems: string[] = [];
    const mediaType = exchange.responseContentType?.split(';')[0].trim();
    if (exchange.responseBody.length > 0) {
      const content = Object.entries<Record<string, any>>(response.content ?? {}).find(([type]) => type.split(';')[0].trim() === mediaType)?.[1];
      if (!content) problems.push(`response content type ${mediaType} not documented for ${exchange.status}`);
      else if (mediaType === 'application/json' && content.schema) {
        problems.push(...this.problems(content.schema, JSON.parse(exchange.responseBody.toString('utf8')), 'response body'));
      }
    }
    if (exchange.status >= 200 && exchange.status < 300) {
      const requestType = exchange.requestContentType?.split(';')[0].trim();
      const bodyDoc = operation.requestBody?.content?.[requestType ?? ''];
      if (exchange.requestBody !== undefined && requestType === 'application/json') {
        if (!bodyDoc) problems.push(`request content type ${requestType} not documented`);
        else if (bodyDoc.schema) problems.push(...this.problems(bodyDoc.schema, exchange.requestBody, 'request body'));
      }
      for (const where of ['path', 'query'] as const) {
        const declared = (operation.parameters ?? []).filter((p: any) => p.in === where);
        const given = where === 'path' ? params : exchange.query;
        const schema = {
          type: 'object',
          properties: Object.fromEntries(declared.map((p: any) => [p.name, p.schema ?? {}])),
          required: declared.filter((p: any) => p.required).map((p: any) => p.name),
          additionalProperties: false,
        };
        problems.push(...this.problems(schema, { ...given }, `${where} parameters`, true));
      }
    }
    return problems;
  }

  /** Every example in the document (request bodies and responses) checked against its schema. */
  checkExamples(): string[] {
    const problems: string[] = [];
    for (const [template, item] of Object.entries<Record<string, any>>(this.doc.paths ?? {})) {
      for (const method of METHODS) {
        const op = item[method];
        if (!op) continue;
        const contents = [
          ...Object.entries<any>(op.requestBody?.content ?? {}).map(([type, c]) => [`request ${type}`, c] as const),
          ...Object.entries<any>(op.responses ?? {}).flatMap(([status, r]) => Object.entries<any>(r.content ?? {}).map(([type, c]) => [`${status} ${type}`, c] as const)),
        ];
        for (const [where, content] of contents) {
          if (content.example === undefined || !content.schema) continue;
          problems.push(...this.problems(content.schema, content.example, `${method.toUpperCase()} ${template} ${where} example`));
        }
      }
    }
    return problems;
  }
}
