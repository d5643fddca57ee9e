/**
 * The repeat tracker of bulk onboarding's staging (lib/aggregator/bulk/duplicates.ts): which earlier
 * row of a file a passed row repeats, with integer keys (external ids, E.164 phones) held in typed
 * arrays and every other key as a string. The end-to-end outcomes (error CSV reasons) are tested in
 * bulk-upload-processing.test.ts; here, the key forms that must stay apart and a table that grows.
 */
import { describe, expect, it } from 'vitest';
import { createRepeatTracker } from '../../lib/aggregator/bulk/duplicates.ts';
import type { RowOutcome } from '../../lib/aggregator/bulk/row-coercion.ts';
import { loadNetwork } from '../../lib/network/config.ts';

const network = await loadNetwork('local-discovery');
const provider = network.domains.get('provider')!;

const passed = (keys: { phone?: string; email?: string; externalId?: string }): RowOutcome => ({
  ok: true,
  participant: { profile: {}, identity: { phone: keys.phone, email: keys.email }, externalId: keys.externalId, locations: [] },
});

describe('repeat tracker', () => {
  it('answers the first row of every repeated integer key while its table grows', () => {
    const check = createRepeatTracker(provider);
    const ids = Array.from({ length: 20_000 }, (_, n) => String(733_237 + n * 7_919));
    ids.forEach((id, n) => expect(check(passed({ externalId: id }), n + 2)).toBeUndefined());
    ids.forEach((id, n) => expect(check(passed({ externalId: id }), 30_000 + n)).toEqual([['external_id', n + 2]]));
    // 15 digits are kept as numbers, longer ids as strings: both found again.
    expect(check(passed({ externalId: '999999999999999' }), 50_001)).toBeUndefined();
    expect(check(passed({ externalId: '1234567890123456789' }), 50_002)).toBeUndefined();
    expect(check(passed({ externalId: '999999999999999' }), 50_003)).toEqual([['external_id', 50_001]]);
    expect(check(passed({ externalId: '1234567890123456789' }), 50_004)).toEqual([['external_id', 50_002]]);
  });

  it('keeps apart keys that differ as text but not as numbers', () => {
    const check = createRepeatTracker(provider);
    expect(check(passed({ externalId: '7' }), 2)).toBeUndefined();
    expect(check(passed({ externalId: '007' }), 3)).toBeUndefined();
    expect(check(passed({ externalId: '7.0' }), 4)).toBeUndefined();
    expect(check(passed({ externalId: '007' }), 5)).toEqual([['external_id', 3]]);
    expect(check(passed({ phone: '+919812345678' }), 6)).toBeUndefined();
    // The same digits as an external id or without the `+` are other keys.
    expect(check(passed({ externalId: '919812345678' }), 7)).toBeUndefined();
    expect(check(passed({ phone: '919812345678' }), 8)).toBeUndefined();
    expect(check(passed({ phone: '+919812345678', email: 'a@example.org' }), 9)).toEqual([['phone', 6]]);
  });

  it('lets a failed row claim nothing, and a repeating row claim none of its other keys', () => {
    const check = createRepeatTracker(provider);
    expect(check({ ok: false, errors: [] }, 2)).toBeUndefined();
    expect(check(passed({ externalId: '41' }), 3)).toBeUndefined();
    expect(check(passed({ externalId: '41', email: 'b@example.org' }), 4)).toEqual([['external_id', 3]]);
    // Row 4 repeated row 3, so its e-mail was not claimed: row 5 is the first with it.
    expect(check(passed({ email: 'b@example.org' }), 5)).toBeUndefined();
    expect(check(passed({ email: 'b@example.org' }), 6)).toEqual([['email', 5]]);
  });
});
