/**
 * Task `aggregator-send-decision-email` {kind, subject_id}: tells the registrant (organisation
 * owner, or aggregator contact) that the registration was approved or rejected (with the reason).
 * A failed send throws and graphile-worker retries it.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { organisationForReview } from '../lib/aggregator/organisations.ts';
import { aggregatorForReview } from '../lib/aggregator/registrations.ts';

export function aggregatorSendDecisionEmail(ctx: PlatformContext): Task {
  return async (payload) => {
    const { kind, subject_id: subjectId } = payload as { kind: 'organisation' | 'aggregator'; subject_id: string };
    const subject = kind === 'organisation'
      ? await organisationForReview(ctx.pool, ctx.pii, subjectId)
      : await aggregatorForReview(ctx.pool, ctx.pii, subjectId);
    const person = subject && ('owner' in subject ? subject.owner : subject.contact);
    if (!subject || !person || (subject.status !== 'approved' && subject.status !== 'rejected')) return;
    const name = 'display_name' in subject ? subject.display_name : subject.name;
    const approved = subject.status === 'approved';
    await ctx.mailer.send({
      to: person.email,
      subject: `Your ${kind} registration of ${name} was ${approved ? 'approved' : 'rejected'}`,
      text: approved
        ? `Dear ${person.name},\n\nthe ${kind} registration of ${name} on the ${ctx.network.name} was approved. Your login is enabled.\n`
        : `Dear ${person.name},\n\nthe ${kind} registration of ${name} on the ${ctx.network.name} was rejected.\n\nReason: ${subject.status_reason ?? '(none given)'}\n`,
    });
  };
}
