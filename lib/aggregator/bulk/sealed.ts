/**
 * PII at rest for bulk onboarding (issue 15; docs/decisions.md "Hardening"): what a file's rows
 * say — staged chunks, the cells and reasons of failed and skipped rows, dry-run results — is
 * stored as one AES-256-GCM value (lib/platform/crypto.ts, the participants' PII key) and opened
 * only by the code that needs it (a chunk task, the error report, the preview API).
 */
import type { PiiCrypto } from '../../platform/crypto.ts';

/** `value` as JSON, encrypted: `v1.<iv>.<tag>.<ciphertext>` (see PiiCrypto.encrypt). */
export function sealJson(pii: PiiCrypto, value: unknown): string {
  return pii.encrypt(JSON.stringify(value));
}

/**
 * Reverses `sealJson`.
 * @throws Error when the value was tampered with or sealed with another key (PiiCrypto.decrypt).
 */
export function openJson<T>(pii: PiiCrypto, sealed: string): T {
  return JSON.parse(pii.decrypt(sealed)) as T;
}
