/**
 * Messages to people (welcome, one-time codes): enqueued in the request's transaction as jobs of
 * the `signals-send-message` task, which sends them by e-mail (lib/platform/mail.ts) or SMS
 * (lib/platform/sms.ts) — never inside a request. The payload holds the recipient and the code
 * encrypted with the PII key, so the job table never stores them in clear.
 */
import type { PiiCrypto } from '../platform/crypto.ts';
import type { Queryable } from '../platform/db.ts';
import { enqueue } from '../platform/jobs.ts';
import type { Contact } from './people.ts';

export const SEND_MESSAGE_TASK = 'signals-send-message';

export type MessageKind = 'welcome' | 'guardian_code' | 'login_code' | 'action_guardian_code';

/** Payload of SEND_MESSAGE_TASK. */
export interface MessagePayload {
  kind: MessageKind;
  channel: 'email' | 'sms';
  /** Encrypted e-mail address or E.164 phone. */
  to_encrypted: string;
  /** Encrypted name of the recipient (or of the ward, for guardian codes), when known. */
  name_encrypted?: string | null;
  /** Encrypted one-time code, for the code kinds. */
  code_encrypted?: string;
  network_name: string;
}

/**
 * Enqueues one message to `contact` (its e-mail when there is one, else its phone by SMS), in the
 * caller's transaction. Up to 10 attempts with graphile-worker's backoff.
 */
export async function enqueueMessage(
  db: Queryable,
  pii: PiiCrypto,
  message: { kind: MessageKind; contact: Contact; name?: string | null; code?: string; networkName: string },
): Promise<'email' | 'sms'> {
  const channel = message.contact.email ? 'email' : 'sms';
  const to = message.contact.email ?? message.contact.phone;
  if (!to) throw new Error('a message needs an e-mail or a phone');
  const payload: MessagePayload = {
    kind: message.kind,
    channel,
    to_encrypted: pii.encrypt(to),
    name_encrypted: message.name ? pii.encrypt(message.name) : null,
    ...(message.code ? { code_encrypted: pii.encrypt(message.code) } : {}),
    network_name: message.networkName,
  };
  await enqueue(db, { task: SEND_MESSAGE_TASK, payload, maxAttempts: 10 });
  return channel;
}

/** Subject and text of a message (plain text: it must read the same in an SMS). */
export function renderMessage(kind: MessageKind, values: { name: string | null; code?: string; networkName: string }): { subject: string; text: string } {
  const hello = values.name ? `Hello ${values.name},` : 'Hello,';
  switch (kind) {
    case 'welcome':
      return { subject: `Welcome to ${values.networkName}`, text: `${hello}\n\nyou are registered with ${values.networkName}.` };
    case 'guardian_code':
      return {
        subject: `${values.networkName}: guardian consent code`,
        text: `${hello}\n\n${values.code} is the code to confirm your consent as guardian of a minor registering with ${values.networkName}. It is valid for 10 minutes. If you did not expect this, ignore it.`,
      };
    case 'action_guardian_code':
      return {
        subject: `${values.networkName}: guardian approval code`,
        text: `${hello}\n\n${values.code} is the code to approve an action of the minor in your care on ${values.networkName}. It is valid for 10 minutes. If you did not expect this, ignore it.`,
      };
    case 'login_code':
      return {
        subject: `${values.networkName}: your sign-in code`,
        text: `${hello}\n\n${values.code} is your code to sign in to ${values.networkName}. It is valid for 10 minutes.`,
      };
  }
}
