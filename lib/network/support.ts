/**
 * Support requests, filed on both services (spec: aggregator `POST /v1/support`, signals
 * `POST /api/v1/support/`; issue 10 item 3 and issue 7 item 7): one request schema, one reference
 * space (`SUP-YYYYMMDD-XXXXXX`, unique in platform.support_requests), one rate limit, one e-mail
 * task. The routes only validate, store and enqueue; tasks/support-send-email.ts sends the e-mail
 * to SUPPORT_EMAIL (+ SUPPORT_CC_EMAIL) with Reply-To the submitter and the attachments attached.
 *
 * Attachments are stored durably in object storage (`support/<request_id>/<n>`) between the
 * request and the task (not in the job row: a job payload of 10 MB would be read by every worker
 * poll), and deleted once the e-mail has gone.
 */
import { createHash, randomInt, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import { z } from 'zod';
import type { Config } from '../platform/config.ts';
import type { PiiCrypto } from '../platform/crypto.ts';
import { withTransaction, type Pool } from '../platform/db.ts';
import { enqueue } from '../platform/jobs.ts';
import type { Mailer, SentMail } from '../platform/mail.ts';
import type { ObjectStorage } from '../platform/storage.ts';

/** Task identifier of tasks/support-send-email.ts; payload `{request_id}`. */
export const SUPPORT_EMAIL_TASK = 'support-send-email';

export const SUPPORT_TYPES = ['complaint', 'support_request'] as const;
/** At most this many attachments (issue 7: "≤ 5 × 5 MB"); the same on both services. */
export const MAX_ATTACHMENTS = 5;
/** Largest attachment, decoded (5 MiB; issue 10). */
export const MAX_ATTACHMENT_BYTES = 5 * 1024 * 1024;
/** Largest sum of the attachments, decoded (10 MiB; issue 10). */
export const MAX_ATTACHMENTS_TOTAL_BYTES = 10 * 1024 * 1024;
/**
 * JSON body limit of the support routes: the attachments' total in base64 (4/3) plus 1 MiB for the
 * other fields, so that a body the limits above accept is never refused by the parser first.
 */
export const SUPPORT_BODY_LIMIT_BYTES = Math.ceil(MAX_ATTACHMENTS_TOTAL_BYTES / 3) * 4 + 1024 * 1024;
/** Requests per submitter per window (issue 10: 5 per hour). */
export const SUPPORT_RATE_LIMIT = { points: 5, durationSeconds: 3600 };

/** The request body, with the spec's limits ("Limits": name, email, phone, details, filename, contentType). */
export const supportRequestSchema = z.object({
  name: z.string().trim().min(1).max(200),
  email: z.email().max(320).optional(),
  phone: z.string().trim().min(3).max(20).optional(),
  type: z.enum(SUPPORT_TYPES),
  details: z.string().trim().min(1).max(5000),
  consent: z.literal(true, { error: 'consent must be true: the submitter agrees that the request and its contacts are passed to support' }),
  attachments: z.array(z.object({
    filename: z.string().min(1).max(255),
    contentType: z.string().min(1).max(127),
    data: z.string().min(1),
  })).optional(),
});

export type SupportRequest = z.infer<typeof supportRequestSchema>;

/** A refused request: `status` 400 (malformed attachment), 413 (too large) or 429 (rate limit). */
export class SupportRequestError extends Error {
  name = 'SupportRequestError';
  constructor(readonly status: 400 | 413 | 429, message: string, readonly field?: string, readonly retryAfterSeconds?: number) {
    super(message);
  }
}

export interface DecodedAttachment {
  filename: string;
  contentType: string;
  content: Buffer;
}

// One character class (no nested repetition: megabytes of text must not overflow the regex engine).
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const isBase64 = (data: string) => BASE64.test(data) && data.length % 4 !== 1 && (!data.includes('=') || data.length % 4 === 0);

/**
 * Decodes the base64 attachments (RFC 4648 §4; line breaks allowed, as in MIME), checking the
 * size limits on the encoded length before decoding anything.
 * @throws SupportRequestError 413 beyond MAX_ATTACHMENTS, MAX_ATTACHMENT_BYTES or
 *   MAX_ATTACHMENTS_TOTAL_BYTES; 400 when `data` is not base64.
 */
export function decodeAttachments(attachments: SupportRequest['attachments']): DecodedAttachment[] {
  const list = attachments ?? [];
  if (list.length > MAX_ATTACHMENTS) {
    throw new SupportRequestError(413, `attachments: at most ${MAX_ATTACHMENTS} attachments (${list.length} sent)`, 'attachments');
  }
  const cleaned = list.map((a) => a.data.replace(/[\r\n]/g, ''));
  let total = 0;
  cleaned.forEach((data, i) => {
    const size = Math.floor(data.length / 4) * 3 + ([0, 0, 1, 2][data.length % 4]) - (data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0);
    if (size > MAX_ATTACHMENT_BYTES) {
      throw new SupportRequestError(413, `attachments.${i}.data: ${list[i].filename} is larger than ${MAX_ATTACHMENT_BYTES} bytes (5 MiB) decoded`, `attachments.${i}.data`);
    }
    total += size;
  });
  if (total > MAX_ATTACHMENTS_TOTAL_BYTES) {
    throw new SupportRequestError(413, `attachments: together larger than ${MAX_ATTACHMENTS_TOTAL_BYTES} bytes (10 MiB) decoded`, 'attachments');
  }
  return cleaned.map((data, i) => {
    if (!isBase64(data)) throw new SupportRequestError(400, `attachments.${i}.data: not base64 (RFC 4648)`, `attachments.${i}.data`);
    return { filename: list[i].filename, contentType: list[i].contentType, content: Buffer.from(data, 'base64') };
  });
}

/** Rate limiter of support requests per submitter, on PostgreSQL (platform.support_rate_limits). */
export function createSupportRateLimiter(pool: Pool): RateLimiterPostgres {
  return new RateLimiterPostgres({
    storeClient: pool, storeType: 'pool', schemaName: 'platform', tableName: 'support_rate_limits', tableCreated: true,
    keyPrefix: 'support', points: SUPPORT_RATE_LIMIT.points, duration: SUPPORT_RATE_LIMIT.durationSeconds,
  });
}

/**
 * Takes one request of `submitter`'s allowance (hashed: no e-mail address lands in the store).
 * @throws SupportRequestError 429 with `retryAfterSeconds` when the allowance is spent.
 */
export async function consumeSupportAllowance(limiter: RateLimiterPostgres, submitter: string): Promise<void> {
  try {
    await limiter.consume(createHash('sha256').update(submitter).digest('base64url'));
  } catch (err) {
    if (err instanceof RateLimiterRes) {
      const retryAfterSeconds = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      throw new SupportRequestError(429, `At most ${SUPPORT_RATE_LIMIT.points} support requests per hour; try again in ${retryAfterSeconds} s`, undefined, retryAfterSeconds);
    }
    throw err;
  }
}

const REFERENCE_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** A new reference `SUP-YYYYMMDD-XXXXXX` (UTC date, 6 random letters or digits: 36^6 per day). */
export function newSupportReference(now = new Date()): string {
  const date = now.toISOString().slice(0, 10).replace(/-/g, '');
  let suffix = '';
  for (let i = 0; i < 6; i++) suffix += REFERENCE_ALPHABET[randomInt(REFERENCE_ALPHABET.length)];
  return `SUP-${date}-${suffix}`;
}

export interface SupportDeps {
  pool: Pool;
  storage: ObjectStorage;
  pii: PiiCrypto;
}

interface StoredAttachment {
  filename: string;
  content_type: string;
  size_bytes: number;
  object_key: string;
}

/**
 * Files a validated request: stores its attachments, records it under a fresh unique reference
 * and enqueues SUPPORT_EMAIL_TASK in the same transaction. Nothing is left behind on failure
 * (stored attachments are deleted).
 * @returns the reference and the request id.
 */
export async function fileSupportRequest(deps: SupportDeps, input: {
  service: 'signals' | 'aggregator';
  filedBy: string;
  request: SupportRequest;
  attachments: DecodedAttachment[];
}): Promise<{ reference: string; requestId: string }> {
  const requestId = randomUUID();
  const stored: StoredAttachment[] = [];
  try {
    for (const [i, a] of input.attachments.entries()) {
      const key = `support/${requestId}/${i + 1}`;
      stored.push({ filename: a.filename, content_type: a.contentType, size_bytes: a.content.length, object_key: key });
      await deps.storage.put(key, a.content, { contentType: a.contentType });
    }
    const { name, email, phone, details, type } = input.request;
    const encrypted = deps.pii.encrypt(JSON.stringify({ name, email, phone, details }));
    return await withTransaction(deps.pool, async (client) => {
      // A reference taken already (one in 2 billion a day) is drawn again.
      for (let attempt = 0; ; attempt++) {
        const reference = newSupportReference();
        await client.query('SAVEPOINT reference');
        try {
          await client.query(
            `INSERT INTO platform.support_requests (request_id, reference, service, filed_by, type, request_encrypted, attachments)
             VALUES ($1, $2, $3, $4, $5, $6, $7)`,
            [requestId, reference, input.service, input.filedBy, type, encrypted, JSON.stringify(stored)]);
        } catch (err) {
          if ((err as { code?: string }).code === '23505' && attempt < 5) {
            await client.query('ROLLBACK TO SAVEPOINT reference');
            continue;
          }
          throw err;
        }
        await enqueue(client, { task: SUPPORT_EMAIL_TASK, payload: { request_id: requestId }, jobKey: `support:${requestId}`, maxAttempts: 25 });
        return { reference, requestId };
      }
    });
  } catch (err) {
    await Promise.all(stored.map((s) => deps.storage.delete(s.object_key).catch(() => {})));
    throw err;
  }
}

/**
 * Sends the e-mail of request `requestId` (SUPPORT_EMAIL_TASK): to SUPPORT_EMAIL, cc
 * SUPPORT_CC_EMAIL when set, Reply-To the submitter's e-mail when given, the attachments attached;
 * then records `emailed_at` and deletes the stored attachments. A request already e-mailed is left
 * alone, so a retried job does not send twice (unless it failed between sending and recording).
 * @returns the mail sent, or null when there was nothing to send.
 * @throws the mailer's Error (the job is retried by graphile-worker).
 */
export async function sendSupportEmail(deps: SupportDeps & { mailer: Mailer; config: Pick<Config, 'SUPPORT_EMAIL' | 'SUPPORT_CC_EMAIL'> }, requestId: string): Promise<SentMail | null> {
  const { rows: [row] } = await deps.pool.query<{
    reference: string; service: string; filed_by: string; type: string; request_encrypted: string;
    attachments: StoredAttachment[]; created_at: Date; emailed_at: Date | null;
  }>('SELECT * FROM platform.support_requests WHERE request_id = $1', [requestId]);
  if (!row || row.emailed_at) return null;
  const request = JSON.parse(deps.pii.decrypt(row.request_encrypted)) as Pick<SupportRequest, 'name' | 'email' | 'phone' | 'details'>;
  const attachments = await Promise.all(row.attachments.map(async (a) => ({
    filename: a.filename, contentType: a.content_type, content: await streamToBuffer(await deps.storage.get(a.object_key)),
  })));
  const kind = row.type === 'complaint' ? 'Complaint' : 'Support request';
  const sent = await deps.mailer.send({
    to: deps.config.SUPPORT_EMAIL,
    cc: deps.config.SUPPORT_CC_EMAIL,
    replyTo: request.email,
    subject: `[${row.reference}] ${kind} from ${request.name}`,
    text: [
      `Reference: ${row.reference}`,
      `Type: ${row.type}`,
      `Filed on: ${row.service} service, by ${row.filed_by}, at ${row.created_at.toISOString()}`,
      `Name: ${request.name}`,
      `E-mail: ${request.email ?? '(not given)'}`,
      `Phone: ${request.phone ?? '(not given)'}`,
      `Attachments: ${attachments.length ? attachments.map((a) => `${a.filename} (${a.content.length} bytes)`).join(', ') : 'none'}`,
      '',
      request.details,
      '',
    ].join('\n'),
    attachments,
  });
  await deps.pool.query(
    `UPDATE platform.support_requests SET emailed_at = now(), message_id = $2, rejected_recipients = $3 WHERE request_id = $1`,
    [requestId, sent.messageId, sent.rejected]);
  await Promise.all(row.attachments.map((a) => deps.storage.delete(a.object_key).catch(() => {})));
  return sent;
}

async function streamToBuffer(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
