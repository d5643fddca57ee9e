/**
 * Task `signals-send-message` (lib/signals/messages.ts `MessagePayload`): decrypts the recipient
 * and the code, renders the message and sends it by e-mail or SMS. A failure throws, and
 * graphile-worker retries with backoff (a retry may deliver a message twice, never zero times).
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { createSmsSender } from '../lib/platform/sms.ts';
import { renderMessage, type MessagePayload } from '../lib/signals/messages.ts';

export function signalsSendMessage(ctx: PlatformContext): Task {
  const sms = createSmsSender(ctx.config);
  return async (raw) => {
    const payload = raw as MessagePayload;
    const to = ctx.pii.decrypt(payload.to_encrypted);
    const { subject, text } = renderMessage(payload.kind, {
      name: payload.name_encrypted ? ctx.pii.decrypt(payload.name_encrypted) : null,
      code: payload.code_encrypted ? ctx.pii.decrypt(payload.code_encrypted) : undefined,
      networkName: payload.network_name,
    });
    if (payload.channel === 'sms') await sms.send({ to, text });
    else await ctx.mailer.send({ to, subject, text });
  };
}
