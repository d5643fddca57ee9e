/** Structured logging with pino: one JSON line per event, on stderr so stdout stays for command output. */
import { pino, type DestinationStream, type Logger } from 'pino';
import { currentRequestId } from './request-context.ts';

export type { Logger };

/** Field names that hold personal data wherever they appear in a logged object. */
const PII_KEYS = ['phone', 'email', 'phoneNumber', 'guardianPhone', 'guardianEmail', 'guardianName', 'contact', 'owner'];

/**
 * Creates the root logger; `level` is a pino level name (see LOG_LEVEL). Every line written while a
 * request or a job runs carries its `requestId` (lib/platform/request-context.ts). Lines go to
 * `destination` (default stderr).
 */
export function createLogger(level: string, name = 'ldp', destination: DestinationStream = pino.destination(2)): Logger {
  return pino({
    name, level,
    // Credentials, and the known places personal data could reach a log line (a request body, a
    // contact field logged with an error); test/platform/pii-in-logs.test.ts checks a whole run.
    redact: [
      'req.headers.authorization', 'req.headers["x-api-key"]', 'req.headers.cookie', 'res.headers["set-cookie"]',
      'req.body', 'body', ...PII_KEYS, ...PII_KEYS.map((key) => `*.${key}`),
    ],
    mixin: () => {
      const requestId = currentRequestId();
      return requestId ? { requestId } : {};
    },
  }, destination);
}
