/**
 * Task `support-send-email` {request_id}: e-mails a filed support request with its attachments
 * (lib/network/support.ts `sendSupportEmail`); retried with backoff by graphile-worker while the
 * mail server refuses.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { sendSupportEmail } from '../lib/network/support.ts';

export function supportSendEmail(ctx: PlatformContext): Task {
  return async (payload) => {
    const { request_id: requestId } = payload as { request_id: string };
    const sent = await sendSupportEmail(ctx, requestId);
    if (sent?.rejected.length) ctx.logger.warn({ requestId, rejected: sent.rejected }, 'support e-mail refused for some recipients');
  };
}
