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
const BASE64URL_DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

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

/**
 * Whether `part` is the canonical unpadded base64url encoding of some bytes (RFC 4648 §5, §3.5):
 * only the alphabet's characters, no dangling single character, and zero bits after the last
 * byte. Node's decoder skips foreign characters and ignores trailing bits; checked here instead
 * of encoding the decoded bytes again and comparing (a second copy of a ~1 MB sealed chunk).
 */
function isCanonicalBase64url(part: string): boolean {
  if (!BASE64URL.test(part)) return false;
  const rest = part.length % 4;
  if (rest === 0) return true;
  if (rest === 1) return false;
  const last = BASE64URL_DIGITS.indexOf(part[part.length - 1]);
  // Two characters carry one byte (4 bits left over), three carry two (2 bits left over).
  return (last & (rest === 2 ? 0x0f : 0x03)) === 0;
}

/**
 * `head` followed by `tail`: GCM is a stream mode, so `final()` returns no bytes and `head` is
 * used as it is, not copied (a sealed chunk is ~1 MB).
 */
function joined(head: Buffer, tail: Buffer): Buffer {
  return tail.length ? Buffer.concat([head, tail]) : head;
}

/** Decodes one base64url part, refusing anything that is not its canonical encoding. */
function decodePart(part: string, bytes?: number): Buffer {
  if (!isCanonicalBase64url(part)) throw new Error('not an encrypted PII value');
  const buf = Buffer.from(part, 'base64url');
  if (bytes !== undefined && buf.length !== bytes) throw new Error('not an encrypted PII value');
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
      const ct = joined(cipher.update(plaintext, 'utf8'), cipher.final());
      return `${VERSION}.${iv.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}.${ct.toString('base64url')}`;
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
      return joined(decipher.update(ct), decipher.final()).toString('utf8');
    },
    blindIndex(kind, normalised) {
      if (!kind || kind.includes('\u0000')) throw new Error('blind index kind must be a non-empty string without NUL');
      return createHmac('sha256', macKey).update(`${kind}\u0000${normalised}`).digest();
    },
  };
}
