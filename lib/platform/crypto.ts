/**
 * PII protection (DESIGN.md, "Data rules"): identity fields are encrypted with AES-256-GCM, and
 * duplicates are found through a keyed HMAC-SHA-256 "blind index" of the normalised value.
 * Both keys are derived with HKDF-SHA-256 (RFC 5869) from one 32-byte master key (PII_KEY).
 */
import { createCipheriv, createDecipheriv, createHmac, createSecretKey, hkdfSync, randomBytes } from 'node:crypto';

const VERSION = 'v1';
const IV_BYTES = 12; // the 96-bit IV GCM is designed for (NIST SP 800-38D §5.2.1.1)
const TAG_BYTES = 16;
/**
 * IVs are cut from one buffer of CSPRNG bytes refilled every 1,024 values (a fresh buffer each
 * time, so an IV handed out is never overwritten): one call into the CSPRNG per 1,024 encryptions
 * instead of one each, which took a fifth of bulk onboarding's encryption time (issue 17). The IVs
 * are as random as before; Node's own randomUUID caches its random bytes the same way.
 */
const IV_POOL_VALUES = 1024;
const BASE64URL = /^[A-Za-z0-9_-]*$/;

export interface PiiCrypto {
  /** Encrypts `plaintext` (UTF-8) to `v1.<iv>.<tag>.<ciphertext>` (base64url parts, fresh 96-bit IV). */
  encrypt(plaintext: string): string;
  /**
   * Reverses `encrypt`. @throws Error when the value is malformed, was tampered with (including a
   * truncated tag) or was made with another key.
   */
  decrypt(token: string): string;
  /**
   * Keyed hash of an already normalised value (E.164 phone, lower-cased e-mail, …), 32 bytes.
   * `kind` separates namespaces, so a phone and an e-mail never share an index value.
   * @throws Error when `kind` is empty or contains NUL (the separator).
   */
  blindIndex(kind: string, normalised: string): Buffer;
}

/** Decodes one base64url part, refusing anything that is not its canonical encoding. */
function decodePart(part: string, bytes?: number): Buffer {
  const buf = Buffer.from(part, 'base64url');
  // Node's decoder skips foreign characters and ignores trailing bits: re-encode to be strict.
  if (!BASE64URL.test(part) || buf.toString('base64url') !== part || (bytes !== undefined && buf.length !== bytes)) {
    throw new Error('not an encrypted PII value');
  }
  return buf;
}

/** Creates the PII helpers from a 32-byte master key. @throws Error when the key is not 32 bytes. */
export function createPiiCrypto(masterKey: Buffer): PiiCrypto {
  if (masterKey.length !== 32) throw new Error('PII master key must be 32 bytes');
  const encKey = createSecretKey(Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'ldp-pii-aes-256-gcm', 32)));
  const macKey = Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'ldp-pii-blind-index', 32));
  let ivPool = Buffer.alloc(0);
  let ivOffset = 0;
  const freshIv = () => {
    if (ivOffset === ivPool.length) {
      ivPool = randomBytes(IV_BYTES * IV_POOL_VALUES);
      ivOffset = 0;
    }
    ivOffset += IV_BYTES;
    return ivPool.subarray(ivOffset - IV_BYTES, ivOffset);
  };
  return {
    encrypt(plaintext) {
      const iv = freshIv();
      const cipher = createCipheriv('aes-256-gcm', encKey, iv, { authTagLength: TAG_BYTES });
      const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return [VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), ct.toString('base64url')].join('.');
    },
    decrypt(token) {
      const parts = token.split('.');
      if (parts.length !== 4 || parts[0] !== VERSION) throw new Error('not an encrypted PII value');
      const iv = decodePart(parts[1], IV_BYTES);
      // A full-length tag only: GCM would otherwise verify a truncated tag (easy forgery).
      const tag = decodePart(parts[2], TAG_BYTES);
      const ct = decodePart(parts[3]);
      const decipher = createDecipheriv('aes-256-gcm', encKey, iv, { authTagLength: TAG_BYTES });
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(ct), decipher.final()]).toString('utf8');
    },
    blindIndex(kind, normalised) {
      if (!kind || kind.includes('\u0000')) throw new Error('blind index kind must be a non-empty string without NUL');
      return createHmac('sha256', macKey).update(`${kind}\u0000${normalised}`).digest();
    },
  };
}
