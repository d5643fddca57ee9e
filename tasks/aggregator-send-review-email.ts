/**
 * Task `aggregator-send-review-email` {review_id}: e-mails the signed review links (approve, reject)
 * of one registration, valid until the review expires (7 days): an organisation's or an
 * aggregator's to NETWORK_ADMIN_EMAIL; a `join` review (an aggregator asking to join an existing
 * organisation) to that organisation's contact (`organisationContact`; the network admin when it
 * has none). A review already used, or whose subject is no longer awaiting it, sends nothing.
 * A failed send throws and graphile-worker retries it.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { organisationContact, organisationForReview } from '../lib/aggregator/organisations.ts';
import { aggregatorForReview } from '../lib/aggregator/registrations.ts';
import { getReview, reviewLinkKey, signReviewToken } from '../lib/aggregator/review-links.ts';

export function aggregatorSendReviewEmail(ctx: PlatformContext): Task {
  return async (payload) => {
    const { review_id: reviewId } = payload as { review_id: string };
    const review = await getReview(ctx.pool, reviewId);
    if (!review || review.used_at) return;
    const subject = review.subject_kind === 'organisation'
      ? await organisationForReview(ctx.pool, ctx.pii, review.subject_id)
      : await aggregatorForReview(ctx.pool, ctx.pii, review.subject_id);
    if (!subject || subject.status !== 'pending') return;
    if (review.subject_kind === 'join' && 'org_approved_at' in subject && subject.org_approved_at) return;
    const key = await reviewLinkKey(ctx.config);
    const link = async (intent: 'approve' | 'reject') => new URL(`/review/${await signReviewToken(key,
      { reviewId, kind: review.subject_kind, subjectId: review.subject_id, intent }, review.expires_at)}`, ctx.urls.aggregator).href;
    const [approve, reject] = [await link('approve'), await link('reject')];
    const name = 'display_name' in subject ? subject.display_name : `${subject.name} (organisation ${subject.org_name})`;
    const person = 'owner' in subject ? subject.owner : subject.contact;
    const closing = [
      '',
      `Approve: ${approve}`,
      `Reject: ${reject}`,
      '',
      `Each link opens a page where you confirm the decision. The links work once and expire at ${review.expires_at.toISOString()}; an expired link offers to send a fresh one.`,
    ];
    if (review.subject_kind === 'join' && 'org_id' in subject) {
      const contact = await organisationContact(ctx.pool, ctx.pii, subject.org_id);
      await ctx.mailer.send({
        to: contact?.email ?? ctx.config.NETWORK_ADMIN_EMAIL,
        subject: `Approve ${subject.name} joining your organisation ${subject.org_name}`,
        text: [
          `${contact ? `Dear ${contact.name},\n\n` : ''}someone registered the aggregator ${subject.name} in your organisation ${subject.org_name} on the ${ctx.network.name}.`,
          'Approve it only if it belongs to your organisation: it will act in its name. The network admin reviews it after you.',
          '',
          person ? `Contact: ${person.name} <${person.email}>, ${person.phone}` : '',
          ...closing,
        ].join('\n'),
      });
      return;
    }
    await ctx.mailer.send({
      to: ctx.config.NETWORK_ADMIN_EMAIL,
      subject: `Review the ${review.subject_kind} registration of ${name}`,
      text: [
        `A new ${review.subject_kind} registration waits for your review on the ${ctx.network.name}.`,
        '',
        `Name: ${name}`,
        person ? `Contact: ${person.name} <${person.email}>, ${person.phone}` : '',
        'org_approved_at' in subject && subject.org_approved_at ? `It joins the existing organisation ${subject.org_name}, which approved it.` : '',
        ...closing,
      ].join('\n'),
    });
  };
}
