/**
 * Outgoing e-mail through nodemailer: SMTP when SMTP_URL is set, otherwise each message is written
 * as an RFC 5322 `.eml` file into `<DATA_DIR>/outbox` (nodemailer's stream transport renders it),
 * so that nothing is silently dropped on a machine without a mail server.
 */
import { randomUUID } from 'node:crypto';
import { rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { mkdirPrivate, writePrivateFile } from './private-files.ts';
import type { Transporter } from 'nodemailer';
import type { Config } from './config.ts';

export interface MailMessage {
  to: string | string[];
  cc?: string | string[];
  replyTo?: string;
  subject: string;
  text: string;
  html?: string;
  attachments?: { filename: string; contentType: string; content: Buffer | string }[];
}

export interface SentMail {
  messageId: string;
  /** Where the message went: `smtp` or `outbox`. */
  via: 'smtp' | 'outbox';
  /** For the outbox: the `.eml` file written. */
  file?: string;
  /** Envelope recipients the SMTP server accepted (for the outbox: all of them). */
  accepted: string[];
  /**
   * Recipients the SMTP server refused while accepting the message for the others. The message was
   * delivered to `accepted`, so a caller that retried would send it to them twice: record these instead.
   */
  rejected: string[];
}

export interface Mailer {
  readonly location: string;
  /**
   * Sends `message` from MAIL_FROM.
   * @throws Error (nodemailer's, with `code` and `responseCode`) when the server cannot be reached,
   *   refuses the login, the sender, every recipient or the message itself, or when the outbox
   *   cannot be written: a message is either handed over or the call fails.
   */
  send(message: MailMessage): Promise<SentMail>;
}

const addresses = (list: unknown): string[] =>
  (Array.isArray(list) ? list : []).map((a) => (typeof a === 'string' ? a : (a as { address: string }).address));

/**
 * A nodemailer transport made on first use: nodemailer (~2.6 MB of heap kept alive, more in code)
 * is loaded by the first message, so a worker that sends none — a bulk upload's — never holds it
 * (issue 17, the worker's memory).
 */
function lazyTransport(options: Parameters<typeof import('nodemailer').createTransport>[0]): () => Promise<Transporter> {
  let transport: Promise<Transporter> | undefined;
  return () => {
    transport ??= import('nodemailer').then((m) => m.default.createTransport(options) as Transporter);
    transport.catch(() => { transport = undefined; });
    return transport;
  };
}

/**
 * The mailer the configuration selects. SMTP_URL follows nodemailer's connection URLs
 * (`smtp://user:pass@host:587`, `smtps://…:465`, options as query parameters such as
 * `?ignoreTLS=true`); percent-encoded user names and passwords are decoded.
 */
export function createMailer(config: Pick<Config, 'SMTP_URL' | 'MAIL_FROM' | 'dataDirPath'>): Mailer {
  const from = config.MAIL_FROM;
  if (config.SMTP_URL) {
    const transport = lazyTransport(config.SMTP_URL);
    const url = new URL(config.SMTP_URL);
    return {
      location: `smtp:${url.hostname}:${url.port || (url.protocol === 'smtps:' ? 465 : 587)}`,
      async send(message) {
        const info = await (await transport()).sendMail({ from, ...message });
        return { messageId: info.messageId, via: 'smtp', accepted: addresses(info.accepted), rejected: addresses(info.rejected) };
      },
    };
  }
  const outbox = path.join(config.dataDirPath, 'outbox');
  const transport = lazyTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  return {
    location: `outbox:${outbox}`,
    async send(message) {
      const info = await (await transport()).sendMail({ from, ...message });
      await mkdirPrivate(outbox);
      const safeId = info.messageId.replace(/[^A-Za-z0-9.@_-]/g, '');
      const file = path.join(outbox, `${new Date().toISOString().replace(/[:.]/g, '-')}-${safeId}.eml`);
      // Written beside and renamed into place, so whoever watches the outbox never reads half a message.
      const tmp = path.join(outbox, `.${randomUUID()}.partial`);
      try {
        await writePrivateFile(tmp, info.message as Buffer);
        await rename(tmp, file);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
      return { messageId: info.messageId, via: 'outbox', file, accepted: info.envelope.to, rejected: [] };
    },
  };
}
