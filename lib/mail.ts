/**
 * Outgoing e-mail through nodemailer: SMTP when SMTP_URL is set, otherwise each message is written
 * as an RFC 5322 `.eml` file into `<DATA_DIR>/outbox` (nodemailer's stream transport renders it),
 * so that nothing is silently dropped on a machine without a mail server.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import nodemailer from 'nodemailer';
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
}

export interface Mailer {
  readonly location: string;
  /** Sends `message` from MAIL_FROM. @throws Error when the SMTP server refuses it. */
  send(message: MailMessage): Promise<SentMail>;
}

/** The mailer the configuration selects. */
export function createMailer(config: Pick<Config, 'SMTP_URL' | 'MAIL_FROM' | 'dataDirPath'>): Mailer {
  const from = config.MAIL_FROM;
  if (config.SMTP_URL) {
    const transport = nodemailer.createTransport(config.SMTP_URL);
    const url = new URL(config.SMTP_URL);
    return {
      location: `smtp:${url.hostname}:${url.port || (url.protocol === 'smtps:' ? 465 : 587)}`,
      async send(message) {
        const info = await transport.sendMail({ from, ...message });
        return { messageId: info.messageId, via: 'smtp' };
      },
    };
  }
  const outbox = path.join(config.dataDirPath, 'outbox');
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  return {
    location: `outbox:${outbox}`,
    async send(message) {
      const info = await transport.sendMail({ from, ...message });
      await mkdir(outbox, { recursive: true });
      const safeId = info.messageId.replace(/[^A-Za-z0-9.@_-]/g, '');
      const file = path.join(outbox, `${new Date().toISOString().replace(/[:.]/g, '-')}-${safeId}.eml`);
      await writeFile(file, info.message as Buffer);
      return { messageId: info.messageId, via: 'outbox', file };
    },
  };
}
