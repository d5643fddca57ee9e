/** Structured logging with pino: one JSON line per event, on stderr so stdout stays for command output. */
import { pino, type DestinationStream, type Logger } from 'pino';
import { currentRequestId } from './request-context.ts';

export type { Logger };

/** Field names that hold personal data wherever they appear in a logged object. */
const PII_KEYS = ['phone', 'email', 'phoneNumber', 'guardianPhone', 'guardianEmail', 'guardianName', 'contact', 'owner'];

/** A query parameter's name that is logged as it is; any other name is redacted like the values. */
const PLAIN_QUERY_KEY = /^[A-Za-z0-9_.[\]-]{1,64}$/;
export const REDACTED = '[redacted]';

/**
 * `url` with every query value redacted (`/a?email=[redacted]&page=[redacted]`): a query string can
 * carry an e-mail or a phone (a login link, a search), and request URLs are logged on every request
 * (review of issue 29). Names stay when they look like names, so the log still tells what was asked.
 * Linear in the URL's length.
 */
export function redactQuery(url: string): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const parts = url.slice(q + 1).split('&').map((part) => {
    const eq = part.indexOf('=');
    const name = eq < 0 ? '' : part.slice(0, eq);
    return PLAIN_QUERY_KEY.test(name) ? `${name}=${REDACTED}` : REDACTED;
  });
  return `${url.slice(0, q)}?${parts.join('&')}`;
}

/**
 * pino-http's request serializer (over pino's standard one): the URL through redactQuery and the
 * parsed query's values redacted, on the request line and on every line logged through `req.log`.
 */
export function requestForLog<T extends { url?: unknown; query?: unknown }>(req: T): T {
  if (typeof req.url === 'string') req.url = redactQuery(req.url);
  if (req.query && typeof req.query === 'object') {
    req.query = Object.fromEntries(Object.keys(req.query).map((k) => [PLAIN_QUERY_KEY.test(k) ? k : REDACTED, REDACTED]));
  }
  return req;
}

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
