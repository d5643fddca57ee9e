/**
 * Outgoing SMS. With SMS_PROVIDER_URL, each message is POSTed to a generic HTTP provider as JSON
 * `{to, text, message_id}` with header `x-ldp-signature: sha256=<hex HMAC-SHA-256 of the body,
 * keyed by SMS_PROVIDER_SECRET>` (the usual webhook signing scheme, verifiable by the receiver);
 * otherwise each message is written as a `.txt` file into `<DATA_DIR>/outbox/sms`, like the
 * e-mail outbox, so that nothing is silently dropped. Only graphile-worker tasks send.
 */
import { createHmac, randomUUID } from 'node:crypto';
import { rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { mkdirPrivate, writePrivateFile } from './private-files.ts';
import type { Config } from './config.ts';

export interface SmsMessage {
  /** E.164 phone number. */
  to: string;
  text: string;
}

export interface SentSms {
  messageId: string;
  via: 'http' | 'outbox';
  /** For the outbox: the `.txt` file written. */
  file?: string;
}

export interface SmsSender {
  readonly location: string;
  /**
   * Sends `message`. @throws Error when the provider cannot be reached, times out (30 s) or answers
   * other than 2xx, or when the outbox cannot be written: the calling task fails and is retried.
   */
  send(message: SmsMessage): Promise<SentSms>;
}

/** Hex HMAC-SHA-256 of `body` with `secret`: the value after `sha256=` in x-ldp-signature. */
export function smsSignature(secret: string, body: string): string {
  return createHmac('sha256', secret).update(body).digest('hex');
}

/** The SMS sender the configuration selects. */
export function createSmsSender(config: Pick<Config, 'SMS_PROVIDER_URL' | 'SMS_PROVIDER_SECRET' | 'dataDirPath'>): SmsSender {
  if (config.SMS_PROVIDER_URL) {
    const url = config.SMS_PROVIDER_URL;
    const secret = config.SMS_PROVIDER_SECRET!;
    return {
      location: `http:${new URL(url).host}`,
      async send(message) {
        const messageId = randomUUID();
        const body = JSON.stringify({ to: message.to, text: message.text, message_id: messageId });
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-ldp-signature': `sha256=${smsSignature(secret, body)}` },
          body,
          signal: AbortSignal.timeout(30_000),
        });
        if (!res.ok) throw new Error(`SMS provider answered ${res.status}: ${(await res.text().catch(() => '')).slice(0, 200)}`);
        return { messageId, via: 'http' };
      },
    };
  }
  const outbox = path.join(config.dataDirPath, 'outbox', 'sms');
  return {
    location: `outbox:${outbox}`,
    async send(message) {
      const messageId = randomUUID();
      await mkdirPrivate(outbox);
      const file = path.join(outbox, `${new Date().toISOString().replace(/[:.]/g, '-')}-${messageId}.txt`);
      // Written beside and renamed into place, so whoever watches the outbox never reads half a message.
      const tmp = path.join(outbox, `.${messageId}.partial`);
      try {
        await writePrivateFile(tmp, `To: ${message.to}\nMessage-Id: ${messageId}\n\n${message.text}\n`);
        await rename(tmp, file);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
      return { messageId, via: 'outbox', file };
    },
  };
}
