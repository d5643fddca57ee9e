/**
 * Configuration: every environment variable the platform reads, validated with zod at start.
 *
 * Keys keep their environment-variable names so that README's configuration table, `.env.example`
 * and the code use one vocabulary. A bad value stops the start with a message naming the variable.
 */
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const optionalString = z.string().min(1).optional();
/** An e-mail address (local part @ domain; `localhost` domains allowed, as for a local mail catcher). */
const mailbox = z.string().regex(/^[^\s@<>]+@[^\s@<>]+$/, 'expected an e-mail address such as support@example.org');

/** Parses sizes such as `200mb`, `10MiB`, `1048576` into bytes. */
const byteSize = z.string().transform((value, ctx) => {
  const match = /^(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib)?$/i.exec(value.trim());
  if (!match) {
    ctx.addIssue({ code: 'custom', message: 'expected a size such as 200mb or 1048576' });
    return z.NEVER;
  }
  const units: Record<string, number> = { b: 1, kb: 1e3, kib: 1024, mb: 1e6, mib: 1024 ** 2, gb: 1e9, gib: 1024 ** 3 };
  return Math.floor(Number(match[1]) * units[(match[2] ?? 'b').toLowerCase()]);
});

export const configSchema = z.object({
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  DATA_DIR: z.string().min(1).default('.data'),
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  DATABASE_POOL_SIZE: positiveInt.default(10),
  EMBEDDED_POSTGRES_PORT: port.default(54329),
  NETWORK: z.string().regex(/^[a-z0-9][a-z0-9-]*$/, 'expected a network id such as local-discovery').default('local-discovery'),

  HOST: z.string().min(1).default('127.0.0.1'),
  SIGNALS_PORT: port.default(3001),
  AGGREGATOR_PORT: port.default(3002),
  SEARCH_PORT: port.default(3003),
  /** Base URLs the parts use to reach each other (default: HOST and the port of each service). */
  SIGNALS_URL: z.url().optional(),
  SEARCH_URL: z.url().optional(),
  /** Public base URL of the aggregator service, used in registration links. */
  AGGREGATOR_PUBLIC_URL: z.url().optional(),
  /** Key the platform's own parts use to call signals and search; generated into DATA_DIR when unset. */
  INTERNAL_API_KEY: z.string().min(32).optional(),
  HTTP_BODY_LIMIT: byteSize.default(1024 * 1024),
  /** Bearer token every client must send to read GET /metrics (loopback ones too); unset: loopback clients only. */
  METRICS_TOKEN: z.string().min(16).optional(),
  /** How long signals waits for the search service (discover, match score) before answering its degraded way. */
  SEARCH_TIMEOUT_MS: positiveInt.default(2000),

  WORKER_CONCURRENCY: positiveInt.default(2),
  /** Interface and port of `ldp worker`'s GET /health and GET /metrics (port 0 = any free port, printed at start). */
  WORKER_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  WORKER_METRICS_PORT: port.default(3004),
  /**
   * Nice value (setpriority(2), 0-19) of background work — the worker's thread, and where PostgreSQL
   * runs on this host the worker's sessions and those applying voice callbacks — so it yields the CPU to request handling.
   */
  BACKGROUND_NICE: z.coerce.number().int().min(0).max(19).default(10),
  SHUTDOWN_TIMEOUT_MS: positiveInt.default(30_000),

  JWT_ISSUER: z.string().min(1).default('urn:ldp:built-in-issuer'),
  JWT_AUDIENCE: z.string().min(1).default('ldp-aggregator'),
  /** Private key of the built-in issuer as a JWK (JSON) or PKCS#8 PEM; generated into DATA_DIR when unset. */
  JWT_PRIVATE_KEY: optionalString,
  OIDC_ISSUER: z.url().optional(),
  OIDC_JWKS_URL: z.url().optional(),
  OIDC_AUDIENCE: optionalString,
  OIDC_ALGORITHMS: z.string().regex(/^[A-Z0-9]+(,[A-Z0-9]+)*$/, 'expected a comma-separated list such as RS256,ES256').default('RS256,ES256'),

  /** 32-byte key for PII encryption and blind indexes, base64; generated into DATA_DIR when unset. */
  PII_KEY: z.base64().refine((v) => Buffer.from(v, 'base64').length === 32, 'expected 32 bytes, base64-encoded').optional(),

  S3_ENDPOINT: z.url().optional(),
  S3_ACCESS_KEY: optionalString,
  S3_SECRET_KEY: optionalString,
  S3_BUCKET: z.string().min(3).default('ldp'),
  S3_REGION: z.string().min(1).default('us-east-1'),

  SMTP_URL: z.url({ protocol: /^smtps?$/ }).optional(),
  MAIL_FROM: z.string().min(3).default('Local Discovery Platform <no-reply@localhost>'),

  BULK_UPLOAD_MAX_BYTES: byteSize.default(200 * 1000 * 1000),
  /** Rows per bulk-upload chunk: the unit processed (and redone after a crash) in one transaction. */
  BULK_UPLOAD_CHUNK_ROWS: positiveInt.max(50_000).default(5000),
  // Issue 17 (bulk onboarding II): how long POST /v1/bulk-uploads/{id}/preview waits for the dry
  // run before answering 202 with the preview to poll (0: never waits); POST …/match waits as long
  // for suggestions the worker has not stored yet (then 409).
  BULK_PREVIEW_WAIT_MS: z.coerce.number().int().min(0).max(60_000).default(10_000),
  // A sync upload (issue 30) pausing more than this share of the aggregator's live and draft
  // participants of the domain needs allow_large_pause: a truncated file must never empty a network.
  BULK_SYNC_MAX_PAUSE_FRACTION: z.coerce.number().min(0).max(1).default(0.2),
  // Issue 29 (Trust II): Server-Sent Events streams (api/http/event-stream.ts) per caller and per
  // process (429 with Retry-After beyond), and how long one stream lasts before it asks the client to reconnect.
  /** Open event streams one caller (an aggregator) may hold on one process. */
  EVENT_STREAMS_PER_CALLER: positiveInt.max(1000).default(10),
  /** Open event streams one process serves in all. */
  EVENT_STREAMS_MAX: positiveInt.max(100_000).default(200),
  /** Longest life of one event stream (s); it then ends with a `reconnect` event. */
  EVENT_STREAM_MAX_SECONDS: positiveInt.max(86_400).default(300),

  // Issue 15 (hardening): retention of bulk-upload data and the limits of an uploaded table
  // (docs/decisions.md "Hardening").
  /** Days after a bulk upload completes or fails (or, never started, was created) before its file, error report and error rows are deleted. */
  BULK_RETENTION_DAYS: positiveInt.max(3650).default(30),
  /** Most columns a table may have (header row or any data row). */
  BULK_MAX_COLUMNS: positiveInt.max(16_384).default(1000),
  /** Longest cell, in characters (Excel's own limit is 32,767). */
  BULK_MAX_CELL_CHARS: positiveInt.max(4 * 1024 * 1024).default(32_767),
  /** Most data rows a table may have (an Excel sheet holds 1,048,575 below its header). */
  BULK_MAX_ROWS: positiveInt.default(1_048_575),
  /** Most bytes the parts of an XLSX file may decompress to, in all (a zip bomb is refused at upload). */
  BULK_XLSX_MAX_UNCOMPRESSED_BYTES: byteSize.default(1000 * 1000 * 1000),
  /** Largest compression ratio of one part of an XLSX file (uncompressed / compressed size). */
  BULK_XLSX_MAX_RATIO: positiveInt.default(200),

  /** Embeddings: `auto` uses transformers when the model loads, else the built-in hashing provider. */
  EMBEDDING_PROVIDER: z.enum(['auto', 'transformers', 'hashing']).default('auto'),
  /** Sentence-embedding model (transformers.js model id). */
  EMBEDDING_MODEL: z.string().min(1).default('Xenova/all-MiniLM-L6-v2'),
  /** Folder holding `<EMBEDDING_MODEL>/` (offline); unset: downloaded once into DATA_DIR/models. */
  EMBEDDING_MODEL_PATH: optionalString,
  /** Weights variant (transformers.js dtype), recorded as the model version's quantisation. */
  EMBEDDING_DTYPE: z.enum(['fp32', 'fp16', 'q8', 'int8', 'uint8', 'q4', 'bnb4', 'q4f16']).default('fp32'),
  /** Texts per call of the model. */
  EMBEDDING_BATCH_SIZE: positiveInt.default(32),
  /** How long `auto` waits for the model to load (or download) before falling back to hashing. */
  EMBEDDING_LOAD_TIMEOUT_MS: positiveInt.default(300_000),
  /** Cosine similarity from which an item matches a textSearch without containing its words; unset: the provider's default (hashing 0.2, transformers 0.35). */
  SEARCH_TEXT_SIMILARITY_THRESHOLD: z.coerce.number().min(-1).max(1).optional(),
  /** Items per step of the search reconciliation (change-feed page, re-embedding batch). */
  SEARCH_RECONCILE_BATCH_SIZE: positiveInt.max(1000).default(500),
  /** Work per run of the search reconciliation (ms; at least one step); the rest continues in a follow-up job. */
  SEARCH_RECONCILE_RUN_MS: z.coerce.number().int().min(0).default(60_000),
  /**
   * Searches one search process answers at once; the others wait their turn, first come first
   * served (lib/search/engine.ts inSearchSlot). Default: twice the CPU cores, so that each core has
   * one search in this process's code and one in PostgreSQL's.
   */
  SEARCH_CONCURRENCY: positiveInt.default(() => 2 * os.availableParallelism()),
  // Issue 10: support requests (both services) and the aggregator dashboard.
  /** Where support requests are e-mailed (spec POST /v1/support, POST /api/v1/support/). */
  SUPPORT_EMAIL: mailbox.default('support@localhost'),
  /** Also copied on every support request, when set. */
  SUPPORT_CC_EMAIL: mailbox.optional(),
  /** How long a computed dashboard is served before it is computed again. */
  DASHBOARD_TTL_SECONDS: positiveInt.default(60),
  /** How long GET /v1/dashboard waits for a recomputation (refresh=true, stale or missing payload). */
  DASHBOARD_REFRESH_WAIT_MS: positiveInt.max(60_000).default(10_000),
  /** Match score bands: the least score of `strong`, `good` and `fair` (descending, 0..100); below fair is `weak`. */
  MATCH_SCORE_BANDS: z.string().default('75,55,35').transform((value, ctx) => {
    const parts = value.split(',').map((v) => Number(v.trim()));
    if (parts.length !== 3 || parts.some((n) => !Number.isFinite(n) || n < 0 || n > 100) || !(parts[0] > parts[1] && parts[1] > parts[2])) {
      ctx.addIssue({ code: 'custom', message: 'expected three descending scores 0..100 for strong,good,fair, such as 75,55,35' });
      return z.NEVER;
    }
    return { strong: parts[0], good: parts[1], fair: parts[2] };
  }),

  // Issue 8: organisation and aggregator registration, registration links, public registration.
  /** Registers POST /v1/orgs/create (organisations with aggregators under them); 404 when false. */
  ORG_HIERARCHY_ENABLED: z.enum(['true', 'false']).default('false').transform((v) => v === 'true'),
  /** Who reviews organisation and aggregator registrations (receives the signed review links). */
  NETWORK_ADMIN_EMAIL: z.string().regex(/^[^\s@]+@[^\s@]+$/, 'expected an e-mail address').default('network-admin@localhost'),
  /** HS256 secret (at least 32 characters) signing review links; generated into DATA_DIR when unset. */
  REVIEW_LINK_SECRET: z.string().min(32).optional(),
  /** Public registrations accepted per link and client IP within REGISTRATION_RATE_LIMIT_WINDOW_SECONDS. */
  REGISTRATION_RATE_LIMIT_POINTS: positiveInt.default(20),
  REGISTRATION_RATE_LIMIT_WINDOW_SECONDS: positiveInt.default(60),
  /** Organisation sign-ups (POST /v1/orgs/create, one review e-mail each) per client IP and per owner e-mail within ORG_SIGNUP_RATE_LIMIT_WINDOW_SECONDS. */
  ORG_SIGNUP_RATE_LIMIT_PER_IP: positiveInt.default(10),
  ORG_SIGNUP_RATE_LIMIT_PER_EMAIL: positiveInt.default(3),
  ORG_SIGNUP_RATE_LIMIT_WINDOW_SECONDS: positiveInt.default(3600),
  // Voice campaigns (issue 9): the provider, its batches and the job chunks.
  /** Base URL of the voice provider (POST <url>/v1/batches); default: `ldp voice-provider` on its default port. */
  VOICE_PROVIDER_URL: z.url().default('http://127.0.0.1:3090'),
  /** HMAC-SHA256 secret shared with the voice provider (both directions); generated into DATA_DIR when unset. */
  VOICE_PROVIDER_SECRET: z.string().min(16).optional(),
  /** How long one batch submission may take before it is abandoned and retried. */
  VOICE_PROVIDER_TIMEOUT_MS: positiveInt.default(10_000),
  /** Retries of a batch submission (network error, 429, 5xx), with exponential backoff. */
  VOICE_PROVIDER_RETRIES: z.coerce.number().int().min(0).max(10).default(3),
  /** Calls per batch submitted to the provider. */
  VOICE_PROVIDER_BATCH_SIZE: positiveInt.max(10_000).default(1000),
  /** Where the provider calls back; default: AGGREGATOR_PUBLIC_URL + /v1/campaign/voice/callbacks. */
  VOICE_CALLBACK_URL: z.url().optional(),
  /** Items per dispatch chunk job: the unit redone after a crash. */
  VOICE_CHUNK_ITEMS: positiveInt.max(50_000).default(5000),
  /**
   * How long (ms) a read voice-job page answers polls without asking PostgreSQL again (re-read in
   * the background past a quarter of it): changes made by the worker show after at most this long;
   * callbacks this process applied show at once. 0: every poll reads.
   */
  VOICE_POLL_MAX_AGE_MS: z.coerce.number().int().min(0).max(10_000).default(1000),
  /** Largest body of POST /v1/campaign/voice (100,000 item ids are ~3.9 MB of JSON). */
  VOICE_JOB_MAX_BODY_BYTES: byteSize.default(8 * 1000 * 1000),
  /** Days after an export job's CSV (decrypted contacts) was written before it is deleted from object storage (Trust II). */
  VOICE_EXPORT_RETENTION_DAYS: positiveInt.max(3650).default(7),
  // --- People, consent, sessions and actions (issue 7) ---
  /** Generic HTTP SMS provider: each message is POSTed as signed JSON; unset: `.txt` files in DATA_DIR/outbox/sms. */
  SMS_PROVIDER_URL: z.url().optional(),
  /** HMAC-SHA-256 key signing the SMS provider's request body (header x-ldp-signature); required with SMS_PROVIDER_URL. */
  SMS_PROVIDER_SECRET: z.string().min(16).optional(),
  /** At most this many minors per guardian (phone or e-mail). */
  GUARDIAN_MAX_WARDS: positiveInt.default(5),
  /** Lifetime of a login session (cookie and server-side row), seconds. */
  SESSION_TTL_SECONDS: positiveInt.default(7 * 24 * 3600),
  /** Signups and guardian signups per identifier (e-mail or phone) and per client IP, per hour. */
  SIGNUP_LIMIT_PER_IDENTIFIER: positiveInt.default(5),
  SIGNUP_LIMIT_PER_IP: positiveInt.default(30),
  /** Login through the external OIDC issuer (OIDC_ISSUER) when OIDC_CLIENT_ID is set: authorization code + PKCE. */
  OIDC_CLIENT_ID: optionalString,
  OIDC_CLIENT_SECRET: optionalString,
  /** Where the issuer sends the browser back; default SIGNALS_URL + /api/v1/auth/session/callback. */
  OIDC_REDIRECT_URL: z.url().optional(),
}).superRefine((c, ctx) => {
  if (c.S3_ENDPOINT && (!c.S3_ACCESS_KEY || !c.S3_SECRET_KEY)) {
    ctx.addIssue({ code: 'custom', path: ['S3_ACCESS_KEY'], message: 'S3_ACCESS_KEY and S3_SECRET_KEY are required when S3_ENDPOINT is set' });
  }
  if (c.SMS_PROVIDER_URL && !c.SMS_PROVIDER_SECRET) {
    ctx.addIssue({ code: 'custom', path: ['SMS_PROVIDER_SECRET'], message: 'SMS_PROVIDER_SECRET is required when SMS_PROVIDER_URL is set' });
  }
  if (c.OIDC_CLIENT_ID && !c.OIDC_ISSUER) {
    ctx.addIssue({ code: 'custom', path: ['OIDC_CLIENT_ID'], message: 'OIDC_CLIENT_ID needs OIDC_ISSUER (and OIDC_JWKS_URL)' });
  }
  if (Boolean(c.OIDC_ISSUER) !== Boolean(c.OIDC_JWKS_URL)) {
    ctx.addIssue({ code: 'custom', path: ['OIDC_JWKS_URL'], message: 'OIDC_ISSUER and OIDC_JWKS_URL must be set together' });
  }
});

export type Config = z.infer<typeof configSchema> & {
  /** DATA_DIR resolved to an absolute path. */
  dataDirPath: string;
};

/** Thrown when the environment holds an invalid value; `message` names every bad variable. */
export class ConfigError extends Error {
  constructor(readonly problems: { variable: string; message: string }[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  ${p.variable}: ${p.message}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Reads and validates the configuration from `env` (default `process.env`). Empty strings count
 * as unset, as in most `.env` tooling.
 *
 * @throws ConfigError naming each invalid variable.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Config {
  const known = Object.keys(configSchema.shape);
  const input: Record<string, string> = {};
  for (const key of known) {
    const value = env[key];
    if (value !== undefined && value !== '') input[key] = value;
  }
  const parsed = configSchema.safeParse(input);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((issue) => ({
      variable: String(issue.path[0] ?? 'environment'),
      message: issue.code === 'invalid_type' ? 'invalid value' : issue.message,
    })));
  }
  return { ...parsed.data, dataDirPath: path.resolve(cwd, parsed.data.DATA_DIR) };
}

/** Base URLs of the three services, from the configured URLs or HOST and the ports. */
export function serviceUrls(config: Config, ports?: { signals: number; aggregator: number; search: number }) {
  const host = config.HOST.includes(':') ? `[${config.HOST}]` : config.HOST;
  const p = ports ?? { signals: config.SIGNALS_PORT, aggregator: config.AGGREGATOR_PORT, search: config.SEARCH_PORT };
  return {
    signals: config.SIGNALS_URL ?? `http://${host}:${p.signals}`,
    search: config.SEARCH_URL ?? `http://${host}:${p.search}`,
    aggregator: config.AGGREGATOR_PUBLIC_URL ?? `http://${host}:${p.aggregator}`,
  };
}
