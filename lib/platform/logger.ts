/** Structured logging with pino: one JSON line per event, on stderr so stdout stays for command output. */
import { pino, type Logger } from 'pino';

export type { Logger };

/** Creates the root logger; `level` is a pino level name (see LOG_LEVEL). */
export function createLogger(level: string, name = 'ldp'): Logger {
  return pino({ name, level, redact: ['req.headers.authorization', 'req.headers["x-api-key"]'] }, pino.destination(2));
}
