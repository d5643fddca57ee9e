/**
 * `ldp voice-provider`: runs the local voice provider (lib/aggregator/voice/local-provider.ts) as
 * its own process until SIGINT/SIGTERM — the embedded default's peer for voice campaigns, as a
 * real HTTP server. Its secret is VOICE_PROVIDER_SECRET or the one generated into DATA_DIR (the
 * same the platform uses on the same DATA_DIR).
 */
import { createWriteStream } from 'node:fs';
import { startLocalVoiceProvider } from '../../lib/aggregator/voice/local-provider.ts';
import { voiceProviderSecret } from '../../lib/aggregator/voice/provider.ts';
import { CliError, cliConfig } from '../command-context.ts';

function share(name: string, value: string): number {
  const n = Number(value);
  if (!(n >= 0 && n <= 1)) throw new CliError(`${name} must be a number from 0 to 1, not ${value}`);
  return n;
}

function pattern(name: string, value: string | undefined): RegExp | undefined {
  if (value === undefined) return undefined;
  try {
    return new RegExp(value);
  } catch {
    throw new CliError(`${name} must be a regular expression, not ${value}`);
  }
}

function millis(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new CliError(`${name} must be a whole number of milliseconds, not ${value}`);
  return n;
}

export interface VoiceProviderOptions {
  port: string;
  host: string;
  failureRate: string;
  rejectRate: string;
  delay: string;
  latency: string;
  callbacks: boolean;
  failTo?: string;
  holdTo?: string;
  log?: string;
}

/** Starts the provider and prints `voice-provider listening on <url>` once it listens. */
export async function voiceProvider(opts: VoiceProviderOptions): Promise<void> {
  const port = Number(opts.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be 0..65535, not ${opts.port}`);
  const { config } = cliConfig();
  const secret = await voiceProviderSecret(config);
  const log = opts.log ? createWriteStream(opts.log, { flags: 'a' }) : process.stdout;
  const provider = await startLocalVoiceProvider({
    port, host: opts.host, secret, log, previousLog: opts.log,
    failureRate: share('--failure-rate', opts.failureRate), rejectRate: share('--reject-rate', opts.rejectRate),
    delayMs: millis('--delay', opts.delay), latencyMs: millis('--latency', opts.latency), callbacks: opts.callbacks,
    failTo: pattern('--fail-to', opts.failTo), holdTo: pattern('--hold-to', opts.holdTo),
    onProblem: (message) => process.stderr.write(`voice-provider: ${message}\n`),
  }).catch((err: Error) => {
    throw new CliError(`voice provider could not listen on ${opts.host}:${port}: ${err.message}`);
  });
  process.stdout.write(`voice-provider listening on ${provider.url}\n`);
  const stop = async () => {
    await provider.close();
    if (log !== process.stdout) await new Promise((resolve) => (log as ReturnType<typeof createWriteStream>).end(resolve));
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}
