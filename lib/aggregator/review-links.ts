/**
 * Signed review links for registrations (spec "Organisation and aggregator registration": the
 * network admin is e-mailed a signed review link). Each review e-mail is one row of
 * aggregator.review_links; its two links (intent approve, intent reject) are HS256 JWTs (RFC 7519,
 * signed with jose) carrying the review id as `jti`, the subject as `sub` and a 7-day `exp`.
 *
 * Rules: a tampered or foreign token is refused; an expired one is refused but still names its
 * subject, so the admin can ask for a fresh e-mail; the first decision through either link of an
 * e-mail wins by compare-and-set on `used_at` (a second use is refused).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { errors as joseErrors, jwtVerify, SignJWT, type JWTPayload } from 'jose';
import type { Config } from '../platform/config.ts';
import type { Queryable } from '../platform/db.ts';
import { readOrCreateSecret } from '../platform/secrets.ts';

export const REVIEW_INTENTS = ['approve', 'reject'] as const;
export type ReviewIntent = (typeof REVIEW_INTENTS)[number];
/**
 * What a review decides: an organisation's or an aggregator's registration (by the network admin),
 * or an aggregator joining an existing organisation (`join`, by that organisation's contact).
 */
export type ReviewSubjectKind = 'organisation' | 'aggregator' | 'join';
const SUBJECT_KINDS: readonly string[] = ['organisation', 'aggregator', 'join'];

/** How long a review link stays valid: 7 days. */
export const REVIEW_LINK_TTL_SECONDS = 7 * 24 * 3600;
const AUDIENCE = 'ldp-registration-review';
const ISSUER = 'ldp-aggregator';

/** A verified review token. */
export interface ReviewClaims {
  reviewId: string;
  kind: ReviewSubjectKind;
  subjectId: string;
  intent: ReviewIntent;
}

/** Why a review token is refused: `tampered` (bad signature or claims) or `expired` (with its claims). */
export class ReviewLinkError extends Error {
  name = 'ReviewLinkError';
  constructor(readonly reason: 'tampered' | 'expired', message: string, readonly claims?: ReviewClaims) {
    super(message);
  }
}

/** The HS256 key: REVIEW_LINK_SECRET, or 32 random bytes generated once into DATA_DIR/keys/review-link.key. */
export async function reviewLinkKey(config: Pick<Config, 'REVIEW_LINK_SECRET' | 'dataDirPath'>): Promise<Uint8Array> {
  const secret = config.REVIEW_LINK_SECRET
    ?? await readOrCreateSecret(config.dataDirPath, 'review-link.key', () => randomBytes(32).toString('base64url'));
  return new TextEncoder().encode(secret);
}

/** Records a new review of `subject` valid for `ttlSeconds` (inside the caller's transaction); returns its id. */
export async function createReview(db: Queryable, kind: ReviewSubjectKind, subjectId: string, ttlSeconds = REVIEW_LINK_TTL_SECONDS): Promise<string> {
  const reviewId = randomUUID();
  await db.query(
    `INSERT INTO aggregator.review_links (review_id, subject_kind, subject_id, expires_at) VALUES ($1, $2, $3, now() + make_interval(secs => $4))`,
    [reviewId, kind, subjectId, ttlSeconds]);
  return reviewId;
}

/** Signs the token of one intent of review `reviewId`, expiring at `expiresAt`. */
export async function signReviewToken(key: Uint8Array, claims: ReviewClaims, expiresAt: Date): Promise<string> {
  return new SignJWT({ intent: claims.intent, kind: claims.kind })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(ISSUER).setAudience(AUDIENCE).setSubject(claims.subjectId).setJti(claims.reviewId)
    .setIssuedAt().setExpirationTime(Math.floor(expiresAt.getTime() / 1000))
    .sign(key);
}

function claimsOf(payload: JWTPayload): ReviewClaims | null {
  const { jti, sub, intent, kind } = payload as Record<string, unknown>;
  if (typeof jti !== 'string' || typeof sub !== 'string' || !REVIEW_INTENTS.includes(intent as ReviewIntent)
    || !SUBJECT_KINDS.includes(kind as string)) return null;
  return { reviewId: jti, subjectId: sub, intent: intent as ReviewIntent, kind: kind as ReviewSubjectKind };
}

/**
 * Verifies a review token (signature with HS256 only, issuer, audience, exp).
 * @throws ReviewLinkError `tampered`, or `expired` carrying the (signature-checked) claims.
 */
export async function verifyReviewToken(key: Uint8Array, token: string): Promise<ReviewClaims> {
  try {
    const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'], issuer: ISSUER, audience: AUDIENCE, requiredClaims: ['exp', 'jti', 'sub'] });
    const claims = claimsOf(payload);
    if (!claims) throw new ReviewLinkError('tampered', 'This review link is not valid.');
    return claims;
  } catch (err) {
    if (err instanceof ReviewLinkError) throw err;
    // jose checks the signature before the claims, so an expired token's payload is authentic.
    if (err instanceof joseErrors.JWTExpired) {
      throw new ReviewLinkError('expired', 'This review link has expired.', claimsOf(err.payload) ?? undefined);
    }
    throw new ReviewLinkError('tampered', 'This review link is not valid (altered, truncated or not issued here).');
  }
}

/** A review row. */
export interface ReviewRow {
  review_id: string;
  subject_kind: ReviewSubjectKind;
  subject_id: string;
  expires_at: Date;
  used_at: Date | null;
  used_intent: ReviewIntent | null;
}

/** The review `reviewId`, or null. */
export async function getReview(db: Queryable, reviewId: string): Promise<ReviewRow | null> {
  const { rows } = await db.query<ReviewRow>('SELECT * FROM aggregator.review_links WHERE review_id = $1', [reviewId]);
  return rows[0] ?? null;
}

/**
 * Marks review `reviewId` used for `intent` if it is unused and unexpired (compare-and-set, inside
 * the caller's transaction). Returns true when this call won.
 */
export async function useReview(db: Queryable, reviewId: string, intent: ReviewIntent): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE aggregator.review_links SET used_at = now(), used_intent = $2
      WHERE review_id = $1 AND used_at IS NULL AND expires_at > now()`, [reviewId, intent]);
  return rowCount === 1;
}

/** Task e-mailing the review links of review `{review_id}` (to the network admin; a `join` review to the organisation's contact). */
export const REVIEW_EMAIL_TASK = 'aggregator-send-review-email';
/** Task e-mailing the registrant the decision on `{kind, subject_id}`. */
export const DECISION_EMAIL_TASK = 'aggregator-send-decision-email';
