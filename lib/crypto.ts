/**
 * PII protection (DESIGN.md, "Data rules"): identity fields are encrypted with AES-256-GCM, and
 * duplicates are found through a keyed HMAC-SHA-256 "blind index" of the normalised value.
 * Both keys are derived with HKDF-SHA-256 (RFC 5869) from one 32-byte master key (PII_KEY).
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';

const VERSION = 'v1';

export interface PiiCrypto {
  /** Encrypts `plaintext` (UTF-8) to `v1.<iv>.<tag>.<ciphertext>` (base64url parts, fresh 96-bit IV). */
  encrypt(plaintext: string): string;
  /** Reverses `encrypt`. @throws Error when the value was tampered with or made with another key. */
  decrypt(token: string): string;
  /**
   * Keyed hash of an already normalised value (E.164 phone, lower-cased e-mail, …), 32 bytes.
   * `kind` separates namespaces, so a phone and an e-mail never share an index value.
   */
  blindIndex(kind: string, normalised: string): Buffer;
}

/** Creates the PII helpers from a 32-byte master key. @throws Error when the key is not 32 bytes. */
export function createPiiCrypto(masterKey: Buffer): PiiCrypto {
  if (masterKey.length !== 32) throw new Error('PII master key must be 32 bytes');
  const encKey = Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'ldp-pii-aes-256-gcm', 32));
  const macKey = Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'ldp-pii-blind-index', 32));
  return {
    encrypt(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', encKey, iv);
      const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return [VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), ct.toString('base64url')].join('.');
    },
    decrypt(token) {
      const [version, iv, tag, ct] = token.split('.');
      if (version !== VERSION || !iv || !tag || ct === undefined) throw new Error('not an encrypted PII value');
      const decipher = createDecipheriv('aes-256-gcm', encKey, Buffer.from(iv, 'base64url'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8');
    },
    blindIndex(kind, normalised) {
      return createHmac('sha256', macKey).update(`${kind}\u0000${normalised}`).digest();
    },
  };
}
