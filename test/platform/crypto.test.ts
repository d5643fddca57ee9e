import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createPiiCrypto } from '../../lib/platform/crypto.ts';

const key = randomBytes(32);
const pii = createPiiCrypto(key);

/** Decodes a token's parts, lets `change` alter one of them, and re-encodes the token. */
function alter(token: string, part: 'iv' | 'tag' | 'ct', change: (bytes: Buffer) => Buffer): string {
  const [version, ...rest] = token.split('.');
  const bytes: Buffer[] = rest.map((p) => Buffer.from(p, 'base64url'));
  const index = { iv: 0, tag: 1, ct: 2 }[part];
  bytes[index] = change(Buffer.from(bytes[index]));
  return [version, ...bytes.map((b) => b.toString('base64url'))].join('.');
}

const flip = (at: number) => (b: Buffer) => {
  b[at] ^= 0x01;
  return b;
};

describe('PII encryption (AES-256-GCM)', () => {
  it('round-trips ASCII, non-ASCII and empty values', () => {
    for (const value of ['Asha Devi', '+919812345678', 'Zoë Ñandú · 山田 太郎 · अनीता · 👩🏽‍🌾', '']) {
      const token = pii.encrypt(value);
      expect(token).toMatch(/^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]*$/);
      if (value) expect(token).not.toContain(value);
      expect(pii.decrypt(token)).toBe(value);
    }
  });

  it('uses a fresh IV for every encryption, so equal values give different ciphertexts', () => {
    const tokens = Array.from({ length: 500 }, () => pii.encrypt('same value'));
    expect(new Set(tokens).size).toBe(500);
    expect(new Set(tokens.map((t) => t.split('.')[1])).size).toBe(500);
    expect(tokens.every((t) => pii.decrypt(t) === 'same value')).toBe(true);
  });

  it('detects tampering with the IV, the tag or the ciphertext (every byte position)', () => {
    const token = pii.encrypt('Ravi Kumar');
    const lengths = { iv: 12, tag: 16, ct: Buffer.byteLength('Ravi Kumar') };
    for (const part of ['iv', 'tag', 'ct'] as const) {
      for (let at = 0; at < lengths[part]; at++) {
        const tampered = alter(token, part, flip(at));
        expect(tampered).not.toBe(token);
        expect(() => pii.decrypt(tampered), `${part}[${at}]`).toThrow();
      }
    }
  });

  it('refuses truncated or extended tags, IVs and ciphertexts', () => {
    const token = pii.encrypt('Ravi Kumar');
    // GCM would verify a 4-byte prefix of the tag if allowed: a forgery needs only 2^32 tries then.
    expect(() => pii.decrypt(alter(token, 'tag', (b) => b.subarray(0, 4)))).toThrow('not an encrypted PII value');
    expect(() => pii.decrypt(alter(token, 'tag', (b) => b.subarray(0, 12)))).toThrow('not an encrypted PII value');
    expect(() => pii.decrypt(alter(token, 'iv', (b) => b.subarray(0, 8)))).toThrow('not an encrypted PII value');
    expect(() => pii.decrypt(alter(token, 'iv', (b) => Buffer.concat([b, Buffer.from([0])])))).toThrow();
    expect(() => pii.decrypt(alter(token, 'ct', (b) => b.subarray(0, b.length - 1)))).toThrow();
    expect(() => pii.decrypt(alter(token, 'ct', (b) => Buffer.concat([b, Buffer.from([0])])))).toThrow();
  });

  it('refuses malformed tokens with a clear error', () => {
    const token = pii.encrypt('x');
    for (const bad of ['', 'plain text', token.replace(/^v1/, 'v2'), `${token}.extra`, token.split('.').slice(0, 3).join('.'),
      `${token}!`, token.replace('.', '.=')]) {
      expect(() => pii.decrypt(bad), JSON.stringify(bad)).toThrow('not an encrypted PII value');
    }
  });

  it('cannot be decrypted with another key', () => {
    const token = pii.encrypt('Asha Devi');
    expect(() => createPiiCrypto(randomBytes(32)).decrypt(token)).toThrow();
    // The same key material in a new instance decrypts it (keys are derived deterministically).
    expect(createPiiCrypto(Buffer.from(key)).decrypt(token)).toBe('Asha Devi');
  });

  it('requires a 32-byte master key', () => {
    for (const length of [0, 16, 31, 33, 64]) {
      expect(() => createPiiCrypto(randomBytes(length)), `${length} bytes`).toThrow('PII master key must be 32 bytes');
    }
  });
});

describe('blind index (HMAC-SHA-256)', () => {
  it('is deterministic per key and kind, 32 bytes long', () => {
    const a = pii.blindIndex('phone', '+919812345678');
    expect(a).toHaveLength(32);
    expect(pii.blindIndex('phone', '+919812345678').equals(a)).toBe(true);
    expect(createPiiCrypto(Buffer.from(key)).blindIndex('phone', '+919812345678').equals(a)).toBe(true);
  });

  it('differs across values, kinds and keys', () => {
    const base = pii.blindIndex('email', 'asha@example.org');
    expect(pii.blindIndex('email', 'asha@example.com').equals(base)).toBe(false);
    expect(pii.blindIndex('phone', 'asha@example.org').equals(base)).toBe(false);
    expect(createPiiCrypto(randomBytes(32)).blindIndex('email', 'asha@example.org').equals(base)).toBe(false);
    // The kind/value boundary is unambiguous: ('ab', 'c') and ('a', 'bc') differ.
    expect(pii.blindIndex('ab', 'c').equals(pii.blindIndex('a', 'bc'))).toBe(false);
  });

  it('uses a key derived for indexing, not the master key itself', () => {
    const value = 'asha@example.org';
    const index = pii.blindIndex('email', value);
    expect(createHmac('sha256', key).update(`email\u0000${value}`).digest().equals(index)).toBe(false);
  });

  it('refuses an empty kind or one containing the separator', () => {
    expect(() => pii.blindIndex('', 'x')).toThrow('blind index kind');
    expect(() => pii.blindIndex('a\u0000b', 'x')).toThrow('blind index kind');
  });
});
